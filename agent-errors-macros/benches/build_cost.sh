#!/usr/bin/env bash
# What `#[tool]` costs to compile. Generates three throwaway crates of N tools each, all from the
# same functions:
#
#   plain_fns   the async fns alone, no agent-errors at all;
#   by_hand     the same fns, each with an argument struct (the derives `#[tool]` emits) and a
#               `ToolDef` built from a closure, with the same policy and timeout;
#   with_tool   the same fns under `#[tool(...)]`.
#
# Each is built in release once (so the dependencies are built), then rebuilt RUNS times after a
# `touch` of its lib.rs; a rustc wrapper records the user+sys CPU seconds of the rustc process
# that compiles the crate itself. The median is printed. CPU time, not wall time: the machine is
# shared, and CPU seconds move much less with load.
#
#   nice -n 10 agent-errors-macros/benches/build_cost.sh
#
# Environment: N (tools per crate, 50), RUNS (rebuilds per crate, 3), BUILD_COST_DIR (where the
# crates and their target dir go; a fresh temp dir by default, reuse one to skip the dependency
# build), CARGO (cargo).
set -euo pipefail

N=${N:-50}
RUNS=${RUNS:-3}
CARGO=${CARGO:-cargo}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WORK=${BUILD_COST_DIR:-$(mktemp -d -t agent-errors-build-cost.XXXXXX)}
mkdir -p "$WORK"
echo "crates in $WORK" >&2

cat >"$WORK/Cargo.toml" <<TOML
[workspace]
resolver = "3"
members = ["plain_fns", "by_hand", "with_tool"]

[workspace.dependencies]
agent-errors = { path = "$ROOT/agent-errors" }
TOML

cat >"$WORK/rustc-time.sh" <<'SH'
#!/usr/bin/env bash
# RUSTC_WRAPPER: times the rustc that compiles $BUILD_COST_MEASURE, passes every other call through.
rustc=$1
shift
name=
prev=
for arg in "$@"; do
    [[ $prev == --crate-name ]] && name=$arg
    prev=$arg
done
if [[ -n ${BUILD_COST_MEASURE:-} && $name == "$BUILD_COST_MEASURE" ]]; then
    exec /usr/bin/time -f "%U %S" -a -o "$BUILD_COST_LOG" "$rustc" "$@"
fi
exec "$rustc" "$@"
SH
chmod +x "$WORK/rustc-time.sh"

# The error all three crates' tools return, written out so no derive adds to the count.
error_type='
#[derive(Debug)]
pub struct BenchError;

impl std::fmt::Display for BenchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'"'"'_>) -> std::fmt::Result {
        f.write_str("bench error")
    }
}

impl std::error::Error for BenchError {}
'

# Tool i: three parameters; the output type cycles through a Result of a Vec, a Result of a
# number and a plain String, so the crates are not one instantiation repeated.
output_type() {
    case $(($1 % 3)) in
    0) echo "Result<Vec<String>, BenchError>" ;;
    1) echo "Result<usize, BenchError>" ;;
    *) echo "String" ;;
    esac
}

fn_body() {
    case $(($1 % 3)) in
    0) echo "if verbose { return Err(BenchError); } Ok(vec![query; limit.unwrap_or(1) as usize])" ;;
    1) echo "if verbose { return Err(BenchError); } Ok(query.len() + limit.unwrap_or($1) as usize)" ;;
    *) echo "format!(\"{query} {limit:?} {verbose} $1\")" ;;
    esac
}

tool_fn() { # $1 = i, $2 = attribute line (may be empty)
    local i=$1
    cat <<RS

/// Looks up record $i by query.
///
/// Returns what matched.
$2
pub async fn tool_$i(query: String, limit: Option<u32>, verbose: bool) -> $(output_type "$i") {
    $(fn_body "$i")
}
RS
}

new_crate() { # $1 = name, $2 = extra dependency lines
    mkdir -p "$WORK/$1/src"
    cat >"$WORK/$1/Cargo.toml" <<TOML
[package]
name = "$1"
version = "0.0.0"
edition = "2024"
publish = false

[dependencies]
$2
TOML
}

new_crate plain_fns ""
{
    echo "$error_type"
    for ((i = 0; i < N; i++)); do tool_fn "$i" ""; done
} >"$WORK/plain_fns/src/lib.rs"

new_crate with_tool 'agent-errors.workspace = true'
{
    echo "use agent_errors::tool;"
    echo "$error_type"
    for ((i = 0; i < N; i++)); do
        tool_fn "$i" '#[tool(timeout = "30s", on_error(invalid_args = escalate, execution = [retry(3), escalate]))]'
    done
} >"$WORK/with_tool/src/lib.rs"

new_crate by_hand 'agent-errors.workspace = true
serde = { version = "1", features = ["derive"] }
schemars = "1"'
{
    cat <<'RS'
use std::time::Duration;

use agent_errors::{Action, Ladder, Policy, PolicyKey, ToolDef};

fn policy() -> Policy {
    Policy::new().on(PolicyKey::InvalidArgs, Action::Escalate).on(
        PolicyKey::Execution,
        Ladder::new([Action::retry(3).expect("3 is not zero"), Action::Escalate]),
    )
}
RS
    echo "$error_type"
    for ((i = 0; i < N; i++)); do
        tool_fn "$i" ""
        case $((i % 3)) in
        2) call="Ok::<_, BenchError>(tool_$i(args.query, args.limit, args.verbose).await)" ;;
        *) call="tool_$i(args.query, args.limit, args.verbose).await" ;;
        esac
        cat <<RS

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "tool_$i")]
struct Tool${i}Args {
    query: String,
    limit: Option<u32>,
    verbose: bool,
}

pub fn tool_${i}_def() -> ToolDef {
    ToolDef::new(
        "tool_$i",
        "Looks up record $i by query.\n\nReturns what matched.",
        |args: Tool${i}Args| async move { $call },
    )
    .with_policy(policy())
    .with_timeout(Duration::from_secs(30))
}
RS
    done
} >"$WORK/by_hand/src/lib.rs"

export RUSTC_WRAPPER="$WORK/rustc-time.sh"
export CARGO_TARGET_DIR="$WORK/target"
export BUILD_COST_LOG="$WORK/times.log"

echo "building dependencies (release)..." >&2
"$CARGO" build --release --quiet --manifest-path "$WORK/Cargo.toml" --workspace

median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }

printf '%-11s %8s   %s\n' crate "cpu s" "runs (user+sys)"
for crate in plain_fns by_hand with_tool; do
    runs=()
    for ((r = 0; r < RUNS; r++)); do
        : >"$BUILD_COST_LOG"
        touch "$WORK/$crate/src/lib.rs"
        BUILD_COST_MEASURE=$crate "$CARGO" build --release --quiet \
            --manifest-path "$WORK/Cargo.toml" -p "$crate"
        runs+=("$(awk '/^[0-9.]+ [0-9.]+$/ { print $1 + $2 }' "$BUILD_COST_LOG" | tail -n 1)")
    done
    printf '%-11s %8s   %s\n' "$crate" "$(printf '%s\n' "${runs[@]}" | median)" "${runs[*]}"
done
