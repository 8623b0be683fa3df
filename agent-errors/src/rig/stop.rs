//! Why this library ended a run of rig's own loop, typed: [`RigStop`]. rig's own error carries
//! the reason in words only (`PromptError` with a string); the guard keeps the reason as a value
//! a service matches on, maps to an HTTP status, or reads a waiting call's question from.

use std::fmt;

use crate::agent::RunError;
use crate::approval::PendingApproval;
use crate::classify::ErrorKind;
use crate::executor::{Terminated, TerminationReason};
use crate::usage::UsageLimitExceeded;

/// Why a guard ended a run of rig's own loop, as [`RigGuard::stopped`](super::RigGuard::stopped)
/// and [`GuardedTool::stopped`](super::GuardedTool::stopped) keep it: the value behind the
/// words of rig's error. [`into_run_error`](Self::into_run_error) makes it the [`RunError`] our
/// loop would have ended with, so one `match` (or
/// [`RunError::http_status`](crate::RunError::http_status)) serves both loops.
///
/// # Examples
///
/// A call that needs a manager's approval ends rig's run, and the question is there to show:
///
/// ```
/// use std::sync::Arc;
/// use agent_errors::{Registry, RunContext, RunError, ToolDef};
/// use agent_errors::rig::{RigGuard, RigStop};
/// use agent_errors::testing::echo_tool;
/// use rig_core::test_utils::{MockCompletionModel, MockTurn};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let refund = echo_tool("refund").requires_approval(true);
/// let guard = RigGuard::new(Arc::new(Registry::builder().tool(refund).build()?), Arc::new(RunContext::new()));
/// let model = MockCompletionModel::from_turns([
///     MockTurn::tool_call("call-1", "refund", serde_json::json!({"text": "order 7"})),
///     MockTurn::text("never asked"),
/// ]);
/// let agent = guard.agent(model).default_max_turns(3).build();
/// assert!(agent.prompt("refund order 7").await.is_err());
/// let stop: RigStop = guard.stopped().expect("the guard ended the run");
/// let said = match &stop {
///     RigStop::Tool { tool, .. } if stop.pending_approval().is_some() => {
///         format!("`{tool}` waits for a manager")
///     }
///     RigStop::Tool { tool, kind, .. } => format!("`{tool}` failed ({kind})"),
///     RigStop::UsageLimit(exceeded) => format!("capped on {}", exceeded.limit),
///     RigStop::NoTimer => "misconfigured runtime".to_owned(),
///     _ => "stopped".to_owned(),
/// };
/// assert_eq!(said, "`refund` waits for a manager");
/// assert_eq!(stop.pending_approval().map(|p| p.tool.as_str()), Some("refund"));
/// assert!(matches!(stop.into_run_error(), RunError::WaitingForPerson { .. }));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum RigStop {
    /// A guarded call ended the run: an `auth` failure, retries used up, a tripped breaker, a
    /// `throw`, too many permission denials, or a call waiting for a person (its question in
    /// [`TerminationReason::WaitingForPerson`]).
    Tool {
        /// The tool.
        tool: String,
        /// The kind of the failure (for a call waiting for a person, the kind it waits on).
        kind: ErrorKind,
        /// Why the run ended.
        reason: TerminationReason,
    },
    /// The run went past one of the guard's usage limits
    /// ([`RigGuard::with_usage_limits`](super::RigGuard::with_usage_limits)).
    UsageLimit(Box<UsageLimitExceeded>),
    /// The run was on a Tokio runtime built without its timer, which every backoff and timeout
    /// sleeps on: it did not start (or the guarded call did not run).
    NoTimer,
}

impl RigStop {
    pub(super) fn of(terminated: &Terminated) -> RigStop {
        RigStop::Tool {
            tool: terminated.tool.clone(),
            kind: terminated.kind,
            reason: terminated.reason.clone(),
        }
    }

    /// The question of a call that waits for a person, when that ended the run: what an
    /// approval screen shows.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::rig::RigStop;
    ///
    /// assert!(RigStop::NoTimer.pending_approval().is_none());
    /// ```
    pub fn pending_approval(&self) -> Option<&PendingApproval> {
        match self {
            RigStop::Tool {
                reason: TerminationReason::WaitingForPerson(pending),
                ..
            } => Some(pending),
            _ => None,
        }
    }

    /// The [`RunError`] our loop ends with for the same stop: `WaitingForPerson` with the
    /// question, `BreakerTripped`, `UsageLimit`, `NoTimer`, or `Terminated` (whose original
    /// tool error stays with rig's run: [`Terminated::unredacted_error`] is `None`).
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::RunError;
    /// use agent_errors::rig::RigStop;
    ///
    /// assert!(matches!(RigStop::NoTimer.into_run_error(), RunError::NoTimer));
    /// ```
    pub fn into_run_error(self) -> RunError {
        match self {
            RigStop::Tool {
                reason: TerminationReason::WaitingForPerson(pending),
                ..
            } => RunError::WaitingForPerson {
                pending: vec![*pending],
            },
            RigStop::Tool {
                tool,
                reason: TerminationReason::BreakerTripped { failures },
                ..
            } => RunError::BreakerTripped { tool, failures },
            RigStop::Tool { tool, kind, reason } => {
                RunError::Terminated(Box::new(Terminated::new(tool, kind, reason, None)))
            }
            RigStop::UsageLimit(exceeded) => RunError::UsageLimit(exceeded),
            RigStop::NoTimer => RunError::NoTimer,
        }
    }
}

/// The words of rig's error for the stop: the tool, the reason by name, and the failure's kind
/// when there was a failure.
impl fmt::Display for RigStop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RigStop::Tool {
                tool,
                reason: reason @ TerminationReason::WaitingForPerson(_),
                ..
            } => write!(
                f,
                "`{tool}` ended the run: {}: the call needs a person's answer",
                reason_name(reason)
            ),
            RigStop::Tool { tool, kind, reason } => write!(
                f,
                "`{tool}` ended the run: {}, a failure of kind {kind}",
                reason_name(reason)
            ),
            RigStop::UsageLimit(exceeded) => write!(f, "{exceeded}"),
            RigStop::NoTimer => f.write_str(NO_TIMER),
        }
    }
}

/// Why a run on a runtime without its timer did not start, with the fix.
const NO_TIMER: &str = "the run needs a Tokio runtime with its timer enabled, for its retries' \
     backoff and its timeouts: call `enable_time()` (or `enable_all()`) on the runtime builder, \
     or turn on tokio's `time` feature for `#[tokio::main]`";

/// The name of a termination reason's variant, as the docs name it.
fn reason_name(reason: &TerminationReason) -> &'static str {
    match reason {
        TerminationReason::Auth => "Auth",
        TerminationReason::RetriesExhausted { .. } => "RetriesExhausted",
        TerminationReason::CircuitOpen => "CircuitOpen",
        TerminationReason::BreakerTripped { .. } => "BreakerTripped",
        TerminationReason::Thrown(_) => "Thrown",
        TerminationReason::PermissionDenials { .. } => "PermissionDenials",
        TerminationReason::WaitingForPerson(_) => "WaitingForPerson",
    }
}
