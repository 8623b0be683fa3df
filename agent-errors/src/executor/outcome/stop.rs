//! A stop of the run: why a tool failure ended it ([`TerminationReason`]) and what the caller
//! is handed ([`Terminated`]), shown and logged without the failure's secrets.

use std::fmt;

use super::words::chain_text;
use crate::approval::PendingApproval;
use crate::classify::{ErrorKind, RedactedError};
use crate::error::{BoxError, ToolError};

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
