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

mod answer;
mod builder;
mod builtins;
mod checkpoint_recorder;
mod conversation;
mod counts;
mod durable;
mod fixer;
mod llm_error;
mod model_call;
mod model_failure;
mod observed;
mod one_result;
mod output;
mod recorder;
mod run;
mod saved_stop;
mod stream;
mod turn;
mod usage_meter;

use std::fmt;
use std::num::NonZeroU32;
use std::sync::Arc;

pub use builder::AgentBuilder;
pub use builtins::{ESCALATE, THROW_EXCEPTION};
pub use conversation::{Conversation, HistoryError};
pub use durable::{BrokenTranscript, FinishedRun, ResumeError};
pub use fixer::NotJsonArguments;
pub use llm_error::{IntoLlmDecision, ModelError};
pub use model_failure::ModelFailure;
pub use output::{AgentOutput, Json};
pub use stream::RunDelta;

use crate::approval::{Decision, PendingApproval};
use crate::breaker::ServiceBreaker;
use crate::budget::RetryBudget;
use crate::chat::{CallSource, FinishReason, Message, RequestOptions, ToolSpec};
use crate::checkpoint::{CheckpointError, CheckpointStore};
use crate::error::{BoxError, Severity};
use crate::events::RunReport;
use crate::executor::{Approvals, Cancellation, Limits, PermissionHook, Terminated};
use crate::explain::Explanation;
use crate::extensions::Extensions;
use crate::model::ChatModel;
use crate::observe::{AgentMeters, EventStream, Feed};
use crate::registry::Registry;
use crate::usage::{UsageLimitExceeded, UsageLimits};

use builtins::Builtins;
use llm_error::LlmErrorHandler;

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
    pub(crate) meters: AgentMeters,
    /// Where each run's checkpoints go, when its runs are durable.
    pub(crate) checkpoints: Option<Arc<dyn CheckpointStore>>,
    /// The caps on each run's usage, unless its options give others.
    pub(crate) usage_limits: Arc<UsageLimits>,
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
            meters: self.meters.clone(),
            checkpoints: self.checkpoints.clone(),
            usage_limits: Arc::clone(&self.usage_limits),
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

/// How to run: cancellation and the like.
///
/// # Examples
///
/// ```
/// use agent_errors::{Agent, Cancellation, RunOptions};
/// use agent_errors::testing::ScriptedModel;
///
/// struct UserId(u64); // what a tool reads with a `Ctx<UserId>` parameter
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let agent = Agent::builder("a").model(ScriptedModel::new().text("done")).build()?;
/// let cancel = Cancellation::new(); // keep a clone to stop the run from elsewhere
/// let options = RunOptions::new().run_id("ticket-1234").context(UserId(42)).cancellation(cancel.clone());
/// let outcome = agent.run_with("close the ticket", options).await;
/// assert_eq!(outcome.run_id, "ticket-1234");
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct RunOptions {
    /// Cancels the run: pending tool calls answer "operation cancelled" and the run ends with
    /// [`RunError::Cancelled`].
    pub cancellation: Cancellation,
    /// Where the model's answers are streamed as they arrive, when set: the run then calls
    /// [`ChatModel::chat_stream`] instead of `chat`.
    pub deltas: Option<tokio::sync::mpsc::Sender<RunDelta>>,
    /// Values for this run's tools, fixers and permission hook, asked for by type.
    pub extensions: Extensions,
    /// This run's own live stream, if asked for.
    pub(crate) feed: Option<Feed>,
    /// The run's id, when the caller chose it.
    pub(crate) run_id: Option<String>,
    /// The engine journal the run steps through, when it runs on a durable-execution engine.
    pub(crate) journal: Option<crate::journal::RunJournal>,
    /// A person's answers to calls the run waits on, by call id.
    pub(crate) answers: Vec<(String, Decision)>,
    /// This run's caps, when not the agent's.
    pub(crate) usage_limits: Option<Arc<UsageLimits>>,
}

impl RunOptions {
    /// Default options: a cancellation handle nobody else holds.
    pub fn new() -> Self {
        RunOptions::default()
    }

    /// Uses this cancellation handle.
    #[must_use]
    pub fn cancellation(mut self, cancellation: Cancellation) -> Self {
        self.cancellation = cancellation;
        self
    }

    /// Names the run (by default a random id is made): the key its checkpoints are saved
    /// under, what [`Agent::resume`] is given, and the first half of each call's
    /// [`IdempotencyKey`](crate::call::IdempotencyKey). A durable run refuses an id its store already
    /// holds ([`RunError::Checkpoint`] with a conflict), so two runs never share one.
    #[must_use]
    pub fn run_id(mut self, run_id: impl Into<String>) -> Self {
        self.run_id = Some(run_id.into());
        self
    }

    /// Answers the call `call_id` that a run waits on (see
    /// [`RunError::WaitingForPerson`]): given to [`Agent::resume`], the run goes on with the
    /// answer instead of asking its approver. An answer for a call that does not wait is unused.
    ///
    /// ```
    /// use agent_errors::{RunOptions, approval::Decision};
    ///
    /// let options = RunOptions::new()
    ///     .answer("call-1", Decision::Approve)
    ///     .answer("call-2", Decision::Deny("not this month".into()));
    /// # let _ = options;
    /// ```
    #[must_use]
    pub fn answer(mut self, call_id: impl Into<String>, decision: Decision) -> Self {
        self.answers.push((call_id.into(), decision));
        self
    }

    /// Streams the model's answers to `sender` as they arrive: text and tool-call deltas, and
    /// [`RunDelta::TurnRestarted`] when a retry discards a turn's partial output. A full channel
    /// slows the stream down (backpressure); a closed one is ignored. Tool calls run only once
    /// their turn's stream is complete.
    #[must_use]
    pub fn stream_to(mut self, sender: tokio::sync::mpsc::Sender<RunDelta>) -> Self {
        self.deltas = Some(sender);
        self
    }

    /// Gives this run a value that its tools and fixers ask for with a [`Ctx<T>`](crate::Ctx)
    /// parameter (and the permission hook reads): the user's identity, a token, a tenant. One
    /// value per type; the model never sees it.
    #[must_use]
    pub fn context<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.extensions.insert(value);
        self
    }

    /// Caps this run's usage with `limits` instead of the agent's
    /// ([`AgentBuilder::usage_limits`]). A resumed run keeps the caps it was started with,
    /// unless these options give it new ones.
    ///
    /// ```
    /// use agent_errors::{Agent, RunError, RunOptions};
    /// use agent_errors::run::{UsageLimit, UsageLimits};
    /// use agent_errors::testing::ScriptedModel;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let agent = Agent::builder("greeter").model(ScriptedModel::new().text("hi")).build()?;
    /// let options = RunOptions::new().usage_limits(UsageLimits::new().max_requests(0));
    /// let error = agent.run_with("say hi", options).await.result.unwrap_err();
    /// assert_eq!(error.usage_limit().unwrap().limit, UsageLimit::Requests);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn usage_limits(mut self, limits: UsageLimits) -> Self {
        self.usage_limits = Some(Arc::new(limits));
        self
    }

    /// Gives this run every value of `extensions` (replacing any given before).
    #[must_use]
    pub fn extensions(mut self, extensions: Extensions) -> Self {
        self.extensions = extensions;
        self
    }

    /// Streams this run's events live, holding up to `capacity` (at least 1) for a consumer
    /// that falls behind; past that the oldest are dropped and the consumer is told how many it
    /// missed. The run never waits for the stream, and the stream ends when the run does
    /// (and these options' clones are dropped).
    ///
    /// ```
    /// use agent_errors::{Agent, RunOptions};
    /// use agent_errors::testing::ScriptedModel;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let agent = Agent::builder("greeter").model(ScriptedModel::new().text("hi")).build()?;
    /// let (options, mut events) = RunOptions::new().events(64);
    /// agent.run_with("say hi", options).await.result?;
    /// // Nothing went wrong, so there was nothing to tell: the stream ends.
    /// assert!(events.recv().await.is_none());
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn events(mut self, capacity: usize) -> (Self, EventStream) {
        let feed = Feed::new(capacity);
        let stream = feed.subscribe();
        self.feed = Some(feed);
        (self, stream)
    }
}

/// The result of a run together with what happened on the way.
///
/// # Examples
///
/// ```
/// use agent_errors::{Agent, Message};
/// use agent_errors::testing::{ScriptedModel, echo_tool};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let agent = Agent::builder("a")
///     .model(ScriptedModel::new().tool_call("echo", r#"{"text": "hi"}"#).text("said hi"))
///     .tool(echo_tool("echo"))
///     .build()?;
/// let outcome = agent.run_with_report("say hi").await;
/// let tool_results = outcome.transcript.iter().filter(|m| matches!(m, Message::Tool(_))).count();
/// assert_eq!((tool_results, outcome.report.tool_calls), (1, 1));
/// assert_eq!(outcome.into_result()?, "said hi");
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub struct RunOutcome<O = String> {
    /// The output, or why the run ended without one.
    pub result: Result<O, RunError>,
    /// Events and counts.
    pub report: RunReport,
    /// The conversation as it stood when the run ended: every assistant tool call is followed by
    /// exactly one tool message answering it, including calls whose outcome ended the run.
    pub transcript: Vec<Message>,
    /// The run's id: the one given with [`RunOptions::run_id`], or the one made for it.
    pub run_id: String,
}

impl<O> RunOutcome<O> {
    /// The result alone.
    pub fn into_result(self) -> Result<O, RunError> {
        self.result
    }
}

/// Why a run ended without an output.
///
/// # Examples
///
/// What a service answers its user, by how the run ended:
///
/// ```
/// use agent_errors::{Agent, HttpError, RunError};
/// use agent_errors::testing::ScriptedModel;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let agent = Agent::builder("a").model(ScriptedModel::new().error(HttpError::new(500, "down"))).build()?;
/// let reply = match agent.run("hi").await {
///     Ok(answer) => answer,
///     Err(RunError::Terminated(stop)) => stop.user_message.to_owned(),
///     Err(RunError::Escalated { reason, .. }) => format!("I need your help: {reason}"),
///     Err(RunError::Cancelled | RunError::DeadlineExceeded { .. }) => "Stopped.".to_owned(),
///     Err(RunError::Model(failure)) => {
///         tracing::warn!(error = %failure, "model failed"); // redacted: safe to log
///         "The assistant is unavailable, try again later.".to_owned()
///     }
///     Err(other) => {
///         tracing::error!(error = %other, "run failed");
///         "Something went wrong.".to_owned()
///     }
/// };
/// assert_eq!(reply, "The assistant is unavailable, try again later.");
/// # Ok(())
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// A tool failure ended the run in code (auth, retries used up, `throw`, or the model's
    /// `throw_exception`). Shows the fixed user-facing message.
    #[error(transparent)]
    Terminated(Box<Terminated>),
    /// A tool failed `failures` times in a row in this run, reaching the breaker threshold.
    #[error(
        "the tool `{tool}` failed {failures} times in a row, so the run was stopped; try again later"
    )]
    BreakerTripped {
        /// The tool.
        tool: String,
        /// Consecutive failures counted.
        failures: u32,
    },
    /// The model was still calling tools after `max_turns` turns.
    #[error("the run reached its cap of {max_turns} model turns without a final answer")]
    TurnCap {
        /// The cap.
        max_turns: u32,
    },
    /// The run was cancelled.
    #[error("the run was cancelled")]
    Cancelled,
    /// The model call failed and `on_llm_error` did not recover. Shows the model's error
    /// redacted (its `Display`, `Debug` and `source()` chain); the original, to downcast, is
    /// [`RunError::model_error`].
    #[error(transparent)]
    Model(ModelFailure),
    /// The model called the built-in `escalate` tool: a failure the caller can act on.
    #[error("the agent escalated ({severity}): {reason}")]
    Escalated {
        /// The model's reason (untrusted text, secrets redacted).
        reason: String,
        /// How serious.
        severity: Severity,
    },
    /// The final answer could not be read as the agent's output type.
    #[error("the model's final answer could not be read as the expected output")]
    InvalidOutput {
        /// The answer, secrets redacted.
        text: String,
        /// Why it did not fit: the output type's own error, as it was (to downcast; a
        /// parser's message may quote the answer).
        #[source]
        error: BoxError,
    },
    /// The model answered with neither text nor tool calls.
    #[error("the model answered with neither text nor tool calls")]
    EmptyResponse,
    /// The run took longer than its deadline (`Limits::with_run_deadline`).
    #[error("the run did not finish within its deadline of {limit:?}")]
    DeadlineExceeded {
        /// The deadline.
        limit: std::time::Duration,
    },
    /// Code of yours that the loop calls (the model's `chat`, an `on_llm_error` handler)
    /// panicked. The panic is caught: the process and the agent stay usable.
    #[error("`{callback}` panicked: {message}")]
    CallbackPanicked {
        /// Which callback: `ChatModel::chat` or `on_llm_error`.
        callback: &'static str,
        /// The panic's message, redacted and bounded.
        message: String,
    },
    /// A durable run could not save its checkpoint, so it stopped before anything else ran. A
    /// [`CheckpointError::Conflict`] means another process saved the run since this one did:
    /// that process owns it now.
    #[error(transparent)]
    Checkpoint(CheckpointError),
    /// [`Agent::resume`] could not go on with the run.
    #[error(transparent)]
    Resume(ResumeError),
    /// Calls of the run wait for a person (their tool requires approval, or a policy handed a
    /// failure to a person) and nobody answered yet. Nothing is running and nothing is spent
    /// while it waits: a checkpointed run keeps its checkpoint as it was, and
    /// [`Agent::resume`] with [`RunOptions::answer`] for each call goes on with it (in any
    /// process). The outcome's transcript answers these calls with an error result saying they
    /// wait, so it stays a valid conversation; the checkpoint does not.
    #[error("the run is waiting for a person to answer {} call(s)", pending.len())]
    WaitingForPerson {
        /// The calls that wait, in the order the model made them.
        pending: Vec<PendingApproval>,
    },
    /// The history handed to [`Agent::run_conversation`] (or a [`Conversation`]) breaks the
    /// one-result-per-call rule, so it was not sent to the model; the outcome's transcript is
    /// the history as handed in.
    #[error("the conversation history was refused: {0}")]
    InvalidHistory(HistoryError),
    /// The run went past one of its [`UsageLimits`]: which, and what it had used. The
    /// transcript answers every call it holds; calls of a turn the cap refused are answered as
    /// not run.
    #[error(transparent)]
    UsageLimit(Box<UsageLimitExceeded>),
    /// A tool of the agent needs a context value (a `Ctx<T>` parameter, or
    /// [`ToolDef::requires_context`](crate::ToolDef::requires_context)) the run was not given,
    /// so the run did not start: give it with [`RunOptions::context`].
    #[error(
        "the tool `{tool}` needs a `{type_name}` that the run was not given: pass one with \
         `RunOptions::context`"
    )]
    MissingContext {
        /// The tool.
        tool: String,
        /// The type of the value it needs.
        type_name: &'static str,
    },
    /// The model declined to answer (finish reason `Refusal`), or the provider withheld its
    /// answer (`ContentFilter`): not an empty response, and not something a retry of the same
    /// request is expected to change.
    #[error("the model declined to answer")]
    Refused {
        /// The model's explanation, if it gave one (untrusted text, secrets redacted; empty
        /// when none).
        text: String,
        /// `Refusal` or `ContentFilter`.
        reason: FinishReason,
    },
}

impl RunError {
    /// The model's original error, when a model call ended the run: unredacted, to downcast
    /// to its type ([`ModelFailure::unredacted_error`]). Do not log it; log the `RunError`.
    pub fn model_error(&self) -> Option<&ModelError> {
        match self {
            RunError::Model(e) => Some(e.unredacted_error()),
            _ => None,
        }
    }

    /// The model's original error, owned and unredacted; any other error is given back.
    pub fn into_model_error(self) -> Result<BoxError, RunError> {
        match self {
            RunError::Model(e) => Ok(e.into_unredacted_error()),
            other => Err(other),
        }
    }

    /// The usage limit the run went past, if that ended it.
    pub fn usage_limit(&self) -> Option<&UsageLimitExceeded> {
        match self {
            RunError::UsageLimit(exceeded) => Some(exceeded),
            _ => None,
        }
    }

    /// The tool failure that ended the run, if one did.
    pub fn terminated(&self) -> Option<&Terminated> {
        match self {
            RunError::Terminated(t) => Some(t),
            _ => None,
        }
    }

    /// Whether the run was cancelled.
    pub fn is_cancelled(&self) -> bool {
        matches!(self, RunError::Cancelled)
    }

    /// Whether another process owns the run: its checkpoint moved on since this one saved it.
    pub fn is_checkpoint_conflict(&self) -> bool {
        matches!(self, RunError::Checkpoint(CheckpointError::Conflict { .. }))
    }
}
