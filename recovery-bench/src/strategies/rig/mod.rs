//! A rig agent on rig's own loop (`rig_agent`), with rig's defaults and with this library's
//! policies inside it: the same tools, model, faults and tasks as every other strategy.
//!
//! The model is the benchmark's reacting model behind a rig transport of its own
//! ([`transport`]); the tools are the benchmark's fault-injecting tools written as rig `Tool`s
//! ([`tools`]). rig's run is awaited, so rig asks for whole answers: a stream the model cuts
//! reaches rig as a reply cut short. Neither agent has a checkpoint store (a crash starts the
//! task again from the user's request) nor a backup model (`RecoveringModel` here wraps one model).

mod tools;
mod transport;

use std::sync::Arc;

use agent_errors::breaker::ServiceBreaker;
use agent_errors::retry::RetrySchedule;
use agent_errors::rig::{GuardedTool, RecoveringModel};
use agent_errors::{Registry, RunContext, ToolDef};
use futures_util::future::BoxFuture;
use rig_agent::AgentBuilder;

use self::tools::{
    Add, BenchTool, CachedSearch, CreateTicket, FetchPage, GetOrder, LookupCustomer, Search,
    SendEmail, every_tool,
};
use self::transport::rig_model;
use super::library::{LLM_ATTEMPTS, LLM_FIRST_BACKOFF, any_tool_policy, arg_fixer, search_policy};
use super::{RunEnd, Strategy, TaskEnv, until_crash};

/// Model turns before rig gives the run up, as for the hand-written loops.
const MAX_TURNS: usize = 16;

/// With or without this library's policies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RigKind {
    /// rig's defaults: a tool's error goes back to the model as its feedback text, and a
    /// failed model call ends the run.
    Defaults,
    /// Each tool a `GuardedTool` under the tuned strategy's policies, the model under
    /// `recovering` with the tuned strategy's model retries, the loop stopped by `StopHook`;
    /// its write tools send their effect's key, as the tuned strategy's do.
    Guarded,
}

/// A rig agent on rig's own loop.
pub(crate) struct RigAgent(pub(crate) RigKind);

impl Strategy for RigAgent {
    fn name(&self) -> &'static str {
        match self.0 {
            RigKind::Defaults => "6a rig defaults",
            RigKind::Guarded => "6b rig + agent-errors tuned",
        }
    }

    fn run<'a>(&'a self, env: &'a TaskEnv) -> BoxFuture<'a, RunEnd> {
        Box::pin(async move {
            loop {
                let run = async {
                    match self.0 {
                        RigKind::Defaults => run_defaults(env).await,
                        RigKind::Guarded => run_guarded(env).await,
                    }
                };
                if let Some(end) = until_crash(&env.world, run).await {
                    return end;
                }
            }
        })
    }
}

/// A failure to build the agent, as the run's end.
fn not_built(error: impl std::fmt::Display) -> String {
    format!("agent not built: {error}")
}

async fn run_defaults(env: &TaskEnv) -> RunEnd {
    macro_rules! agent {
        ($($name:ident),+) => {
            AgentBuilder::new(rig_model(env.primary.clone()))
                .default_max_turns(MAX_TURNS)
                $(.tool(BenchTool::<$name>::of(&env.tools).map_err(not_built)?))+
                .build()
        };
    }
    let agent = every_tool!(agent);
    ended(agent.prompt(env.task.prompt).await)
}

async fn run_guarded(env: &TaskEnv) -> RunEnd {
    macro_rules! registered {
        ($($name:ident),+) => {
            vec![$(
                ToolDef::from_rig(BenchTool::<$name>::of(&env.tools).map_err(not_built)?)
                    .idempotent(true)
            ),+]
        };
    }
    let registry = Registry::builder()
        .tools(every_tool!(registered))
        .fixer(arg_fixer())
        .on_any_tool_error(any_tool_policy())
        .on_tool_error("search", search_policy())
        .build()
        .map_err(not_built)?;
    let schedule = RetrySchedule::attempts(LLM_ATTEMPTS)
        .map_err(not_built)?
        .with_initial(LLM_FIRST_BACKOFF);
    // The tools of one run share its context (breakers, budget) and its stop. A bare context
    // has no service breaker; the tuned agent has its own, so this run gets one too. The run
    // id is the task run's, as the tuned strategy's: a start after a crash keeps it, so a
    // write's effect key is the one the service saw before the crash.
    let ctx = RunContext::new()
        .with_service_breaker(Arc::new(ServiceBreaker::default()))
        .with_run_id(env.run_id.as_str());
    let ctx = Arc::new(ctx);
    let run = GuardedTool::<BenchTool<FetchPage>>::new(Arc::new(registry), Arc::clone(&ctx))
        .map_err(not_built)?;
    macro_rules! agent {
        ($($name:ident),+) => {
            AgentBuilder::new(RecoveringModel::new(rig_model(env.primary.clone()), schedule, Arc::clone(&ctx)))
                .default_max_turns(MAX_TURNS)
                .add_hook(run.stop_hook())
                $(.tool(run.sibling::<BenchTool<$name>>().map_err(not_built)?))+
                .build()
        };
    }
    let agent = every_tool!(agent);
    ended(agent.prompt(env.task.prompt).await)
}

/// How rig's run ended, as the benchmark judges it.
fn ended<E: std::fmt::Display>(outcome: Result<rig_agent::agent::PromptResponse, E>) -> RunEnd {
    match outcome {
        Ok(response) => Ok(response.output().to_owned()),
        Err(error) => Err(error.to_string()),
    }
}
