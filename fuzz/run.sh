#!/usr/bin/env bash
# Fuzzes the library with libFuzzer. Not run in CI: it needs the nightly toolchain and
# cargo-fuzz (`rustup toolchain install nightly`, `cargo install cargo-fuzz`). The same
# properties run on stable as proptests in the test suite.
#
#   fuzz/run.sh                  every target in fuzz/fuzz_targets/, 60 s each: sanitize,
#                                redact, retry_after, sse, arguments, repair
#   fuzz/run.sh sanitize         one target
#   FUZZ_SECONDS=600 fuzz/run.sh longer runs
#   FUZZ_JOBS=2 fuzz/run.sh      parallel workers per target
#
# Findings land in fuzz/artifacts/<target>/; replay one with
#   cargo +nightly fuzz run <target> fuzz/artifacts/<target>/<file>
# A new target is a file in fuzz_targets/ plus its [[bin]] entry in fuzz/Cargo.toml.
set -euo pipefail

cd "$(dirname "$0")"
toolchain="${FUZZ_TOOLCHAIN:-nightly}"
seconds="${FUZZ_SECONDS:-60}"
jobs="${FUZZ_JOBS:-1}"

if ! cargo "+$toolchain" fuzz --version >/dev/null 2>&1; then
    echo "cargo-fuzz for the $toolchain toolchain is missing: cargo install cargo-fuzz" >&2
    exit 1
fi

if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    targets=()
    for file in fuzz_targets/*.rs; do
        targets+=("$(basename "$file" .rs)")
    done
fi

flags=(-max_total_time="$seconds" -max_len=65536)
if [ "$jobs" -gt 1 ]; then
    # libFuzzer then writes each worker's log to fuzz-<n>.log.
    flags+=(-jobs="$jobs" -workers="$jobs")
fi

for target in "${targets[@]}"; do
    echo "== $target (${seconds}s)"
    nice -n 10 cargo "+$toolchain" fuzz run "$target" -- "${flags[@]}"
done
