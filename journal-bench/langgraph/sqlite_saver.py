"""LangGraph's SqliteSaver on the run shape of `journal-bench sequential sqlite N`: each step
appends an assistant message calling a tool and the tool's ~4 KB result, checkpointed to a
SQLite file on disk. Prints milliseconds per step and KB this process wrote to disk per step
(/proc/self/io write_bytes), as journal-bench does.

    python3 journal-bench/langgraph/sqlite_saver.py N [dir]

Needs `pip install langgraph langgraph-checkpoint-sqlite` (versions printed with the figures).
"""

import importlib.metadata
import os
import sqlite3
import sys
import time
from typing import Annotated, TypedDict

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

ANSWER_BYTES = 4096


class State(TypedDict):
    messages: Annotated[list, add_messages]


def write_bytes() -> int:
    with open("/proc/self/io") as io:
        for line in io:
            if line.startswith("write_bytes: "):
                return int(line.split()[1])
    return 0


def graph(steps: int, saver: SqliteSaver):
    def agent(state: State):
        made = sum(1 for m in state["messages"] if isinstance(m, ToolMessage))
        if made >= steps:
            return {"messages": [AIMessage(content="done")]}
        call = {"id": f"call_{made}", "name": "fetch", "args": {"page": made}}
        return {"messages": [AIMessage(content="", tool_calls=[call])]}

    def tool(state: State):
        call = state["messages"][-1].tool_calls[0]
        text = f"page {call['args']['page']}: "
        while len(text) < ANSWER_BYTES:
            text += "lorem ipsum dolor sit amet, consectetur adipiscing elit. "
        return {"messages": [ToolMessage(content=text[:ANSWER_BYTES], tool_call_id=call["id"])]}

    def route(state: State):
        return "tool" if state["messages"][-1].tool_calls else END

    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_node("tool", tool)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, ["tool", END])
    builder.add_edge("tool", "agent")
    return builder.compile(checkpointer=saver)


def main():
    steps = int(sys.argv[1])
    directory = sys.argv[2] if len(sys.argv) > 2 else "/tmp"
    path = os.path.join(directory, f"langgraph-bench-{os.getpid()}.db")
    connection = sqlite3.connect(path, check_same_thread=False)
    saver = SqliteSaver(connection)
    saver.setup()
    app = graph(steps, saver)
    config = {"configurable": {"thread_id": "run-1"}, "recursion_limit": 2 * steps + 10}
    # A short run first, as journal-bench warms up: the measured one pays nothing set up once.
    graph(3, saver).invoke({"messages": [HumanMessage("warm up")]}, {**config, "configurable": {"thread_id": "warm"}})
    written = write_bytes()
    started = time.perf_counter()
    final = app.invoke({"messages": [HumanMessage("go")]}, config)
    elapsed = time.perf_counter() - started
    written = write_bytes() - written
    assert final["messages"][-1].content == "done"
    versions = " ".join(
        f"{p}={importlib.metadata.version(p)}"
        for p in ["langgraph", "langgraph-checkpoint", "langgraph-checkpoint-sqlite"]
    )
    print(
        f"steps={steps} ms_per_step={elapsed * 1000 / steps:.2f} "
        f"kb_written_per_step={written / 1024 / steps:.1f} {versions}"
    )
    connection.close()
    for suffix in ["", "-wal", "-shm"]:
        try:
            os.remove(path + suffix)
        except FileNotFoundError:
            pass


if __name__ == "__main__":
    main()
