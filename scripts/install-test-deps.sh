#!/usr/bin/env bash
# Installs the programs the test suite starts for real, when they are missing: Debian's
# redis-server (the fleet tests), Debian's PostgreSQL server (the checkpoint store tests, which
# run `initdb` and `postgres` from /usr/lib/postgresql/*/bin), the reference MCP server from npm
# (the MCP tests; it needs Node.js and npm), and the Restate server from npm (the durable-run
# tests on Restate). Safe to run again, and by several processes at once (the tests call it
# when a program is missing): it does nothing when everything is there.
#
#   scripts/install-test-deps.sh [redis-server] [postgresql] [nodejs] [mcp-server] [restate-server]
#   (no argument: all of them; the two npm servers install Node.js and npm first when missing)
set -euo pipefail
cd "$(dirname "$0")/.."

wanted=("$@")
if [ ${#wanted[@]} -eq 0 ]; then
  wanted=(redis-server postgresql mcp-server restate-server)
fi
wants() {
  local item
  for item in "${wanted[@]}"; do [ "$item" = "$1" ] && return 0; done
  return 1
}

have_redis() { command -v redis-server >/dev/null; }
have_nodejs() { command -v node >/dev/null && command -v npm >/dev/null; }
have_postgresql() {
  compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || command -v initdb >/dev/null
}

# Debian packages, one apt run at a time on this machine: concurrent test binaries (and other
# checkouts) may all find the same program missing. Under the lock, look again: the first one in
# installed it for everyone.
install_debian_packages() {
  local missing=()
  if wants redis-server && ! have_redis; then missing+=(redis-server); fi
  if wants postgresql && ! have_postgresql; then missing+=(postgresql); fi
  if wants nodejs && ! have_nodejs; then missing+=(nodejs npm); fi
  [ ${#missing[@]} -eq 0 ] && return 0
  exec 8>"${TMPDIR:-/tmp}/agent-errors-apt.lock"
  if command -v flock >/dev/null; then flock 8; fi
  missing=()
  if wants redis-server && ! have_redis; then missing+=(redis-server); fi
  if wants postgresql && ! have_postgresql; then missing+=(postgresql); fi
  if wants nodejs && ! have_nodejs; then missing+=(nodejs npm); fi
  [ ${#missing[@]} -eq 0 ] && return 0

  local sudo=()
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
      sudo=(sudo -n)
    else
      echo "error: ${missing[*]} missing, and installing needs root: run" \
        "\`sudo apt-get install -y ${missing[*]}\` (or \`sudo bash scripts/install-test-deps.sh\`)" >&2
      exit 1
    fi
  fi
  if ! command -v apt-get >/dev/null; then
    echo "error: ${missing[*]} missing and this is not a Debian-like system (no apt-get):" \
      "install them with your package manager" >&2
    exit 1
  fi
  echo "installing ${missing[*]} (apt-get)" >&2
  # The packages' own scripts must not ask questions or start services in the background.
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 update -q >&2
  "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "${missing[@]}" >&2
}

install_debian_packages
if wants mcp-server; then bash scripts/install-mcp-server.sh >/dev/null; fi
if wants restate-server; then bash scripts/install-restate-server.sh >/dev/null; fi
