#!/usr/bin/env bash
# What checkpoints cost a durable run per call as it grows (BENCHMARKS.md, "Durable runs").
# Usage: scripts/bench-journal.sh BIN [BIN...]   (each BIN a build of `journal-bench`)
# Each row runs every BIN one after the other, so the builds are measured side by side.
# The SQLite files go to $BENCH_DIR (default /tmp/journal-bench), which must be on a disk.
set -euo pipefail
dir=${BENCH_DIR:-/tmp/journal-bench}
mkdir -p "$dir"
for n in ${CALLS:-25 100 400 1000}; do
  for store in none memory sqlite; do
    for bin in "$@"; do
      printf '%s %s ' "$(basename "$bin")" "$store"
      "$bin" sequential "$store" "$n" "$dir"
    done
  done
done
for bin in "$@"; do
  printf '%s ' "$(basename "$bin")"
  "$bin" concurrent "${RUNS:-100}" "${RUN_CALLS:-20}" "$dir"
done
