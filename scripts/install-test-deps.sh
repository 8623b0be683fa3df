#!/usr/bin/env bash
# Installs the programs the test suite starts for real, when they are missing: Debian's
# redis-server (the fleet tests) and the reference MCP server from npm (the MCP tests; it needs
# Node.js and npm). Safe to run again: it does nothing when everything is there.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v redis-server >/dev/null; then
  apt-get update
  apt-get install -y redis-server
fi
if [ -f scripts/install-mcp-server.sh ]; then
  bash scripts/install-mcp-server.sh
fi
