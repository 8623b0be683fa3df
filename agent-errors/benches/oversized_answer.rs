//! The cost of one model answer holding far more tool calls than a turn may make: 1,000, 10,000
//! and 100,000 calls, under distinct ids and under one id repeated. Hostile or broken model
//! output must cost time linear in its size.
//!
//! - `refused`: the default per-turn cap (128 calls) refuses the turn before any call is
//!   looked at: what a run pays for such an answer.
//! - `made distinct`: the per-turn cap raised past the answer and a cap of 1 call for the run,
//!   so every call is given an id of its own (a repeated id its `_2`, `_3`, ...) before the run's
//!   cap refuses the turn: the id work itself.
//!
//! Each iteration is a whole run: the answer is cloned out of the model, the run ends with the
//! cap's error.
//!
//! ```text
//! cargo bench -p agent-errors --bench oversized_answer
//! ```

use std::hint::black_box;
use std::time::Duration;

use agent_errors::run::UsageLimits;
use agent_errors::testing::echo_tool;
use agent_errors::{Agent, BoxError, ChatModel, ChatRequest, ChatResponse, RunError, ToolCall};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use futures_util::future::BoxFuture;

/// Answers every request with the same turn of calls.
#[derive(Debug)]
struct Flood(ChatResponse);

impl ChatModel for Flood {
    fn chat<'a>(&'a self, _: &'a ChatRequest) -> BoxFuture<'a, Result<ChatResponse, BoxError>> {
        let reply = self.0.clone();
        Box::pin(async move { Ok(reply) })
    }
}

fn flood(calls: usize, repeated: bool) -> Flood {
    let calls = (0..calls)
        .map(|n| {
            let id = if repeated {
                "call_1".to_owned()
            } else {
                format!("call_{n}")
            };
            ToolCall::new(id, "echo", r#"{"text": "x"}"#)
        })
        .collect();
    Flood(ChatResponse::tool_calls(calls))
}

fn agent(model: Flood, limits: UsageLimits) -> Agent {
    Agent::builder("flooded")
        .model(model)
        .tool(echo_tool("echo"))
        .usage_limits(limits)
        .build()
        .expect("one tool, valid limits")
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a current-thread runtime");
    let mut group = c.benchmark_group("oversized_answer");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(3));
    for calls in [1_000usize, 10_000, 100_000] {
        group.throughput(Throughput::Elements(calls as u64));
        for (ids, repeated) in [("distinct", false), ("repeated", true)] {
            let refused = agent(flood(calls, repeated), UsageLimits::new());
            let raised = u32::try_from(calls).expect("at most 100,000");
            let limits = UsageLimits::new()
                .max_tool_calls_per_turn(raised)
                .max_tool_calls(1);
            let distinct = agent(flood(calls, repeated), limits);
            for (what, agent) in [("refused", &refused), ("made distinct", &distinct)] {
                let id = BenchmarkId::new(format!("{what}, {ids} ids"), calls);
                group.bench_with_input(id, agent, |b, agent| {
                    b.to_async(&rt).iter(|| async {
                        let result = agent.run("go").await;
                        assert!(matches!(result, Err(RunError::UsageLimit(_))));
                        black_box(result)
                    })
                });
            }
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
