//! This library's agent loop: with no policy written, and with the policies a reader of the
//! README writes for these tools.

use std::sync::Arc;
use std::time::Duration;

use agent_errors::breaker::{BreakerSettingsError, ServiceBreaker};
use agent_errors::build::FixerDef;
use agent_errors::checkpoint::{CheckpointStore, MemoryCheckpoints};
use agent_errors::llm::FallbackModel;
use agent_errors::policy::Policy;
use agent_errors::run::RunDelta;
use agent_errors::{
    Agent, Fix, FixRequest, FixerError, LlmErrorDecision, RunOptions, RunOutcome, policy,
};
use futures_util::future::BoxFuture;
use serde_json::Value;

use super::{RunEnd, Strategy, TaskEnv, until_crash};
use crate::world::KeyWritesByEffect;

/// The agent as built with nothing configured but its model and tools. No checkpoint store
/// either, so a crash loses the run: it starts again from the user's request.
#[derive(Default)]
pub(crate) struct LibraryDefaults {
    /// Whether the model is sent earlier failures of a tool as one-line summaries.
    pub(crate) compact_failures: bool,
}

impl Strategy for LibraryDefaults {
    fn name(&self) -> &'static str {
        if self.compact_failures {
            "4c agent-errors defaults, failures compacted"
        } else {
            "4 agent-errors defaults"
        }
    }

    fn run<'a>(&'a self, env: &'a TaskEnv) -> BoxFuture<'a, RunEnd> {
        Box::pin(async move {
            let agent = match Agent::builder("bench")
                .model(env.primary.clone())
                .tools(env.tools.iter().map(|t| t.tool()))
                .build()
            {
                Ok(agent) => agent,
                Err(e) => return Err(format!("agent not built: {e}")),
            };
            loop {
                let options = RunOptions::new().compact_failures(self.compact_failures);
                let run = streamed(options, |options| agent.run_with(env.task.prompt, options));
                if let Some(outcome) = until_crash(&env.world, run).await {
                    return end_of(outcome);
                }
            }
        })
    }
}

/// The policies a README reader writes for these tools: lookups and keyed writes retried then
/// shown to the model, broken arguments repaired by a fixer, the search falling back to its
/// cache, model errors retried, an overloaded model replaced by a backup, a service breaker that
/// judges a failure rate rather than a run of failures, and durable runs. The
/// writes (a ticket, an email) must happen once whatever the model re-asks, so they are keyed
/// by their effect, not by the call.
#[derive(Default)]
pub(crate) struct LibraryTuned {
    /// Whether the model is sent earlier failures of a tool as one-line summaries.
    pub(crate) compact_failures: bool,
}

impl Strategy for LibraryTuned {
    fn name(&self) -> &'static str {
        if self.compact_failures {
            "5c agent-errors tuned, failures compacted"
        } else {
            "5 agent-errors tuned"
        }
    }

    fn run<'a>(&'a self, env: &'a TaskEnv) -> BoxFuture<'a, RunEnd> {
        Box::pin(async move {
            let store: Arc<dyn CheckpointStore> = Arc::new(MemoryCheckpoints::new());
            let mut resuming = false;
            loop {
                // A process that died leaves only the store: the resumed run gets a new agent.
                let agent = match tuned_agent(env, Arc::clone(&store)) {
                    Ok(agent) => agent,
                    Err(e) => return Err(format!("agent not built: {e}")),
                };
                let options = RunOptions::new()
                    .compact_failures(self.compact_failures)
                    .run_id(env.run_id.clone())
                    .context(KeyWritesByEffect);
                let run = streamed(options, |options| async {
                    if resuming {
                        agent.resume(env.run_id.clone(), options).await
                    } else {
                        agent.run_with(env.task.prompt, options).await
                    }
                });
                match until_crash(&env.world, run).await {
                    Some(outcome) => return end_of(outcome),
                    None => resuming = true,
                }
            }
        })
    }
}

fn tuned_agent(
    env: &TaskEnv,
    store: Arc<dyn CheckpointStore>,
) -> Result<Agent, Box<dyn std::error::Error>> {
    let model = FallbackModel::new(env.primary.clone(), env.backup.clone()).after(2)?;
    // Lookups are idempotent; the writes pass their effect's idempotency key to their service,
    // so running them again, for one call or for the model asking again, does nothing more.
    let tools = env.tools.iter().map(|t| t.tool().idempotent(true));
    let agent = Agent::builder("bench")
        .model(model)
        .tools(tools)
        .fixer(arg_fixer())
        .on_any_tool_error(any_tool_policy())
        .on_tool_error("search", search_policy())
        .on_llm_error(|_, _| LlmErrorDecision::retry(LLM_ATTEMPTS, LLM_FIRST_BACKOFF))
        .service_breaker(Arc::new(service_breaker()?))
        .shared_checkpoints(store)
        .build()?;
    Ok(agent)
}

/// Opens a tool's circuit when half of its last 100 calls failed, judged from its 20th call: the
/// failure-rate rule of resilience4j and Polly. The default (5 failures in a row) opens on runs
/// of bad luck under independent blips, and its rejections then end runs a retry would finish.
fn service_breaker() -> Result<ServiceBreaker, BreakerSettingsError> {
    ServiceBreaker::failure_rate(50, 100, 20, Duration::from_secs(30))
}

/// Model calls per turn, the first included, and the first delay between them.
pub(crate) const LLM_ATTEMPTS: u32 = 4;
pub(crate) const LLM_FIRST_BACKOFF: Duration = Duration::from_secs(1);

/// Every tool: broken arguments repaired by the fixer, failures retried, then shown to the
/// model.
pub(crate) fn any_tool_policy() -> Policy {
    policy!(
        invalid_args = fix(agent = "arg_fixer"),
        execution = [retry(3), escalate]
    )
}

/// `search`: retried, then its cache, then shown to the model.
pub(crate) fn search_policy() -> Policy {
    policy!(execution = [retry(2), fallback(tool = "cached_search"), escalate])
}

pub(crate) fn arg_fixer() -> FixerDef {
    FixerDef::from_fn("arg_fixer", repair_arguments)
}

/// Repairs what careless models send: a trailing comma, numbers written as strings.
fn repair_arguments(request: FixRequest) -> Result<Fix, FixerError> {
    let unbroken = request.raw_args.replace(",}", "}").replace(", }", "}");
    let mut args: Value = serde_json::from_str(&unbroken).map_err(FixerError::other)?;
    if let Some(object) = args.as_object_mut() {
        for value in object.values_mut() {
            if let Some(number) = value.as_str().and_then(|s| s.parse::<i64>().ok()) {
                *value = number.into();
            }
        }
    }
    Ok(Fix::args_value(&args))
}

/// Runs an agent on its streaming path, draining the deltas as a UI would.
pub(super) async fn streamed<F, Fut>(options: RunOptions, run: F) -> RunOutcome
where
    F: FnOnce(RunOptions) -> Fut,
    Fut: std::future::Future<Output = RunOutcome>,
{
    let (sender, mut receiver) = tokio::sync::mpsc::channel::<RunDelta>(64);
    let drain = async move { while receiver.recv().await.is_some() {} };
    let (outcome, ()) = tokio::join!(run(options.stream_to(sender)), drain);
    outcome
}

pub(super) fn end_of(outcome: RunOutcome) -> RunEnd {
    outcome.result.map_err(|e| e.to_string())
}
