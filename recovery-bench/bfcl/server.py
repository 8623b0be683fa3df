"""BFCL's multi-turn simulators served as MCP tools over stdio, with faults injected here.

A minimal MCP server (JSON-RPC 2.0, one message a line): `initialize`, `ping`, `tools/list`
and `tools/call`, nothing else. Synchronous on purpose: a call that "times out" is simply never
answered, and the client's own timeout ends it.

Everything BFCL's is imported from the installed `bfcl-eval` package, unmodified: the tasks
and their ground truth, the simulator classes (run through BFCL's own executor,
`execute_multi_turn_func_call`), and the checker functions (`state_checker`,
`response_checker`). What is ours: this server, its faults, its idempotency keys and its log.

Besides BFCL's tools it lists three control tools, which the benchmark calls outside the
agent (never offered to a model, never faulted):

* `bench_reset`: a new task run (its simulator state, fault seed and rate, dedup on or off);
  answers the task's questions, its ground-truth calls as name and arguments, and its tools.
* `bench_turn_end`: the end of a user turn; the simulators' state is kept for the checker.
* `bench_score`: BFCL's checker on each turn's kept state and results against the ground
  truth's; the duplicate effects counted from this server's log.
"""

import ast
import copy
import hashlib
import inspect
import json
import os
import pickle
import sys

from bfcl_eval.constants.executable_backend_config import (
    CLASS_FILE_PATH_MAPPING,
    MULTI_TURN_FUNC_DOC_FILE_MAPPING,
)
from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import (
    response_checker,
    state_checker,
)
from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import (
    execute_multi_turn_func_call,
)

KEY_META = "agent-errors/idempotency-key"
CATEGORY = "multi_turn_base"
CLASSES = [
    "GorillaFileSystem",
    "MathAPI",
    "MessageAPI",
    "TwitterAPI",
    "TicketAPI",
    "TradingBot",
    "TravelAPI",
    "VehicleControlAPI",
]
FAULTS = ["transient", "timeout", "rate_limited", "lost_answer", "error_body"]
DATA = os.path.join(os.path.dirname(multi_turn_utils.__file__), "..", "..", "data")


def load_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def json_schema(schema):
    """BFCL writes Python's type names (`dict`, `float`, `tuple`, `any`); MCP wants JSON Schema."""
    if isinstance(schema, list):
        return [json_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key == "type" and isinstance(value, str):
            mapped = {"dict": "object", "float": "number", "tuple": "array"}.get(value, value)
            if mapped == "any":
                continue
            out[key] = mapped
        elif key == "properties" and isinstance(value, dict):
            out[key] = {name: json_schema(v) for name, v in value.items()}
        else:
            out[key] = json_schema(value)
    return out


# The functions this server declares read-only (MCP's `readOnlyHint`), as a careful author of
# such a server would: those whose BFCL description says they read, compute or report and
# change nothing. BFCL's data says nothing of it; the list is ours. Not listed although the
# checked state does not show a change: `cd` and the logins (they change the session a later
# call runs in), `contact_customer_support` and `notify_price_change` (they reach someone).
# The bench's duplicate-effect count would show a listed function that changed the state.
READ_ONLY = {
    # GorillaFileSystem
    "cat", "diff", "du", "find", "grep", "ls", "pwd", "sort", "tail", "wc",
    # MathAPI: every function
    "absolute_value", "add", "divide", "imperial_si_conversion", "logarithm", "max_value",
    "mean", "min_value", "multiply", "percentage", "power", "round_number",
    "si_unit_conversion", "square_root", "standard_deviation", "subtract", "sum_values",
    # MessageAPI
    "get_message_stats", "get_user_id", "list_users", "message_get_login_status",
    "search_messages", "view_messages_sent",
    # TicketAPI
    "get_ticket", "get_user_tickets", "ticket_get_login_status",
    # TradingBot
    "filter_stocks_by_price", "get_account_info", "get_available_stocks", "get_current_time",
    "get_order_details", "get_order_history", "get_stock_info", "get_symbol_by_name",
    "get_transaction_history", "get_watchlist", "trading_get_login_status",
    # TravelAPI
    "compute_exchange_rate", "get_all_credit_cards", "get_booking_history",
    "get_budget_fiscal_year", "get_credit_card_balance", "get_flight_cost",
    "get_nearest_airport_by_city", "list_all_airports", "retrieve_invoice",
    "travel_get_login_status", "verify_traveler_information",
    # TwitterAPI
    "get_tweet", "get_tweet_comments", "get_user_stats", "get_user_tweets",
    "list_all_following", "posting_get_login_status", "search_tweets",
    # VehicleControlAPI
    "check_tire_pressure", "displayCarStatus", "display_log", "estimate_distance",
    "estimate_drive_feasibility_by_mileage", "find_nearest_tire_shop", "gallon_to_liter",
    "get_current_speed", "get_outside_temperature_from_google",
    "get_outside_temperature_from_weather_com", "get_zipcode_based_on_city", "liter_to_gallon",
}


def load_tools():
    tools, owner = [], {}
    for class_name in CLASSES:
        doc = os.path.join(DATA, "multi_turn_func_doc", MULTI_TURN_FUNC_DOC_FILE_MAPPING[class_name])
        for entry in load_jsonl(doc):
            owner[entry["name"]] = class_name
            tools.append(
                {
                    "name": entry["name"],
                    "description": entry["description"][:1024],
                    "inputSchema": json_schema(entry["parameters"]),
                    "annotations": {"readOnlyHint": entry["name"] in READ_ONLY},
                }
            )
    unknown = READ_ONLY - owner.keys()
    assert not unknown, f"READ_ONLY names no BFCL function: {sorted(unknown)}"
    return tools, owner


def control_tool(name, properties):
    return {
        "name": name,
        "description": "benchmark control",
        "inputSchema": {"type": "object", "properties": properties},
    }


TOOLS, OWNER = load_tools()
CONTROL = [
    control_tool(
        "bench_reset",
        {
            "task": {"type": "integer"},
            "seed": {"type": "integer"},
            "rate": {"type": "number"},
            "dedup": {"type": "boolean"},
        },
    ),
    control_tool("bench_turn_end", {}),
    control_tool("bench_applied", {"key": {"type": "string"}}),
    control_tool("bench_score", {}),
]
TASKS = load_jsonl(os.path.join(DATA, f"BFCL_v4_{CATEGORY}.json"))
ANSWERS = {
    a["id"]: a["ground_truth"]
    for a in load_jsonl(os.path.join(DATA, "possible_answer", f"BFCL_v4_{CATEGORY}.json"))
}


def method_of(class_name, name):
    module = __import__(CLASS_FILE_PATH_MAPPING[class_name], fromlist=[class_name])
    return getattr(getattr(module, class_name), name)


def parse_call(text):
    """A ground-truth call (`mv(source='a', destination='b')`, `sort('f')`) as name and
    keyword arguments, positional ones named from the simulator method's signature."""
    node = ast.parse(text, mode="eval").body
    name = node.func.id
    args = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords}
    if node.args:
        params = [p for p in inspect.signature(method_of(OWNER[name], name)).parameters if p != "self"]
        for param, value in zip(params, node.args):
            args[param] = ast.literal_eval(value)
    return {"name": name, "arguments": json.loads(json.dumps(args))}


def call_text(name, args):
    return f"{name}(" + ", ".join(f"{k}={v!r}" for k, v in args.items()) + ")"


def canonical(args):
    return json.dumps(args, sort_keys=True)


def fingerprint(instances):
    """The state BFCL's checker compares: every public attribute of every instance."""
    return pickle.dumps(
        {c: {k: v for k, v in vars(i).items() if not k.startswith("_")} for c, i in sorted(instances.items())}
    )


def forget(model_name):
    """BFCL's executor keeps instances in its module's globals by name; drop a finished run's."""
    prefix = model_name + "_"
    for name in [n for n in vars(multi_turn_utils) if n.startswith(prefix)]:
        delattr(multi_turn_utils, name)


class Executor:
    """One set of simulator instances, driven through BFCL's own executor."""

    def __init__(self, task, model_name):
        self.task = task
        self.model_name = model_name
        _, self.instances = self.run([])

    def run(self, calls):
        return execute_multi_turn_func_call(
            func_call_list=calls,
            initial_config=self.task["initial_config"],
            involved_classes=self.task["involved_classes"],
            model_name=self.model_name,
            test_entry_id=self.task["id"],
        )

    def call(self, name, args):
        """Runs one call; answers its result and whether it changed the checked state."""
        before = fingerprint(self.instances)
        results, self.instances = self.run([call_text(name, args)])
        return results[0], fingerprint(self.instances) != before


GROUND_TRUTH = {}


def ground_truth(index):
    """Per turn: the state after the ground truth's calls, their results, and how many times
    each (tool, arguments) changed the state. Computed once per task."""
    if index in GROUND_TRUTH:
        return GROUND_TRUTH[index]
    task = TASKS[index]
    name = f"benchgt{os.getpid()}x{index}"
    executor = Executor(task, name)
    turns = []
    for turn_calls in ANSWERS[task["id"]]:
        results, effects = [], {}
        for text in turn_calls:
            call = parse_call(text)
            result, changed = executor.call(call["name"], call["arguments"])
            results.append(result)
            if changed:
                key = (call["name"], canonical(call["arguments"]))
                effects[key] = effects.get(key, 0) + 1
        turns.append(
            {
                "calls": [parse_call(t) for t in turn_calls],
                "instances": copy.deepcopy(executor.instances),
                "results": results,
                "effects": effects,
            }
        )
    forget(name)
    GROUND_TRUTH[index] = turns
    return turns


def unit(*parts):
    digest = hashlib.sha256("|".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


class Run:
    """One task run: its simulators, faults, keys and log."""

    counter = 0

    def __init__(self, index, seed, rate, dedup):
        Run.counter += 1
        self.index, self.seed, self.rate, self.dedup = index, seed, rate, dedup
        self.task = TASKS[index]
        self.model_name = f"benchrun{os.getpid()}x{Run.counter}"
        self.executor = Executor(self.task, self.model_name)
        self.turn = 0
        self.arrivals = {}
        self.answered = {}  # idempotency key -> the first applied call's result
        # The same, kept with dedup off too: a service that records each request's key and can
        # be asked about one, though it does not deduplicate by it (`bench_applied`).
        self.applied_keys = {}
        self.log = []  # every applied call: (turn, tool, arguments, changed the state)
        self.results = [[]]  # per turn, the results of calls whose answer was sent
        self.snapshots = []
        self.tool_calls = 0
        self.faults = {f: 0 for f in FAULTS}
        self.sent = set()  # keys whose answer was sent
        self.late = 0  # calls repeated under a key whose answer was sent: the client gave up on it

    def fault(self, name, args):
        place = (self.turn, name, canonical(args))
        n = self.arrivals.get(place, 0)
        self.arrivals[place] = n + 1
        if self.rate <= 0 or unit(self.seed, self.index, *place, n) >= self.rate:
            return None
        return FAULTS[int(unit("kind", self.seed, self.index, *place, n) * len(FAULTS))]

    def call(self, name, args, key):
        """The answer to one call: (text, is_error), or None for an answer never sent."""
        self.tool_calls += 1
        if key is not None and key in self.sent:
            self.late += 1
        fault = self.fault(name, args)
        if fault:
            self.faults[fault] += 1
        if fault == "transient":
            return "HTTP 503 Service Unavailable: the service is temporarily unavailable", True
        if fault == "rate_limited":
            return "HTTP 429 Too Many Requests; Retry-After: 1", True
        if fault == "timeout":
            return None
        if fault == "error_body":
            return json.dumps({"error": "Service temporarily unavailable, please try again later"}), False
        if self.dedup and key is not None and key in self.answered:
            result = self.answered[key]
        else:
            result, changed = self.executor.call(name, args)
            self.log.append((self.turn, name, canonical(args), changed))
            if key is not None:
                self.answered[key] = result
                self.applied_keys.setdefault(key, result)
        if fault == "lost_answer":
            return "HTTP 504 Gateway Timeout: the upstream service did not answer in time", True
        if key is not None:
            self.sent.add(key)
        self.results[-1].append(result)
        return result, False

    def turn_end(self):
        self.snapshots.append(copy.deepcopy(self.executor.instances))
        self.turn += 1
        self.results.append([])
        return {"turn": self.turn}

    def score(self):
        truth = ground_truth(self.index)
        verdict = {"valid": True}
        seen = []
        for t, expected in enumerate(truth):
            if t >= len(self.snapshots):
                verdict = {"valid": False, "error_type": "turn not run"}
                break
            seen.extend(self.results[t])
            if not expected["calls"]:
                continue
            verdict = state_checker(self.snapshots[t], expected["instances"])
            if verdict["valid"]:
                verdict = response_checker(seen, expected["results"], t)
            if not verdict["valid"]:
                verdict = {"valid": False, "error_type": f"turn {t}: {verdict.get('error_type')}"}
                break
        duplicates = []
        for t, expected in enumerate(truth):
            applied = {}
            for turn, name, args, changed in self.log:
                if turn == t and changed:
                    applied[(name, args)] = applied.get((name, args), 0) + 1
            for (name, args), n in applied.items():
                extra = n - expected["effects"].get((name, args), 0)
                if extra > 0:
                    duplicates.append({"turn": t, "tool": name, "arguments": args, "extra": extra})
        forget(self.model_name)
        return {
            "passed": verdict["valid"],
            "why": verdict.get("error_type"),
            "duplicates": sum(d["extra"] for d in duplicates),
            "duplicate_detail": duplicates,
            "tool_calls": self.tool_calls,
            "faults": self.faults,
            "late_answers": self.late,
        }


def reset(args):
    index = int(args["task"])
    run = Run(index, int(args.get("seed", 1)), float(args.get("rate", 0.0)), bool(args.get("dedup", True)))
    task = run.task
    truth = ground_truth(index)
    return run, {
        "id": task["id"],
        "questions": [" ".join(m["content"] for m in turn if m["role"] == "user") for turn in task["question"]],
        "ground_truth": [turn["calls"] for turn in truth],
        "tools": [t["name"] for t in TOOLS if OWNER[t["name"]] in task["involved_classes"]],
        "tasks": len(TASKS),
    }


def text_result(text, is_error=False):
    return {"content": [{"type": "text", "text": text}], "isError": is_error}


class Server:
    def __init__(self):
        self.run = None

    def tools_call(self, params):
        name = params.get("name")
        args = params.get("arguments") or {}
        meta = params.get("_meta") or {}
        if name == "bench_reset":
            self.run, answer = reset(args)
            return text_result(json.dumps(answer))
        if name == "bench_turn_end":
            return text_result(json.dumps(self.run.turn_end()))
        if name == "bench_applied":
            key = str(args.get("key", ""))
            applied = self.run is not None and key in self.run.applied_keys
            result = self.run.applied_keys[key] if applied else None
            if applied:
                # The reconciler hands this result to the model as the call's: it is among the
                # results the model received, which BFCL's response checker reads.
                self.run.results[-1].append(result)
            return text_result(json.dumps({"applied": applied, "result": result}))
        if name == "bench_score":
            return text_result(json.dumps(self.run.score()))
        if name not in OWNER or self.run is None:
            return text_result(f"unknown tool {name}", True)
        answer = self.run.call(name, args, meta.get(KEY_META))
        return None if answer is None else text_result(*answer)

    def handle(self, message):
        method, params = message.get("method"), message.get("params") or {}
        if method == "initialize":
            return {
                "protocolVersion": params.get("protocolVersion", "2025-03-26"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "bfcl-simulators", "version": "1"},
            }
        if method == "ping":
            return {}
        if method == "tools/list":
            return {"tools": TOOLS + CONTROL}
        if method == "tools/call":
            return self.tools_call(params)
        raise LookupError(method)


def main():
    server = Server()
    out = sys.stdout
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        if "id" not in message:
            continue  # a notification: initialized, cancelled
        try:
            result = server.handle(message)
            if result is None:
                continue  # the answer is lost: the client's timeout ends the call
            reply = {"jsonrpc": "2.0", "id": message["id"], "result": result}
        except LookupError as e:
            reply = {"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": f"method not found: {e}"}}
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
