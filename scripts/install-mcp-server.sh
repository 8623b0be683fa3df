#!/usr/bin/env bash
# Installs the reference MCP server the tests and examples run, pinned, under test-servers/ (a
# download, not build output: `cargo clean` leaves it), and prints the path of its entry point. Does nothing but print it when that version is already there.
#
#   scripts/install-mcp-server.sh [destination]   (default: test-servers/mcp-server-everything)
set -euo pipefail

VERSION=2026.8.31
PACKAGE=@modelcontextprotocol/server-everything

root="$(cd "$(dirname "$0")/.." && pwd)"
dest="${1:-$root/test-servers/mcp-server-everything}"
package_dir="$dest/node_modules/$PACKAGE"
entry="$package_dir/dist/index.js"

# Node.js and npm from Debian's packages when missing (as root, or with sudo that asks nothing).
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    bash "$root/scripts/install-test-deps.sh" nodejs
fi
for tool in node npm; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "error: \`$tool\` is not on PATH; the MCP tests need Node.js and npm to run $PACKAGE" >&2
        exit 1
    fi
done

# One npm install at a time into "$dest": the tests of several binaries (and the threads of
# one) may all find the server missing. Whoever waited finds it installed, below.
mkdir -p "$dest"
exec 9>"$dest.lock"
if command -v flock >/dev/null 2>&1; then
    flock 9
fi

installed="$(node -p "require('$package_dir/package.json').version" 2>/dev/null || true)"
if [ "$installed" != "$VERSION" ] || [ ! -f "$entry" ]; then
    mkdir -p "$dest"
    npm install --prefix "$dest" --no-audit --no-fund --loglevel=error "$PACKAGE@$VERSION" >&2
fi
echo "$entry"
