#!/usr/bin/env bash
# CI's check that the hot path's instruction counts don't creep back: counts direct + JSON, one
# executor call and one scripted agent run with gungraun (callgrind on a release build,
# `hot-path-bench/benches/instruction_limits.rs`), prints each figure beside its limit and
# target, and exits non-zero when one is past its limit. The limits, and why, are in
# `hot-path-bench/benches/limits.toml`. The bench is a package of its own so that its build, like
# a user's, has no tokio `test-util` (the library's dev-dependencies turn it on). Installs valgrind (apt-get) and `gungraun-runner` (cargo
# install, the version Cargo.lock has for gungraun) when they are missing.
#
#   bash scripts/check-instructions.sh     # needs python3 >= 3.11 (tomllib), as Debian 12 has
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v valgrind >/dev/null; then
  apt-get update
  apt-get install -y valgrind
fi

# The runner must be the library's exact version, or the bench refuses to run.
version=$(python3 -c 'import tomllib
lock = tomllib.load(open("Cargo.lock", "rb"))
print(next(p["version"] for p in lock["package"] if p["name"] == "gungraun"))')
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
if [ "$(gungraun-runner --version 2>/dev/null)" != "gungraun-runner $version" ]; then
  cargo install gungraun-runner --version "$version" --locked
fi

target=$(cargo metadata --format-version=1 --no-deps | python3 -c 'import json,sys
print(json.load(sys.stdin)["target_directory"])')
summaries="$target/gungraun/hot-path-bench/instruction_limits"
# A count that failed must not be read from a previous run's summary.
[ -d "$summaries" ] && find "$summaries" -name summary.json -delete

echo "== cargo bench -p hot-path-bench --bench instruction_limits (gungraun $version)"
cargo bench -p hot-path-bench --bench instruction_limits -- --save-summary=json

python3 scripts/check_instruction_limits.py hot-path-bench/benches/limits.toml "$summaries"
