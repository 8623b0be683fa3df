#!/usr/bin/env bash
# Instructions to decode one streamed answer of 10k and of 100k tool calls, for the OpenAI and
# the Anthropic provider, each reading its own wire format from a loopback server in the same
# process. Counted by callgrind on a release build: (instructions with 1 request - instructions
# with 0 requests), so building the body is not counted. Needs valgrind.
#
#   bash scripts/callgrind-tool-calls.sh [SMALL] [LARGE]     # default 10000 100000
set -euo pipefail
cd "$(dirname "$0")/.."
small=${1:-10000}
large=${2:-100000}
command -v valgrind >/dev/null || { echo "valgrind is needed (apt-get install valgrind)" >&2; exit 1; }

bin=$(cargo bench -p agent-errors --features openai,anthropic --bench stream_tool_calls --no-run --message-format=json 2>/dev/null |
  python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "stream_tool_calls" and m.get("executable"):
        print(m["executable"])')

count() { # provider calls requests
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" "$1" "$2" "$3" 2>&1 |
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}

decode() { # provider calls
  echo $(( $(count "$1" "$2" 1) - $(count "$1" "$2" 0) ))
}

printf '| provider | %s calls | per call | %s calls | per call | %sx calls: x time |\n' "$small" "$large" $(( large / small ))
printf '| --- | --- | --- | --- | --- | --- |\n'
for provider in openai anthropic; do
  a=$(decode "$provider" "$small")
  b=$(decode "$provider" "$large")
  ratio=$(python3 -c "print(f'{$b / $a:.2f}')")
  printf '| %s | %s | %s | %s | %s | %s |\n' "$provider" "$a" $(( a / small )) "$b" $(( b / large )) "$ratio"
done
