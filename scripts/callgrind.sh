#!/usr/bin/env bash
# Instructions per call of the recovery layer's hot paths, counted by callgrind on a release
# build: (instructions for N calls - instructions for 0 calls) / N. Counts do not move with the
# machine's load, unlike times. Needs valgrind.
#
#   bash scripts/callgrind.sh [N]        # default N = 20000
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-20000}
command -v valgrind >/dev/null || { echo "valgrind is needed (apt-get install valgrind)" >&2; exit 1; }

bin=$(cargo bench -p hot-path-bench --bench instructions --no-run --message-format=json 2>/dev/null |
  python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "instructions" and m.get("executable"):
        print(m["executable"])')

count() { # variant calls
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" "$1" "$2" 2>&1 |
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}

printf '| variant | instructions per call | vs direct + JSON |\n| --- | --- | --- |\n'
base=""
for variant in direct_json handler executor agent_run agent_run_metered agent_run_retried; do
  calls=$n
  case $variant in agent_run*) calls=$((n / 4)) ;; esac
  zero=$(count "$variant" 0)
  many=$(count "$variant" "$calls")
  per=$(( (many - zero) / calls ))
  [ -z "$base" ] && base=$per
  ratio=$(python3 -c "print(f'{$per / $base:.2f}')")
  printf '| %s | %s | %sx |\n' "$variant" "$per" "$ratio"
done
