//! The agent: a model, a registry of tools and fixers, and the loop that runs them.
//!
//! ```
//! use agent_errors::Agent;
//! use agent_errors::testing::ScriptedModel;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let model = ScriptedModel::new().text("hello");
//! let agent = Agent::builder("greeter").model(model).build()?;
//! assert_eq!(agent.run("say hello").await?, "hello");
//! # Ok(())
//! # }
//! ```
//!
//! The loop keeps one invariant whatever happens: every tool call the model makes gets exactly
//! one result (an answer, an error result, or "operation cancelled"), in the order the model
//! made them. A call that must end the run (an auth failure, retries used up, `throw`, a tripped
//! breaker) ends it before the model gets another turn.

mod builder;
mod builtins;
mod conversation;
mod counts;
mod durable;
mod fixer;
mod http_status;
mod model_failure;
mod options;
mod outcome;
mod output;
mod run;
mod stream;

use std::fmt;
use std::num::NonZeroU32;
use std::sync::Arc;

pub use builder::AgentBuilder;
pub use builtins::{ESCALATE, THROW_EXCEPTION};
pub use conversation::Conversation;
/// A run's id, minted by the loop (a run's spans name it before it starts) and by a rig agent's
/// guarded tools alike.
pub(crate) use durable::new_run_id;
pub use durable::{BrokenTranscript, FinishedRun, ResumeError};
/// How an engine that replays runs (Restate) gives a run its journal.
#[cfg(feature = "restate")]
pub(crate) use durable::{RunJournal, Seam};
pub use fixer::NotJsonArguments;
pub use model_failure::{IntoLlmDecision, ModelError, ModelFailure};
pub use options::RunOptions;
pub use outcome::{HistoryError, RunError, RunOutcome};
pub use output::{AgentOutput, Json};
pub use run::{OutputPolicy, OutputValidator};
pub use stream::RunDelta;

use crate::breaker::ServiceBreaker;
use crate::budget::RetryBudget;
use crate::chat::{CallSource, RequestOptions, ToolSpec};
use crate::checkpoint::CheckpointStore;
use crate::executor::{Approvals, Limits, PermissionHook};
use crate::explain::Explanation;
use crate::model::ChatModel;
use crate::observe::{AgentMeters, EventStream, Feed, Observer};
use crate::registry::Registry;
use crate::usage::UsageLimits;

use builtins::Builtins;
use model_failure::LlmErrorHandler;

/// The default cap on model turns in one run.
pub(crate) const DEFAULT_MAX_TURNS: u32 = 20;

/// An agent: build it once with [`Agent::builder`], run it as often as needed (runs may overlap;
/// each gets a fresh per-run breaker, all share the agent's service breaker).
///
/// `O` is what a run returns: the final text by default, or any [`AgentOutput`] such as
/// [`Json<T>`] (start with [`AgentBuilder::new`] for those).
///
/// # Examples
///
/// Build once, run many times:
///
/// ```
/// use agent_errors::Agent;
/// use agent_errors::testing::{ScriptedModel, echo_tool};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let model = ScriptedModel::new()
///     .tool_call("echo", r#"{"text": "pong"}"#)
///     .text("pong")
///     .text("bye");
/// let agent = Agent::builder("pinger").model(model).tool(echo_tool("echo")).build()?;
/// assert_eq!(agent.run("ping").await?, "pong");
/// assert_eq!(agent.run("goodbye").await?, "bye");
/// # Ok(())
/// # }
/// ```
pub struct Agent<O = String> {
    inner: Arc<AgentInner<O>>,
}

impl<O> Clone for Agent<O> {
    fn clone(&self) -> Self {
        Agent {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<O> fmt::Debug for Agent<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Agent")
            .field("name", &self.inner.name)
            .field("model", &self.inner.model.name())
            .field(
                "tools",
                &self.inner.registry.tool_names().collect::<Vec<_>>(),
            )
            .field("max_turns", &self.inner.max_turns)
            .finish_non_exhaustive()
    }
}

pub(crate) struct AgentInner<O> {
    pub(crate) name: String,
    pub(crate) model: Arc<dyn ChatModel>,
    pub(crate) registry: Registry,
    /// The registry's tools and the enabled built-ins, as offered to the model: shared by every
    /// request of every run.
    pub(crate) offered: Arc<[ToolSpec]>,
    pub(crate) llm_error: Option<LlmErrorHandler<O>>,
    pub(crate) max_turns: u32,
    pub(crate) breaker_threshold: NonZeroU32,
    pub(crate) service_breaker: Arc<ServiceBreaker>,
    pub(crate) retry_budget: Option<Arc<RetryBudget>>,
    pub(crate) permission: Option<Arc<dyn PermissionHook>>,
    /// Who answers calls that need a person, and which calls do beyond their tools' own rule.
    pub(crate) approvals: Approvals,
    pub(crate) system_prompt: Option<String>,
    pub(crate) builtins: Builtins,
    pub(crate) limits: Limits,
    pub(crate) source: CallSource,
    /// Sent with every model request, the output type's format filled in.
    pub(crate) options: RequestOptions,
    /// The live stream of every run's events.
    pub(crate) feed: Feed,
    /// Where every run's events go live, shared by the runs.
    pub(crate) observer: Arc<Observer>,
    pub(crate) meters: AgentMeters,
    /// Where each run's checkpoints go, when its runs are durable.
    pub(crate) checkpoints: Option<Arc<dyn CheckpointStore>>,
    /// A durable run's most steps saved between two snapshots of its whole state, if bounded.
    pub(crate) snapshot_every: Option<u32>,
    /// The caps on each run's usage, unless its options give others.
    pub(crate) usage_limits: Arc<UsageLimits>,
    /// How final answers are judged and re-asked.
    pub(crate) answers: run::AnswerRules<O>,
}

impl<O> Clone for AgentInner<O> {
    fn clone(&self) -> Self {
        AgentInner {
            name: self.name.clone(),
            model: Arc::clone(&self.model),
            registry: self.registry.clone(),
            offered: Arc::clone(&self.offered),
            llm_error: self.llm_error.clone(),
            max_turns: self.max_turns,
            breaker_threshold: self.breaker_threshold,
            service_breaker: Arc::clone(&self.service_breaker),
            retry_budget: self.retry_budget.clone(),
            permission: self.permission.clone(),
            approvals: self.approvals.clone(),
            system_prompt: self.system_prompt.clone(),
            builtins: self.builtins,
            limits: self.limits,
            source: self.source.clone(),
            options: self.options.clone(),
            feed: self.feed.clone(),
            observer: Arc::clone(&self.observer),
            meters: self.meters.clone(),
            checkpoints: self.checkpoints.clone(),
            snapshot_every: self.snapshot_every,
            usage_limits: Arc::clone(&self.usage_limits),
            answers: self.answers.clone(),
        }
    }
}

/// The registry's tools and the enabled built-ins, as offered to the model.
fn offer(registry: &Registry, builtins: Builtins) -> Arc<[ToolSpec]> {
    let tools = registry.specs().iter().cloned();
    tools.chain(builtins.specs()).collect()
}

impl Agent {
    /// Starts an agent whose runs return the model's final text.
    pub fn builder(name: impl Into<String>) -> AgentBuilder<String> {
        AgentBuilder::new(name)
    }
}

impl<O> Agent<O> {
    /// The agent's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The validated tools and fixers.
    pub fn registry(&self) -> &Registry {
        &self.inner.registry
    }

    /// A tool's resolved policy and the layer each key came from; `None` for an unknown tool.
    pub fn explain(&self, tool: &str) -> Option<Explanation> {
        self.inner.registry.explain(tool)
    }

    /// The service breaker shared by this agent's runs.
    pub fn service_breaker(&self) -> &Arc<ServiceBreaker> {
        &self.inner.service_breaker
    }

    /// The cap on model turns per run.
    pub fn max_turns(&self) -> u32 {
        self.inner.max_turns
    }

    /// A live stream of every event of every run of this agent from now on, each tagged with
    /// its run. It holds up to [`DEFAULT_EVENT_CAPACITY`](crate::observe::DEFAULT_EVENT_CAPACITY)
    /// events for a consumer that falls behind; past that the oldest are dropped and the
    /// consumer is told how many it missed (see [`EventStream::recv`]). Runs never wait for it.
    pub fn subscribe(&self) -> EventStream {
        self.inner.feed.subscribe()
    }
}
