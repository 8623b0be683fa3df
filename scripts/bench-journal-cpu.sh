#!/usr/bin/env bash
# What a durable run's checkpoints cost per call in time, on a machine others share
# (BENCHMARKS.md, "Durable runs"): every (build, store, N) is run REPEAT times (default 5), the
# builds and sizes alternating, and the medians printed: the wall time per call journal-bench
# reports, and the CPU time per call, from `perf stat`'s task-clock of the whole process less
# the median of a run of 0 calls, over N. The CPU time leaves out the waits for the disk's
# flushes and for a CPU another process holds, which are most of the wall time when the
# machine is busy. Usage: scripts/bench-journal-cpu.sh BIN [BIN...]  (BENCH_DIR as in
# bench-journal.sh)
set -euo pipefail
dir=${BENCH_DIR:-/tmp/journal-bench}
mkdir -p "$dir"
raw=$(mktemp)
for _ in $(seq "${REPEAT:-5}"); do
  for n in 0 ${CALLS:-25 100 400 1000}; do
    for store in memory sqlite; do
      for bin in "$@"; do
        out=$(perf stat -x, -e task-clock "$bin" sequential "$store" "$n" "$dir" 2>&1)
        echo "$(basename "$bin") $store $n $(grep '^calls=' <<<"$out") task_ms=$(grep task-clock <<<"$out" | cut -d, -f1)"
      done
    done
  done
done >"$raw"
python3 - "$raw" <<'PY'
import collections, re, statistics, sys
wall, task = collections.defaultdict(list), collections.defaultdict(list)
for line in open(sys.argv[1]):
    m = re.match(r"(\S+) (\w+) (\d+) calls=\d+ us_per_call=(\S+) .* task_ms=([\d.]+)", line)
    if m:
        key = (m[1], m[2], int(m[3]))
        task[key].append(float(m[5]))
        if key[2]:
            wall[key].append(float(m[4]))
for (bin, store, n), walls in sorted(wall.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][0])):
    base = statistics.median(task[(bin, store, 0)])
    cpu = (statistics.median(task[(bin, store, n)]) - base) * 1000 / n
    print(f"{bin} {store} calls={n} wall_us_per_call={statistics.median(walls):.1f} cpu_us_per_call={cpu:.1f}")
PY
rm -f "$raw"
