#!/usr/bin/env bash
# What checkpoints cost a durable run per call as it grows (BENCHMARKS.md, "Durable runs").
# Usage: scripts/bench-journal.sh BIN [BIN...]   (each BIN a build of `journal-bench`)
# Each row runs every BIN one after the other, so the builds are measured side by side, then
# LangGraph's SqliteSaver on the same run shape (journal-bench/langgraph/sqlite_saver.py;
# `pip install langgraph langgraph-checkpoint-sqlite`; LANGGRAPH=0 leaves it out).
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
  if [ "${LANGGRAPH:-1}" != 0 ]; then
    printf 'langgraph sqlite '
    python3 "$(dirname "$0")/../journal-bench/langgraph/sqlite_saver.py" "$n" "$dir"
  fi
done
for bin in "$@"; do
  printf '%s ' "$(basename "$bin")"
  "$bin" concurrent "${RUNS:-100}" "${RUN_CALLS:-20}" "$dir"
done
