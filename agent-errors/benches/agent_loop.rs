//! The agent loop at scale: 10,000 concurrent runs of one agent on a paused clock, each a
//! scripted two-turn conversation (a tool call, then an answer), with 20% of tool calls failing
//! with a transient 503 that `retry(3)` absorbs.
//!
//! Reports runs per second (criterion's throughput, in elements/s) and, once before the timed
//! part, the peak resident memory per concurrent run: the kernel's high-water mark (`VmHWM` in
//! `/proc/self/status`) is reset through `/proc/self/clear_refs`, the 10,000 runs are driven to
//! completion with every outcome kept, and the rise of the mark over the resident size before
//! the batch is divided by the number of runs. Linux only; elsewhere it says so.
//!
//! ```text
//! cargo bench -p agent-errors --bench agent_loop
//! ```

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

use agent_errors::{Agent, RunOutcome};
use agent_errors::{
    BoxError, ChatModel, ChatRequest, ChatResponse, HttpError, Message, ToolCall, ToolDef,
    policy::{Action, Policy, PolicyKey},
};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use futures_util::future::{BoxFuture, join_all};

const RUNS: usize = 10_000;

/// A script keyed by the turn: turn 1 calls `fetch`, turn 2 answers with what it returned.
/// Stateless, so one instance serves every concurrent run.
#[derive(Debug)]
struct TwoTurnScript;

impl ChatModel for TwoTurnScript {
    fn chat<'a>(
        &'a self,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChatResponse, BoxError>> {
        let reply = match request.messages.last() {
            Some(Message::Tool(result)) => {
                ChatResponse::text(format!("the page says {}", result.content))
            }
            _ => ChatResponse::tool_calls(vec![ToolCall::new(
                "call_1",
                "fetch",
                r#"{"url": "https://example.invalid/page"}"#,
            )]),
        };
        Box::pin(async move { Ok(reply) })
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct FetchArgs {
    url: String,
}

fn agent() -> Agent {
    let calls = AtomicU64::new(0);
    let fetch = ToolDef::new("fetch", "Fetches a page.", move |args: FetchArgs| {
        // Every fifth call fails: 20% transient faults.
        let fail = calls.fetch_add(1, Ordering::Relaxed) % 5 == 4;
        async move {
            if fail {
                Err(HttpError::new(503, "busy"))
            } else {
                Ok(format!("<p>{}</p>", args.url.len()))
            }
        }
    })
    .with_policy(Policy::new().on(PolicyKey::Execution, Action::retry(3).expect("3 > 0")));
    Agent::builder("bench")
        .model(TwoTurnScript)
        .tool(fetch)
        .build()
        .expect("a valid agent")
}

fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime")
}

async fn batch(agent: &Agent) -> Vec<RunOutcome> {
    join_all((0..RUNS).map(|_| agent.run_with_report("summarise the page"))).await
}

#[cfg(target_os = "linux")]
fn status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
}

#[cfg(target_os = "linux")]
fn report_peak_memory(rt: &tokio::runtime::Runtime, agent: &Agent) {
    let reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
    let before = if reset {
        status_kib("VmRSS:")
    } else {
        status_kib("VmHWM:")
    };
    let outcomes = rt.block_on(batch(agent));
    let peak = status_kib("VmHWM:");
    let retried = outcomes
        .iter()
        .filter(|o| o.report.count("tool_retry") > 0)
        .count();
    let failed = outcomes.iter().filter(|o| o.result.is_err()).count();
    drop(outcomes);
    match (before, peak) {
        (Some(before), Some(peak)) => eprintln!(
            "agent_loop: {RUNS} concurrent runs ({retried} retried, {failed} failed): peak RSS rose \
             {} KiB over {before} KiB, {:.2} KiB per run{}",
            peak.saturating_sub(before),
            peak.saturating_sub(before) as f64 / RUNS as f64,
            if reset {
                ""
            } else {
                " (high-water mark not reset: a lower bound)"
            }
        ),
        _ => eprintln!("agent_loop: /proc/self/status unreadable; peak memory not measured"),
    }
}

#[cfg(not(target_os = "linux"))]
fn report_peak_memory(_: &tokio::runtime::Runtime, _: &Agent) {
    eprintln!("agent_loop: peak memory is measured on Linux only");
}

fn bench(c: &mut Criterion) {
    let rt = paused_runtime();
    let agent = agent();
    report_peak_memory(&rt, &agent);

    let mut group = c.benchmark_group("agent_loop");
    group.throughput(Throughput::Elements(RUNS as u64));
    group.sample_size(10);
    group.bench_function("10k concurrent runs, 20% transient faults", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(batch(&agent).await) })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
