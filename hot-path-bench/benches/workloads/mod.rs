//! The hot-path workloads whose instructions are counted, shared by the two harnesses that
//! count them: `benches/instructions.rs` (run by `scripts/callgrind.sh`, N calls minus 0) and
//! `benches/instruction_limits.rs` (gungraun, run by `scripts/check-instructions.sh` in CI).
//! One definition, so the figures CI holds to are the figures BENCHMARKS.md reports.

// Each bench uses the part it counts: CI's check leaves the handler alone.
#![allow(dead_code)]

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use agent_errors::policy::{Action, Ladder, Policy, PolicyKey, RetryAction};
use agent_errors::prelude::*;
use agent_errors::{ChatRequest, ChatResponse, ErrorKind, Message, Registry, RunContext, ToolCall};
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, SharedString, Unit};
use serde::{Deserialize, Serialize};

/// What one counted call does.
#[derive(Clone, Copy, Debug)]
pub enum Workload {
    /// Parse the arguments, call the tool's fn, serialize its result: the floor.
    DirectJson,
    /// The same through the `#[tool]`'s handler (one boxed future).
    Handler,
    /// `Registry::execute` with a fresh-per-run `RunContext`, reused across calls.
    Executor,
    /// A whole scripted agent run: one tool call, then a final answer.
    AgentRun,
    /// [`Workload::AgentRun`] with a metrics recorder installed: one that does nothing with
    /// what it is given but is given every key, so building them is counted.
    AgentRunMetered,
    /// A scripted run whose tool fails once with a transient error and succeeds on its retry,
    /// made at once (a retry rung with no delay: this build has no paused clock to skip one).
    AgentRunRetried,
}

impl Workload {
    /// The name `scripts/callgrind.sh` passes on the command line.
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "direct_json" => Self::DirectJson,
            "handler" => Self::Handler,
            "executor" => Self::Executor,
            "agent_run" => Self::AgentRun,
            "agent_run_metered" => Self::AgentRunMetered,
            "agent_run_retried" => Self::AgentRunRetried,
            _ => return None,
        })
    }
}

#[derive(Serialize)]
struct Forecast {
    city: String,
    highs: Vec<f64>,
}

fn compute(city: String, days: u32) -> Forecast {
    let highs = (0..days).map(|d| 18.0 + f64::from(d) * 0.5).collect();
    Forecast { city, highs }
}

/// Daily highs for a city.
#[tool]
async fn forecast(city: String, days: u32) -> Result<Forecast, std::io::Error> {
    Ok(compute(city, days))
}

/// Fails every other call with a transient error (a reset connection): each run's first call
/// fails and its retry succeeds.
static FLAKY_CALLS: AtomicU64 = AtomicU64::new(0);

/// Daily highs for a city, from a service that drops every other connection. Its policy, a
/// retry with no delay, is given in [`no_wait_retry`].
#[tool]
async fn flaky_forecast(city: String, days: u32) -> Result<Forecast, std::io::Error> {
    if FLAKY_CALLS.fetch_add(1, Ordering::Relaxed) % 2 == 0 {
        return Err(std::io::ErrorKind::ConnectionReset.into());
    }
    Ok(compute(city, days))
}

/// `transient = retry(2)` with no delay before the retry: what `#[tool]`'s attribute cannot say
/// (it refuses a zero `initial`), so the workload's clock is never slept on. The bench is built
/// without tokio's `test-util` (a user's build has none), so there is no paused clock to
/// auto-advance through a real delay.
fn no_wait_retry() -> Policy {
    let retry = RetryAction {
        max_attempts: NonZeroU32::new(2).expect("2 is not zero"),
        initial: Some(Duration::ZERO),
        max: Some(Duration::ZERO),
        when_safe: false,
    };
    Policy::new().on(
        PolicyKey::Kind(ErrorKind::Transient),
        Ladder::new([Action::Retry(retry)]),
    )
}

#[derive(Deserialize)]
struct ForecastArgs {
    city: String,
    days: u32,
}

const ARGS: &str = r#"{"city":"Paris","days":5}"#;

async fn direct_json(raw: &str) -> Result<String, BoxError> {
    let args: ForecastArgs = serde_json::from_str(raw)?;
    let out = forecast(args.city, args.days).await?;
    Ok(serde_json::to_string(&out)?)
}

/// Turn 1 calls its tool; turn 2 answers with what it returned.
struct TwoTurns(&'static str);

impl ChatModel for TwoTurns {
    fn chat<'a>(
        &'a self,
        request: &'a ChatRequest,
    ) -> agent_errors::call::BoxFuture<'a, Result<ChatResponse, BoxError>> {
        let reply = match request.messages.last() {
            Some(Message::Tool(result)) => ChatResponse::text(result.content.clone()),
            _ => ChatResponse::tool_calls(vec![ToolCall::new("call_1", self.0, ARGS)]),
        };
        Box::pin(async move { Ok(reply) })
    }
}

/// A metrics recorder that keeps nothing but is handed every key and label a run builds.
struct NoopRecorder;

impl metrics::Recorder for NoopRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        black_box(key);
        Counter::noop()
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        black_box(key);
        Gauge::noop()
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        black_box(key);
        Histogram::noop()
    }
}

/// Everything a workload needs, built before counting starts.
pub struct Bench {
    rt: tokio::runtime::Runtime,
    registry: Registry,
    agent: Agent,
    flaky: Agent,
    ctx: RunContext,
    call: ToolCall,
}

impl Bench {
    pub fn new() -> Self {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a current-thread runtime");
        let registry = Registry::builder()
            .tools(tools![forecast])
            .build()
            .expect("one tool");
        let agent = Agent::builder("bench")
            .model(TwoTurns("forecast"))
            .tools(tools![forecast])
            .build()
            .expect("a valid agent");
        let flaky = Agent::builder("bench")
            .model(TwoTurns("flaky_forecast"))
            .tools(
                tools![flaky_forecast]
                    .into_iter()
                    .map(|tool| tool.with_policy(no_wait_retry())),
            )
            .build()
            .expect("a valid agent");
        Self {
            rt,
            registry,
            agent,
            flaky,
            ctx: RunContext::new(),
            call: ToolCall::new("call-1", "forecast", ARGS),
        }
    }

    /// Does `n` calls of `workload` inside one `block_on`, so that a count for `n` minus a
    /// count for 0 is `n` calls and nothing else.
    pub fn run(&self, workload: Workload, n: u64) {
        match workload {
            Workload::DirectJson | Workload::Handler | Workload::Executor => {
                self.calls(workload, n)
            }
            Workload::AgentRun => self.agent_runs(&self.rt, &self.agent, n),
            Workload::AgentRunMetered => metrics::with_local_recorder(&NoopRecorder, || {
                self.agent_runs(&self.rt, &self.agent, n);
            }),
            Workload::AgentRunRetried => self.agent_runs(&self.rt, &self.flaky, n),
        }
    }

    /// `n` tool calls without an agent.
    fn calls(&self, workload: Workload, n: u64) {
        let tool = &self.registry.tools()[0];
        self.rt.block_on(async {
            match workload {
                Workload::DirectJson => {
                    for _ in 0..n {
                        drop(black_box(direct_json(black_box(ARGS)).await));
                    }
                }
                Workload::Handler => {
                    for _ in 0..n {
                        let running = agent_errors::testing::handler_of(tool).call(black_box(ARGS));
                        drop(black_box(running.expect("valid arguments").await));
                    }
                }
                Workload::Executor => {
                    for _ in 0..n {
                        let result = self.registry.execute(&self.ctx, black_box(&self.call));
                        drop(black_box(result.await));
                    }
                }
                _ => unreachable!("agent runs are counted by `agent_runs`"),
            }
        });
    }

    /// `n` scripted runs of `agent` on `rt`, each of which must succeed.
    fn agent_runs(&self, rt: &tokio::runtime::Runtime, agent: &Agent, n: u64) {
        rt.block_on(async {
            for _ in 0..n {
                let output = agent.run(black_box("go")).await;
                drop(black_box(output.expect("the run answers")));
            }
        });
    }
}
