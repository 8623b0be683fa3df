//! How a call ends: the failure being handled ([`words`]), what the ladder decided
//! ([`Handled`]), and the one [`CallOutcome`] the caller gets, a result for the model or a stop
//! of the run ([`stop`]).

mod stop;
mod words;

pub use stop::{Terminated, TerminationReason};
pub(crate) use words::Failure;

use super::context::RunContext;
use crate::approval::PendingApproval;
use crate::chat::{ToolCall, ToolResult};
use crate::classify::{ErrorKind, chain, is_for_operators};
use crate::error::Severity;
use crate::events::Event;
use crate::observe::{CallEnd, ToolCallEnd};
use crate::sanitize::{SurfacedError, scrub};
use crate::tool::ToolOutput;

/// What a tool call's result is when the run was cancelled before it could finish.
pub(crate) const CANCELLED: &str = "operation cancelled";

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
        let suggestion = failure
            .suggestion()
            .map(str::to_owned)
            .or_else(|| circuit_suggestion(ctx, failure));
        match (handled, suggestion) {
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

/// What the model is told when a call was refused by its open circuit: why, and when to try
/// again.
fn circuit_suggestion(ctx: &RunContext, failure: &Failure) -> Option<String> {
    let open = failure.error.cause().downcast_ref::<super::CircuitOpen>()?;
    let when = ctx
        .hooks()
        .service_breaker()
        .and_then(|breaker| breaker.probe_in(&open.tool))
        .map(|wait| format!("in about {} s", wait.as_secs().max(1)))
        .unwrap_or_else(|| "later".to_owned());
    Some(format!(
        "The service behind `{}` has been failing, so its calls are paused and this one was not \
         made. Call it again {when}; meanwhile use other tools or answer with what you have.",
        open.tool
    ))
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
