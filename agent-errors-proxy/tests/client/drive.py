"""Drives agent-errors-proxy over stdio with the official MCP Python SDK, as any host would.

    python drive.py SCENARIO PROXY_BINARY_OR_URL CONFIG_FILE [WORK_DIR]

A binary is started on stdio with `--config CONFIG_FILE`; a URL (`http://...`) is reached over
streamable HTTP.

Prints one JSON object on stdout: what the client saw. The Rust test asserts on it.
"""

import asyncio
import json
import sys

from contextlib import asynccontextmanager

from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp import types


def text_of(result):
    return "".join(getattr(block, "text", "") for block in result.content)


@asynccontextmanager
async def connect(target, config):
    if target.startswith("http"):
        async with streamable_http_client(target) as streams:
            yield streams[0], streams[1]
    else:
        params = StdioServerParameters(command=target, args=["--config", config])
        async with stdio_client(params) as (read, write):
            yield read, write


async def main(scenario, target, config, work):
    seen = {"list_changed": 0}

    async def on_message(message):
        if isinstance(message, Exception):
            return
        root = getattr(message, "root", message)
        if getattr(root, "method", "") == "notifications/tools/list_changed":
            seen["list_changed"] += 1

    asked = []

    async def elicit(context, params):
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": True})

    callback = elicit if scenario != "no_elicitation" else None
    async with connect(target, config) as (read, write):
        async with ClientSession(read, write, elicitation_callback=callback, message_handler=on_message) as session:
            await session.initialize()
            tools = await session.list_tools()
            seen["tools"] = sorted(tool.name for tool in tools.tools)
            if scenario == "recovery":
                flaky = await session.call_tool("flaky", {"marker": f"{work}/flaky", "failures": 2})
                seen["flaky"] = {"error": flaky.is_error, "text": text_of(flaky)}
                broken = []
                for _ in range(3):
                    result = await session.call_tool("fail", {"text": "HTTP 500 Internal Server Error"})
                    broken.append({"error": result.is_error, "text": text_of(result)})
                seen["broken"] = broken
                # The notification may trail the answer that caused it: wait for it, bounded.
                for _ in range(100):
                    if seen["list_changed"]:
                        break
                    await asyncio.sleep(0.05)
                seen["tools_after"] = sorted(tool.name for tool in (await session.list_tools()).tools)
            elif scenario == "flaky":
                flaky = await session.call_tool("flaky", {"marker": f"{work}/flaky", "failures": 2})
                seen["flaky"] = {"error": flaky.is_error, "text": text_of(flaky)}
            elif scenario == "caps":
                answers = []
                for name, args in [("echo", {"text": "one"}), ("echo", {"text": "two"}), ("meta", {})]:
                    result = await session.call_tool(name, args)
                    answers.append({"error": result.is_error, "text": text_of(result)})
                seen["answers"] = answers
            elif scenario in ("approval", "no_elicitation"):
                result = await session.call_tool("echo", {"text": "refund 150 to alice"})
                seen["echo"] = {"error": result.is_error, "text": text_of(result)}
                seen["asked"] = asked
    print(json.dumps(seen))


if __name__ == "__main__":
    args = sys.argv[1:]
    asyncio.run(main(args[0], args[1], args[2], args[3] if len(args) > 3 else "."))
