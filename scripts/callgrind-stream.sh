#!/usr/bin/env bash
# Instructions per streamed answer of 1,000 text deltas: the OpenAI provider against reqwest and
# a plain line split, both reading the same SSE body from the same loopback server. Counted by
# callgrind on a release build: (instructions for 1 + N requests - instructions for 1) / N.
# Needs valgrind.
#
#   bash scripts/callgrind-stream.sh [N]        # default N = 50
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-50}
command -v valgrind >/dev/null || { echo "valgrind is needed (apt-get install valgrind)" >&2; exit 1; }

bin=$(cargo bench -p agent-errors --features openai --bench stream_overhead --no-run --message-format=json 2>/dev/null |
  python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "stream_overhead" and m.get("executable"):
        print(m["executable"])')

count() { # variant requests
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" "$1" "$2" 2>&1 |
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}

printf '| variant | instructions per answer | per delta |\n| --- | --- | --- |\n'
declare -A per
for variant in raw provider; do
  zero=$(count "$variant" 0)
  many=$(count "$variant" "$n")
  per[$variant]=$(( (many - zero) / n ))
  printf '| %s | %s | %s |\n' "$variant" "${per[$variant]}" $(( per[$variant] / 1000 ))
done
extra=$(( per[provider] - per[raw] ))
printf '| provider - raw | %s | %s |\n' "$extra" $(( extra / 1000 ))
