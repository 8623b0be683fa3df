//! The hot path's instruction counts for CI, counted by gungraun (callgrind) on a release build:
//! direct + JSON (the floor), one executor call and scripted agent runs (plain, with a metrics
//! recorder installed, and with one retried tool failure), each counted for
//! `CALLS` calls and for 0 inside one process's setup-free region, so that
//! `(count(CALLS) - count(0)) / CALLS` is the cost of one call with nothing else in it. The
//! limits those figures are held to, and why, are in `benches/limits.toml`; run the check with
//! `bash scripts/check-instructions.sh`, which divides, compares and fails.

mod workloads;

use gungraun::{library_benchmark, library_benchmark_group, main};
use workloads::{Bench, Workload};

/// Calls per counted region: enough that a per-call figure is exact to the instruction.
const CALLS: u64 = 1000;

/// Builds everything and runs the workload once, outside the count, so that the counted
/// calls find the runtime, thread-locals and lazily built statics already warm.
fn prepare(workload: Workload, calls: u64) -> (Bench, Workload, u64) {
    let bench = Bench::new();
    bench.run(workload, 1);
    (bench, workload, calls)
}

// The id ends with the number of calls; `scripts/check-instructions.sh` reads it from there.
#[library_benchmark]
#[bench::direct_json_0(args = (Workload::DirectJson, 0), setup = prepare)]
#[bench::direct_json_1000(args = (Workload::DirectJson, CALLS), setup = prepare)]
#[bench::executor_0(args = (Workload::Executor, 0), setup = prepare)]
#[bench::executor_1000(args = (Workload::Executor, CALLS), setup = prepare)]
#[bench::agent_run_0(args = (Workload::AgentRun, 0), setup = prepare)]
#[bench::agent_run_1000(args = (Workload::AgentRun, CALLS), setup = prepare)]
#[bench::agent_run_metered_0(args = (Workload::AgentRunMetered, 0), setup = prepare)]
#[bench::agent_run_metered_1000(args = (Workload::AgentRunMetered, CALLS), setup = prepare)]
#[bench::agent_run_retried_0(args = (Workload::AgentRunRetried, 0), setup = prepare)]
#[bench::agent_run_retried_1000(args = (Workload::AgentRunRetried, CALLS), setup = prepare)]
fn hot_path((bench, workload, calls): (Bench, Workload, u64)) -> Bench {
    bench.run(workload, calls);
    // Returned so that the runtime, registry and agent are dropped outside the count.
    bench
}

library_benchmark_group!(name = counts; benchmarks = hot_path);

main!(library_benchmark_groups = counts);
