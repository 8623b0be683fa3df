#!/usr/bin/env bash
# Installs the programs the test suite starts for real, when they are missing: Debian's
# redis-server (the fleet tests), Debian's PostgreSQL server (the checkpoint store tests, which
# run `initdb` and `postgres` from /usr/lib/postgresql/*/bin), and the reference MCP server
# from npm (the MCP tests; it needs Node.js and npm), and the Restate server from npm (the
# durable-run tests on Restate). Safe to run again: it does nothing when
# everything is there.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
if ! command -v redis-server >/dev/null; then
  missing+=(redis-server)
fi
if ! compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null && ! command -v initdb >/dev/null; then
  missing+=(postgresql)
fi
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update
  apt-get install -y "${missing[@]}"
fi
if [ -f scripts/install-mcp-server.sh ]; then
  bash scripts/install-mcp-server.sh
fi
bash scripts/install-restate-server.sh
