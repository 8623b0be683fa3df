#!/usr/bin/env bash
# Installs the Restate server the durable-run tests and the `restate_agent` example run, pinned,
# under test-servers/ (not target/: it is a download, not build output, and `cargo clean` should
# not throw it away), and prints the path of its binary. Does nothing but print it when that version
# is already there. The server is under the Business Source License; the library depends only on
# the MIT-licensed SDK, so this binary is a test dependency, never part of a user's build.
#
#   scripts/install-restate-server.sh [destination]   (default: test-servers/restate-server)
set -euo pipefail

VERSION=1.7.12
PACKAGE=@restatedev/restate-server

root="$(cd "$(dirname "$0")/.." && pwd)"
dest="${1:-$root/test-servers/restate-server}"

# Node.js and npm from Debian's packages when missing (as root, or with sudo that asks nothing).
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    bash "$root/scripts/install-test-deps.sh" nodejs
fi
for tool in node npm; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "error: \`$tool\` is not on PATH; the Restate tests need npm to install $PACKAGE" >&2
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

# The package's launcher picks a platform package (`@restatedev/restate-server-linux-x64`, ...)
# holding the real binary; the tests start that binary directly, without Node.js in between.
find_binary() {
    find "$dest/node_modules/@restatedev" -path '*restate-server-*/bin/restate-server' -type f 2>/dev/null | head -n 1 || true
}
installed="$(node -p "require('$dest/node_modules/$PACKAGE/package.json').version" 2>/dev/null || true)"
binary="$(find_binary)"
if [ "$installed" != "$VERSION" ] || [ -z "$binary" ]; then
    mkdir -p "$dest"
    npm install --prefix "$dest" --no-audit --no-fund --loglevel=error "$PACKAGE@$VERSION" >&2
    binary="$(find_binary)"
fi
if [ -z "$binary" ]; then
    echo "error: $PACKAGE@$VERSION installed no restate-server binary for this platform" >&2
    exit 1
fi
chmod +x "$binary"
echo "$binary"
