"""Holds the hot path's instruction counts to their limits: the last step of
scripts/check-instructions.sh, which runs the gungraun bench first.

    python3 scripts/check_instruction_limits.py <limits.toml> <gungraun summaries dir>

Reads each count's summary.json (gungraun's summary format v6), turns the counts for N calls and
for 0 calls into instructions per call, prints every figure beside its limit and target, and
exits 1 when a figure is past its limit, naming it.
"""

import json
import pathlib
import sys
import tomllib


def instructions(summary):
    """Callgrind's instruction count (Ir) of this run, not of the baseline it is compared with."""
    for profile in summary["profiles"]:
        if profile["tool"] == "Callgrind":
            metrics = profile["summaries"]["total"]["summary"]["Callgrind"]["Ir"]["metrics"]
            new = metrics["Left"] if "Left" in metrics else metrics["Both"][0]
            return new["Int"] if isinstance(new, dict) else new
    raise SystemExit(f"no callgrind count in {summary['module_path']} {summary['id']}")


def per_call(summaries_dir):
    """Instructions per call of each workload: (count for N calls - count for 0) / N.

    A bench's id is `<workload>_<calls>`, as benches/instruction_limits.rs names them.
    """
    counts = {}
    for path in pathlib.Path(summaries_dir).rglob("summary.json"):
        summary = json.loads(path.read_text())
        workload, _, calls = summary["id"].rpartition("_")
        counts.setdefault(workload, {})[int(calls)] = instructions(summary)
    figures = {}
    for workload, by_calls in counts.items():
        many = max(by_calls)
        if 0 not in by_calls or many == 0:
            raise SystemExit(f"`{workload}` needs a count for 0 calls and one for N: {by_calls}")
        figures[workload] = (by_calls[many] - by_calls[0]) / many
    return figures


def value(check, figures):
    """The checked figure: a workload's count, or its ratio to another workload's."""
    for name in filter(None, (check["workload"], check.get("per"))):
        if name not in figures:
            raise SystemExit(f"no count for `{name}` (counted: {', '.join(sorted(figures))})")
    figure = figures[check["workload"]]
    return figure / figures[check["per"]] if "per" in check else figure


def show(number, is_ratio):
    return f"{number:.2f}x" if is_ratio else f"{number:,.0f}"


def main():
    limits_file, summaries_dir = sys.argv[1:3]
    checks = tomllib.loads(pathlib.Path(limits_file).read_text())["check"]
    figures = per_call(summaries_dir)

    print("\nInstructions per call (callgrind, release build):")
    for workload, figure in sorted(figures.items()):
        print(f"  {workload:<18} {figure:>10,.0f}")

    print(f"\nLimits ({limits_file}):")
    print(f"  {'figure':<34} {'now':>9} {'limit':>9} {'target':>9}")
    failed = []
    for check in checks:
        is_ratio = "per" in check
        name = check["workload"] + (f" / {check['per']}" if is_ratio else "")
        now = value(check, figures)
        past = now > check["limit"]
        mark = "  PAST ITS LIMIT" if past else ""
        print(
            f"  {name:<34} {show(now, is_ratio):>9} {show(check['limit'], is_ratio):>9}"
            f" {show(check['target'], is_ratio):>9}{mark}"
        )
        if past:
            failed.append((name, now, check, is_ratio))

    for name, now, check, is_ratio in failed:
        print(
            f"\nerror: {name} is {show(now, is_ratio)}, past its limit of"
            f" {show(check['limit'], is_ratio)}: {check['what']}. The hot path got slower;"
            f" find the cause with `bash scripts/callgrind.sh` and callgrind_annotate, or raise"
            f" the limit in {limits_file} with the reason.",
            file=sys.stderr,
        )
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
