//! How a call ends: the failure being handled, what the ladder decided ([`Handled`]), and the one
//! [`CallOutcome`] the caller gets, a result for the model or a stop of the run.

use std::fmt;

use super::context::RunContext;
use super::failure::{Failed, classify_tool_error};
use crate::approval::PendingApproval;
use crate::chat::{ToolCall, ToolResult};
use crate::classify::Classifier;
use crate::classify::RedactedError;
use crate::classify::{Classification, ErrorKind, chain, is_for_operators, model_words};
use crate::error::{BoxError, Severity, ToolError};
use crate::events::Event;
use crate::observe::{CallEnd, ToolCallEnd};
use crate::sanitize::{SurfacedError, scrub};
use crate::tool::ToolOutput;

/// What a tool call's result is when the run was cancelled before it could finish.
pub(crate) const CANCELLED: &str = "operation cancelled";

/// Why a tool failure ended the run.
///
/// # Examples
///
/// A tool whose credentials are refused ends the run; the caller reads why:
///
/// ```
/// use agent_errors::{Registry, RunContext, ToolCall, HttpError};
/// use agent_errors::run::TerminationReason;
/// use agent_errors::testing::{FaultyTool, echo_tool};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let crm = FaultyTool::new(echo_tool("crm")).fail_times(1, || HttpError::new(401, "bad token"));
/// let registry = Registry::builder().tool(crm.tool()).build()?;
/// let call = ToolCall::new("c1", "crm", r#"{"text": "x"}"#);
/// let stop = registry.execute(&RunContext::new(), &call).await;
/// let page_on_call = match &stop.stop().expect("a refused credential ends the run").reason {
///     TerminationReason::Auth => true,
///     TerminationReason::RetriesExhausted { attempts } => *attempts > 3,
///     TerminationReason::CircuitOpen | TerminationReason::BreakerTripped { .. } => false,
///     TerminationReason::Thrown(_) | TerminationReason::PermissionDenials { .. } => false,
///     _ => false, // the enum is non-exhaustive
/// };
/// assert!(page_on_call);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TerminationReason {
    /// Credentials were refused: nothing to retry.
    Auth,
    /// A retryable failure used up its retries.
    RetriesExhausted {
        /// Calls made in all.
        attempts: u32,
    },
    /// The service breaker is open and the ladder had no fallback or degrade.
    CircuitOpen,
    /// The tool failed this many times in a row in this run: the run stops on purpose rather
    /// than let the model keep calling it.
    BreakerTripped {
        /// Consecutive failures counted.
        failures: u32,
    },
    /// A `throw` rung, or a fixer that threw.
    Thrown(String),
    /// The permission hook denied this many calls in the run, the run's budget
    /// ([`Limits::max_permission_denials`](crate::Limits)).
    PermissionDenials {
        /// Denials counted, across every tool.
        denials: u32,
    },
    /// The call waits for a person's answer (see [`crate::approval`]): the run stops without
    /// holding a process, and a checkpointed run goes on once resumed with the answer.
    WaitingForPerson(Box<PendingApproval>),
}

impl TerminationReason {
    /// The fixed message a user is shown.
    pub fn user_message(&self) -> &'static str {
        match self {
            TerminationReason::Auth => {
                "I couldn't finish that: access was denied, so the credentials probably need checking."
            }
            TerminationReason::RetriesExhausted { attempts } if *attempts <= 1 => {
                "I couldn't finish that: a service it depends on is unavailable right now."
            }
            TerminationReason::RetriesExhausted { .. } => {
                "I couldn't finish that: a service stayed unavailable after several retries."
            }
            TerminationReason::CircuitOpen => {
                "I couldn't finish that: a service is failing, so calls to it are paused for now."
            }
            TerminationReason::BreakerTripped { .. } => {
                "I couldn't finish that: a tool kept failing, so I stopped trying."
            }
            TerminationReason::PermissionDenials { .. } => {
                "I couldn't finish that: it needs actions I'm not allowed to take."
            }
            TerminationReason::Thrown(_) => {
                "I couldn't finish that: a tool failed in a way that cannot be recovered."
            }
            TerminationReason::WaitingForPerson(_) => {
                "This needs a person's answer before it can go on; it will go on once they answer."
            }
        }
    }
}

/// A tool failure that ends the run in code, before the model sees it.
///
/// Nothing it shows is the tool's error as the tool wrote it, since an upstream error's text
/// and fields (headers, URLs) are where credentials hide: its `Display` is the fixed user
/// message, its `Debug` shows the failure as redacted text, and its `source()` chain is a
/// redacted copy of the failure's ([`RedactedError`] levels, an [`HttpError`](crate::HttpError)
/// level as a redacted `HttpError`), so an application that logs it with its causes (`anyhow`'s
/// `{:#}`, `eyre`, tracing) prints no secret, and `find_in_chain::<HttpError>` still finds the
/// status. The original error, to downcast to a type of your own, is
/// [`unredacted_error`](Terminated::unredacted_error).
///
/// # Examples
///
/// ```
/// use agent_errors::{Agent, ErrorKind, HttpError, RunError};
/// use agent_errors::testing::{FaultyTool, ScriptedModel, echo_tool};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let crm = FaultyTool::new(echo_tool("crm")).fail_times(1, || HttpError::new(401, "token sk-4f9a8b7c6d5e4f3a2b1c0d"));
/// let agent = Agent::builder("a")
///     .model(ScriptedModel::new().tool_call("crm", r#"{"text": "x"}"#))
///     .tool(crm.tool())
///     .build()?;
/// let error = agent.run("look up the customer").await.unwrap_err();
/// let stop = error.terminated().expect("the tool ended the run");
/// assert_eq!((stop.tool.as_str(), stop.kind), ("crm", ErrorKind::Auth));
/// println!("{}", stop.user_message); // safe to show a user
/// assert!(!format!("{stop:?}").contains("sk-4f9a")); // and to log
/// # Ok(())
/// # }
/// ```
#[derive(thiserror::Error)]
#[error("{user_message}")]
#[non_exhaustive]
pub struct Terminated {
    /// The tool.
    pub tool: String,
    /// The kind of the failure.
    pub kind: ErrorKind,
    /// Why the run ended.
    pub reason: TerminationReason,
    /// A fixed message for the user.
    pub user_message: &'static str,
    /// The failure itself, when there was one: unredacted, so never `source()`.
    error: Option<ToolError>,
    /// The failure's chain, redacted: what `source()` hands out.
    #[source]
    redacted: Option<BoxError>,
}

impl fmt::Debug for Terminated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let error = self
            .error
            .as_ref()
            .map(|e| crate::redact::redact(&chain_text(e.cause())).into_owned());
        f.debug_struct("Terminated")
            .field("tool", &self.tool)
            .field("kind", &self.kind)
            .field("reason", &self.reason)
            .field("user_message", &self.user_message)
            .field("error", &error)
            .finish()
    }
}

impl Terminated {
    pub(crate) fn new(
        tool: String,
        kind: ErrorKind,
        reason: TerminationReason,
        error: Option<ToolError>,
    ) -> Self {
        Terminated {
            tool,
            kind,
            user_message: reason.user_message(),
            reason,
            redacted: error.as_ref().map(|e| RedactedError::chain_of(e)),
            error,
        }
    }

    /// The failure that ended the run as the tool returned it, secrets and all, when there was
    /// one: to downcast to an error type of your own (`error.cause().downcast_ref::<MyError>()`).
    /// Do not log it; log the `Terminated` itself, whose `source()` chain is redacted.
    pub fn unredacted_error(&self) -> Option<&ToolError> {
        self.error.as_ref()
    }
}

/// The one outcome of one tool call.
///
/// # Examples
///
/// In a loop of your own, each call's outcome is either a result for the model or the end of the
/// run:
///
/// ```
/// use agent_errors::{Message, Registry, RunContext, ToolCall};
/// use agent_errors::call::CallOutcome;
/// use agent_errors::testing::echo_tool;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let registry = Registry::builder().tool(echo_tool("echo")).build()?;
/// let calls = [ToolCall::new("c1", "echo", r#"{"text": "hi"}"#)];
/// let mut transcript = Vec::new();
/// for outcome in registry.execute_turn(&RunContext::new(), &calls).await {
///     match outcome {
///         CallOutcome::Result(result) => transcript.push(Message::Tool(result)),
///         CallOutcome::Stop(stop) => return Err(stop.into()),
///     }
/// }
/// assert_eq!(transcript.len(), 1);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub enum CallOutcome {
    /// A result for the model (ok or `is_error`).
    Result(ToolResult),
    /// The run must end.
    Stop(Box<Terminated>),
}

impl CallOutcome {
    /// The result, if this is one.
    pub fn result(&self) -> Option<&ToolResult> {
        match self {
            CallOutcome::Result(r) => Some(r),
            CallOutcome::Stop(_) => None,
        }
    }

    /// The stop, if this is one.
    pub fn stop(&self) -> Option<&Terminated> {
        match self {
            CallOutcome::Stop(t) => Some(t),
            CallOutcome::Result(_) => None,
        }
    }

    /// "operation cancelled", the answer of a call the run stopped waiting for.
    pub(crate) fn cancelled(call: &ToolCall) -> Self {
        CallOutcome::Result(ToolResult::error(call, CANCELLED))
    }
}

impl ToolCallEnd for CallOutcome {
    fn end(&self) -> CallEnd {
        match self {
            CallOutcome::Result(result) if result.is_error => CallEnd::Error,
            CallOutcome::Result(_) => CallEnd::Ok,
            CallOutcome::Stop(stop) => CallEnd::Stop {
                error_type: stop.kind.as_str(),
            },
        }
    }
}

/// The failure being handled, with what we know about it.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) error: ToolError,
    pub(crate) class: Classification,
    /// Calls made so far for this tool call, the first included.
    pub(crate) attempts: u32,
    /// The tool that failed, when not the one called: a fallback.
    pub(crate) blamed: Option<String>,
    /// That a fallback was tried for this failure and failed too, sanitized and bounded: said
    /// after the failure's own words, never in place of them.
    pub(crate) fallback_failed: Option<String>,
}

impl Failure {
    /// The failure of `failed`, classified unless the attempt already did.
    pub(crate) fn new(
        failed: impl Into<Failed>,
        attempts: u32,
        classifier: Option<&Classifier>,
    ) -> Self {
        let Failed { error, class } = failed.into();
        let class = class.unwrap_or_else(|| classify_tool_error(&error, classifier));
        Failure {
            error,
            class,
            attempts,
            blamed: None,
            fallback_failed: None,
        }
    }

    /// What the model (or a `throw`) is told: the failure's own words for the model, then, when
    /// a fallback was tried, that it failed too.
    pub(crate) fn shown_message(&self) -> String {
        let mut text = self.model_message();
        if let Some(fallback) = &self.fallback_failed {
            text.push_str(" (");
            text.push_str(fallback);
            text.push(')');
        }
        text
    }

    /// The failure's own words and those of its causes, each said once: for operators (events,
    /// logs), scrubbed where they are sent.
    pub(crate) fn message(&self) -> String {
        chain_text(self.error.cause())
    }

    /// The failure's words the model may read: [`message`](Failure::message) down to a level
    /// whose words are for operators only (a rig tool's `ToolExecutionError`, of which the model
    /// reads only its model feedback).
    pub(crate) fn model_message(&self) -> String {
        words_of(self.error.cause(), model_words)
    }

    /// What the model should do when its kind's suggestion would mislead: a panic is a `Bug`
    /// like a refused argument, but no change of arguments fixes the tool.
    pub(crate) fn suggestion(&self) -> Option<&'static str> {
        self.error
            .cause()
            .is::<super::ToolPanic>()
            .then_some(PANIC_SUGGESTION)
    }
}

/// The suggestion for a tool that panicked.
pub(crate) const PANIC_SUGGESTION: &str = "The tool crashed: a bug in the tool, not in the \
     arguments. Do not call it again the same way; use another tool or approach, or tell the user.";

/// An error's words and those of its causes, each said once.
fn chain_text(error: &(dyn std::error::Error + 'static)) -> String {
    words_of(error, |level| (level.to_string(), true))
}

/// The words `say` gives each level of an error's chain, each said once, down to the level after
/// which `say` says the causes must not speak.
fn words_of(
    error: &(dyn std::error::Error + 'static),
    say: impl Fn(&(dyn std::error::Error + 'static)) -> (String, bool),
) -> String {
    let mut text: Option<String> = None;
    for level in chain(error) {
        let (said, causes_speak) = say(level);
        match &mut text {
            None => text = Some(said),
            Some(text) if !text.contains(&said) => {
                text.push_str(": ");
                text.push_str(&said);
            }
            Some(_) => {}
        }
        if !causes_speak {
            break;
        }
    }
    text.unwrap_or_default()
}

/// What the executor decided for a call, before it is reported.
#[derive(Debug)]
pub(crate) enum Handled {
    /// The tool (or a fixer, or a fallback) produced output.
    Ok(ToolOutput),
    /// The model is shown this error.
    Error(SurfacedError),
    /// The run ends. Boxed: the rare path should not grow every call's future.
    Stop(Box<(TerminationReason, Failure)>),
    /// The per-run breaker of `tool` tripped while this call was being handled.
    Tripped { tool: String, failures: u32 },
    /// The call stopped before running its tool because the run is halting (a durable run
    /// could not save its progress): "operation cancelled".
    Cancelled,
    /// The call waits for a person's answer.
    Waiting(Box<PendingApproval>),
}

impl Handled {
    pub(crate) fn stop(reason: TerminationReason, failure: Failure) -> Handled {
        Handled::Stop(Box::new((reason, failure)))
    }

    /// The error result the model sees: `tool`, `kind`, a sanitized and bounded message.
    pub(crate) fn escalate(
        ctx: &RunContext,
        tool: &str,
        kind: ErrorKind,
        reason: &str,
        severity: Severity,
    ) -> Handled {
        let surfaced = SurfacedError::bounded(tool, kind, reason, ctx.limits().max_message_chars)
            .with_severity(severity);
        ctx.events().emit(Event::Escalated {
            tool: tool.to_owned(),
            reason: surfaced.message.clone(),
            severity,
        });
        Handled::Error(surfaced)
    }

    /// The failure shown to the model, with the suggestion that fits it.
    pub(crate) fn escalate_failure(ctx: &RunContext, tool: &str, failure: &Failure) -> Handled {
        let message = failure.shown_message();
        if chain(failure.error.cause()).any(is_for_operators) {
            // What the model is not shown (a rig tool's operator message) is for the logs.
            let detail = scrub(&failure.message(), ctx.limits().max_message_chars);
            tracing::warn!(event = "tool_failed", tool = %tool, %detail, "the model sees the tool's feedback only");
        }
        let handled = Handled::escalate(ctx, tool, failure.class.kind, &message, Severity::High);
        match (handled, failure.suggestion()) {
            (Handled::Error(surfaced), Some(suggestion)) => {
                Handled::Error(surfaced.with_suggestion(suggestion))
            }
            (handled, _) => handled,
        }
    }

    /// The ladder ran out without a terminal rung: auth, an open circuit and retryable kinds
    /// end the run; everything else is shown to the model.
    pub(crate) fn default_fate(ctx: &RunContext, tool: &str, failure: Failure) -> Handled {
        let kind = failure.class.kind;
        let circuit_open = failure
            .error
            .cause()
            .downcast_ref::<super::CircuitOpen>()
            .is_some();
        if circuit_open {
            return Handled::stop(TerminationReason::CircuitOpen, failure);
        }
        if kind == ErrorKind::Auth {
            return Handled::stop(TerminationReason::Auth, failure);
        }
        // A server that said "do not retry" answered for good: the model may try something else.
        if kind.is_retryable() && failure.class.should_retry != Some(false) {
            let attempts = failure.attempts;
            return Handled::stop(TerminationReason::RetriesExhausted { attempts }, failure);
        }
        Handled::escalate_failure(ctx, tool, &failure)
    }

    /// Reports the decision (events) and turns it into the call's outcome.
    pub(crate) fn into_outcome(self, ctx: &RunContext, call: &ToolCall) -> CallOutcome {
        match self {
            Handled::Ok(output) => CallOutcome::Result(ToolResult::ok(call, output)),
            Handled::Error(surfaced) => {
                ctx.events().emit(Event::ToolFailed {
                    tool: surfaced.tool.clone(),
                    kind: surfaced.kind,
                    message: surfaced.message.clone(),
                });
                CallOutcome::Result(ToolResult::error(call, surfaced.to_content()))
            }
            Handled::Stop(stop) => {
                let (reason, failure) = *stop;
                let tool = failure
                    .blamed
                    .clone()
                    .unwrap_or_else(|| call.name.to_string());
                let kind = failure.class.kind;
                ctx.events().emit(Event::ToolFailed {
                    tool: tool.clone(),
                    kind,
                    message: scrub(&failure.message(), ctx.limits().max_message_chars),
                });
                ctx.events().emit(Event::Terminated {
                    tool: tool.clone(),
                    kind,
                });
                let terminated = Terminated::new(tool, kind, reason, Some(failure.error));
                CallOutcome::Stop(Box::new(terminated))
            }
            Handled::Tripped { tool, failures } => tripped(tool, ErrorKind::Unknown, failures),
            Handled::Cancelled => CallOutcome::cancelled(call),
            Handled::Waiting(pending) => {
                let reason = TerminationReason::WaitingForPerson(pending);
                let waiting =
                    Terminated::new(call.name.to_string(), ErrorKind::Unknown, reason, None);
                CallOutcome::Stop(Box::new(waiting))
            }
        }
    }
}

/// The stop of a run whose per-run breaker tripped for `tool` after `failures` failures, the
/// last of kind `kind`.
pub(crate) fn tripped(tool: String, kind: ErrorKind, failures: u32) -> CallOutcome {
    let reason = TerminationReason::BreakerTripped { failures };
    CallOutcome::Stop(Box::new(Terminated::new(tool, kind, reason, None)))
}

/// What the model is shown when the per-run breaker took `tool` off the table after `failures`
/// failures: the failure, and why the tool is gone.
pub(crate) fn removed(surfaced: SurfacedError, tool: &str, failures: u32) -> SurfacedError {
    let suggestion = format!(
        "`{tool}` failed {failures} times in a row, so it has been removed from your tools for the \
         rest of this run. Do not call it again: go on with the other tools, or answer with what \
         you have."
    );
    surfaced.with_suggestion(suggestion)
}
