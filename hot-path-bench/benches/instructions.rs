//! A fixed amount of work for `valgrind --tool=callgrind` to count, so the cost of the recovery
//! layer can be measured in instructions, which do not move with the machine's load.
//!
//! `instructions <variant> <n>` does `n` calls of one variant; `scripts/callgrind.sh` runs it
//! for `n` and for 0 and divides the difference by `n`. Variants (`workloads/mod.rs`):
//!
//! - `direct_json`: parse the arguments, call the tool's fn, serialize its result (the floor);
//! - `handler`: the same through the `#[tool]`'s handler (one boxed future);
//! - `executor`: `Registry::execute` with a fresh-per-run `RunContext`, reused across calls;
//! - `agent_run`: a whole scripted agent run: one tool call, then a final answer;
//! - `agent_run_metered`: the same with a metrics recorder installed (one that keeps nothing);
//! - `agent_run_retried`: a run whose tool fails once (transient) and succeeds on its retry.
//!
//! Not a criterion bench: run `bash scripts/callgrind.sh`. CI holds five of these workloads
//! to limits through `benches/instruction_limits.rs`.

mod workloads;

use workloads::{Bench, Workload};

fn main() {
    let mut args = std::env::args().skip(1);
    let variant = args.next().unwrap_or_default();
    let n: u64 = args.next().and_then(|n| n.parse().ok()).unwrap_or(0);
    let workload =
        Workload::from_name(&variant).unwrap_or_else(|| panic!("unknown variant `{variant}`"));
    Bench::new().run(workload, n);
}
