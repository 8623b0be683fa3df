//! What a run hands back: its result, report and transcript, and how it failed.

use crate::approval::{ExpiredApproval, PendingApproval};
use crate::chat::{FinishReason, Message};
use crate::checkpoint::CheckpointError;
use crate::error::{BoxError, Severity};
use crate::events::{Event, RunReport};
use crate::executor::Terminated;
use crate::usage::UsageLimitExceeded;

use super::{ModelError, ModelFailure, ResumeError};

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
    /// The run's id: the one given with [`RunOptions::run_id`](crate::RunOptions::run_id), or the one made for it.
    pub run_id: String,
}

impl<O> RunOutcome<O> {
    /// The result alone.
    pub fn into_result(self) -> Result<O, RunError> {
        self.result
    }

    /// The calls the run ended waiting on, for a person to answer
    /// ([`RunError::WaitingForPerson`]'s); empty when it did not end so.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::Agent;
    /// use agent_errors::checkpoint::MemoryCheckpoints;
    /// use agent_errors::testing::{ScriptedModel, echo_tool};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let agent = Agent::builder("a")
    ///     .model(ScriptedModel::new().tool_call("wipe", r#"{"text": "all"}"#))
    ///     .tool(echo_tool("wipe").requires_approval(true))
    ///     .checkpoints(MemoryCheckpoints::new())
    ///     .build()?;
    /// let outcome = agent.run_with_report("clean up").await;
    /// assert_eq!(outcome.pending_approvals()[0].tool, "wipe");
    /// # Ok(())
    /// # }
    /// ```
    pub fn pending_approvals(&self) -> &[PendingApproval] {
        match &self.result {
            Err(RunError::WaitingForPerson { pending }) => pending,
            _ => &[],
        }
    }

    /// The calls whose person's answer had expired when the run reached them, in the order
    /// reached: they did not run, and the model was told the approval expired.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use agent_errors::{Agent, RunOptions};
    /// use agent_errors::approval::{Answer, Decision};
    /// use agent_errors::checkpoint::MemoryCheckpoints;
    /// use agent_errors::testing::{ScriptedModel, echo_tool};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let agent = Agent::builder("a")
    ///     .model(ScriptedModel::new().tool_call("wipe", r#"{"text": "all"}"#).text("it expired"))
    ///     .tool(echo_tool("wipe").requires_approval(true))
    ///     .checkpoints(MemoryCheckpoints::new())
    ///     .build()?;
    /// let waiting = agent.run_with("clean up", RunOptions::new().run_id("tidy")).await;
    /// let pending = &waiting.pending_approvals()[0];
    /// // The person answered, but too late to count:
    /// let stale = Answer::to(pending, Decision::Approve).expires_at(SystemTime::now() - Duration::from_secs(1));
    /// let outcome = agent.resume("tidy", RunOptions::new().answered(stale)).await;
    /// assert_eq!(outcome.expired_approvals()[0].call_id, pending.call_id);
    /// assert_eq!(outcome.result?, "it expired");
    /// # Ok(())
    /// # }
    /// ```
    pub fn expired_approvals(&self) -> Vec<ExpiredApproval> {
        let expired = self.report.events.iter().filter_map(|event| match event {
            Event::AnswerExpired {
                tool,
                call_id,
                digest,
            } => Some(ExpiredApproval {
                call_id: call_id.clone(),
                tool: tool.clone(),
                digest: digest.clone(),
            }),
            _ => None,
        });
        expired.collect()
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
    /// [`Agent::resume`](crate::Agent::resume) could not go on with the run.
    #[error(transparent)]
    Resume(ResumeError),
    /// Calls of the run wait for a person (their tool requires approval, or a policy handed a
    /// failure to a person) and nobody answered yet. Nothing is running and nothing is spent
    /// while it waits: a checkpointed run keeps its checkpoint as it was, and
    /// [`Agent::resume`](crate::Agent::resume) with [`RunOptions::answer`](crate::RunOptions::answer) for each call goes on with it (in any
    /// process). The outcome's transcript answers these calls with an error result saying they
    /// wait, so it stays a valid conversation; the checkpoint does not.
    #[error("the run is waiting for a person to answer {} call(s)", pending.len())]
    WaitingForPerson {
        /// The calls that wait, in the order the model made them.
        pending: Vec<PendingApproval>,
    },
    /// The history handed to [`Agent::run_conversation`](crate::Agent::run_conversation) (or a [`Conversation`](crate::Conversation)) breaks the
    /// one-result-per-call rule, so it was not sent to the model; the outcome's transcript is
    /// the history as handed in.
    #[error("the conversation history was refused: {0}")]
    InvalidHistory(HistoryError),
    /// The run went past one of its [`UsageLimits`](crate::run::UsageLimits): which, and what it had used. The
    /// transcript answers every call it holds; calls of a turn the cap refused are answered as
    /// not run.
    #[error(transparent)]
    UsageLimit(Box<UsageLimitExceeded>),
    /// A tool of the agent needs a context value (a `Ctx<T>` parameter, or
    /// [`ToolDef::requires_context`](crate::ToolDef::requires_context)) the run was not given,
    /// so the run did not start: give it with [`RunOptions::context`](crate::RunOptions::context).
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
    /// The `on_llm_error` handler returned the `Err` of
    /// [`LlmErrorDecision::retry(0, ..)`](crate::LlmErrorDecision::retry): a retry of no
    /// attempts, which the loop cannot carry out. Return
    /// [`LlmErrorDecision::Rethrow`](crate::LlmErrorDecision::Rethrow) to give up, or at least
    /// one attempt.
    #[error(
        "on_llm_error returned `LlmErrorDecision::retry(0, ..)` ({0}): return `LlmErrorDecision::Rethrow` \
         to give up, or a retry of at least 1 attempt"
    )]
    InvalidLlmDecision(crate::retry::ZeroAttempts),
    /// The run was started on a Tokio runtime built without its timer, which every backoff and
    /// timeout of a run sleeps on, so it did not start.
    #[error(
        "the run needs a Tokio runtime with its timer enabled, for its retries' backoff and its \
         timeouts: call `enable_time()` (or `enable_all()`) on the runtime builder, or turn on \
         tokio's `time` feature for `#[tokio::main]`"
    )]
    NoTimer,
    /// [`Agent::run_with`](crate::Agent::run_with) was given the id of a run the agent's
    /// checkpoint store already holds: a run id names one run. Nothing ran and the saved run is
    /// untouched: resume it with [`Agent::resume`](crate::Agent::resume) (with the answers it
    /// waits for, if it waits), or start the new task under an id of its own.
    #[error(
        "run {run_id} already exists: resume it with `Agent::resume`, or start a new run under \
         another id"
    )]
    RunExists {
        /// The run.
        run_id: String,
    },
    /// The usage limits given to this run ([`RunOptions::usage_limits`](crate::RunOptions::usage_limits))
    /// could never apply (a cap on a tool the agent lacks, a graceful stop for a cap they do
    /// not set, a cost cap without a price for the agent's model, a figure that is not an
    /// amount), so the run did not start: the problems, as the agent builder lists them.
    #[error("the run's usage limits were refused: {0}")]
    InvalidUsageLimits(crate::registry::ConfigError),
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

/// Why a history handed to a run was refused: it breaks the rule model APIs enforce, that
/// every tool call of an assistant message is answered by exactly one tool message, right
/// after it and before any other message. A provider answers such a transcript with a 400 on
/// every later turn, so the run refuses it before the model is called
/// ([`RunError::InvalidHistory`]), naming the message, instead of guessing a repair: which of
/// two results to keep, or what a lost call was, is not the library's to decide.
///
/// `index` counts the messages of the history as handed in, from 0; `call_id` is quoted
/// sanitized and bounded (it may come from a model).
///
/// # Examples
///
/// ```
/// use agent_errors::{Message, RunError, ToolCall, ToolResult, run::HistoryError};
/// use agent_errors::Agent;
/// use agent_errors::testing::ScriptedModel;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let agent = Agent::builder("a").model(ScriptedModel::new().text("hi")).build().unwrap();
/// let call = ToolCall::new("call_1", "lookup", "{}");
/// let history = vec![
///     Message::user("find it"),
///     Message::assistant(None, vec![call.clone()]),
///     Message::Tool(ToolResult::ok(&call, "found")),
///     Message::Tool(ToolResult::ok(&call, "found again")),
///     Message::user("thanks"),
/// ];
/// let outcome = agent.run_conversation(history, Default::default()).await;
/// match outcome.result {
///     Err(RunError::InvalidHistory(HistoryError::DuplicateResult { index, .. })) => {
///         assert_eq!(index, 3)
///     }
///     other => panic!("{other:?}"),
/// }
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HistoryError {
    /// A tool message answers a call that the assistant message just before it did not make.
    #[error(
        "message {index}: a tool result for call `{call_id}`, which the assistant message \
         before it did not make"
    )]
    ResultWithoutCall {
        /// The tool message.
        index: usize,
        /// The id it answers.
        call_id: String,
    },
    /// A second tool message answers the same call.
    #[error("message {index}: a second tool result for call `{call_id}`")]
    DuplicateResult {
        /// The second tool message.
        index: usize,
        /// The id both answer.
        call_id: String,
    },
    /// An assistant's call has no tool message answering it before the next other message (or
    /// the end of the history).
    #[error("message {index}: the call `{call_id}` has no tool result after it")]
    CallWithoutResult {
        /// The assistant message that made the call.
        index: usize,
        /// The unanswered call's id.
        call_id: String,
    },
    /// One assistant message makes two calls with the same id, so no result can say which
    /// it answers.
    #[error("message {index}: two tool calls with the id `{call_id}`")]
    DuplicateCallId {
        /// The assistant message.
        index: usize,
        /// The id given twice.
        call_id: String,
    },
}
