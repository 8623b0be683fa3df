//! A person in the loop: calls that wait for a person's answer before their tool runs, and the
//! [`Approver`] a run asks for that answer.
//!
//! A call needs a person when its tool requires approval
//! ([`ToolDef::requires_approval`](crate::ToolDef::requires_approval), `#[tool(approval =
//! required)]`), when the agent's rule says so
//! ([`AgentBuilder::require_approval`](crate::AgentBuilder::require_approval)), or when its
//! policy hands a failure to a person (the `ask_person` action). The run asks its approver,
//! which answers now ([`Decision::Approve`], [`Decision::ApproveWith`] edited arguments,
//! [`Decision::Deny`]) or later ([`Decision::Later`]).
//!
//! An approved argument set passes the same checks as any other before the tool body gets it
//! (the tool is available, no key is given twice, the permission hook allows it). A denial is
//! counted like a permission denial and the model is told; the tool never runs.
//!
//! "Later" holds no process: a checkpointed run ends with
//! [`RunError::WaitingForPerson`](crate::RunError::WaitingForPerson), naming the calls that wait,
//! and [`Agent::resume`](crate::Agent::resume) with the answers
//! ([`RunOptions::answer`](crate::RunOptions::answer)) goes on with it, in this process or
//! another. Nothing is spent while it waits: the retries the run had spent stay spent, and no
//! more are drawn.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::chat::ToolCall;
use crate::classify::ErrorKind;
use crate::error::BoxFuture;
use crate::extensions::Extensions;

/// A person's answer to a call that waits for one.
///
/// # Examples
///
/// ```
/// use agent_errors::approval::Decision;
///
/// fn describe(decision: &Decision) -> String {
///     match decision {
///         Decision::Approve => "run it as the model wrote it".into(),
///         Decision::ApproveWith(arguments) => format!("run it with {arguments}"),
///         Decision::Deny(reason) => format!("do not run it: {reason}"),
///         Decision::Later => "nobody has answered yet".into(),
///         _ => "something newer".into(),
///     }
/// }
///
/// assert_eq!(describe(&Decision::Deny("too much".into())), "do not run it: too much");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Decision {
    /// Run the call with its arguments as they are.
    Approve,
    /// Run the call with these arguments (JSON text) instead: a person edited them. They pass
    /// the same checks as the model's would, the permission hook included.
    ApproveWith(String),
    /// Do not run the call; the reason goes to the model, and the denial is counted like a
    /// permission denial.
    Deny(String),
    /// Nobody has answered yet: the run waits without holding a process (a checkpointed run
    /// ends with [`RunError::WaitingForPerson`](crate::RunError::WaitingForPerson)).
    Later,
}

/// Why a call waits for a person.
///
/// # Examples
///
/// ```
/// use agent_errors::approval::WaitReason;
///
/// fn headline(reason: &WaitReason) -> String {
///     match reason {
///         WaitReason::ApprovalRequired => "needs your approval".into(),
///         WaitReason::Failure { kind, message } => format!("failed ({kind}): {message}"),
///         _ => "needs you".into(),
///     }
/// }
///
/// assert_eq!(headline(&WaitReason::ApprovalRequired), "needs your approval");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum WaitReason {
    /// The tool (or the agent's rule) requires a person's approval before it runs.
    ApprovalRequired,
    /// The call failed and its policy handed the failure to a person (`ask_person`): approving
    /// calls the tool again (with edited arguments, if given), denying tells the model.
    Failure {
        /// The failure's kind.
        kind: ErrorKind,
        /// Its message, redacted and bounded.
        message: String,
    },
}

/// A call waiting for a person: what an [`Approver`] is asked about, and what
/// [`RunError::WaitingForPerson`](crate::RunError::WaitingForPerson) names.
///
/// # Examples
///
/// ```
/// use agent_errors::approval::{PendingApproval, WaitReason};
///
/// let pending = PendingApproval::new("call-1", "transfer", r#"{"amount": 900}"#, WaitReason::ApprovalRequired);
/// assert_eq!(pending.tool, "transfer");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PendingApproval {
    /// The call's id: what [`RunOptions::answer`](crate::RunOptions::answer) names.
    pub call_id: String,
    /// The tool it calls.
    pub tool: String,
    /// Its arguments as shown to a person: redacted and bounded, so not always the arguments
    /// the tool would receive. Approving runs the call with its own arguments; to change them,
    /// answer [`Decision::ApproveWith`]. Arguments too long to show whole (cut, ending in the
    /// truncation marker) do not run on a plain [`Decision::Approve`] of the part shown: the
    /// call is denied, and runs only approved with its whole arguments as an edit.
    pub arguments: String,
    /// Why it waits.
    pub reason: WaitReason,
}

impl PendingApproval {
    /// A pending call: for an [`Approver`] of your own to be tested with.
    pub fn new(
        call_id: impl Into<String>,
        tool: impl Into<String>,
        arguments: impl Into<String>,
        reason: WaitReason,
    ) -> Self {
        PendingApproval {
            call_id: call_id.into(),
            tool: tool.into(),
            arguments: arguments.into(),
            reason,
        }
    }
}

impl fmt::Display for PendingApproval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}` (call {})", self.tool, self.call_id)
    }
}

/// What an [`Approver`] knows about the run asking.
///
/// # Examples
///
/// ```
/// use agent_errors::approval::{ApprovalContext, Approver, Decision, PendingApproval};
/// use agent_errors::call::BoxFuture;
///
/// /// Who is asking, as the run was given it with `RunOptions::context`.
/// struct Role(&'static str);
///
/// /// Managers approve their own calls; everyone else's wait for one.
/// struct Managers;
///
/// impl Approver for Managers {
///     fn decide<'a>(
///         &'a self,
///         _pending: &'a PendingApproval,
///         run: ApprovalContext<'a>,
///     ) -> BoxFuture<'a, Decision> {
///         let decision = match run.extensions().get::<Role>() {
///             Some(Role("manager")) => Decision::Approve,
///             _ => Decision::Later,
///         };
///         Box::pin(async move { decision })
///     }
/// }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ApprovalContext<'a> {
    pub(crate) run_id: Option<&'a str>,
    pub(crate) extensions: &'a Extensions,
}

impl ApprovalContext<'_> {
    /// The run's id, when it has one (every agent run does): with the call's id, a key that
    /// names this question across processes and restarts.
    pub fn run_id(&self) -> Option<&str> {
        self.run_id
    }

    /// The values the run was given ([`RunOptions::context`](crate::RunOptions::context)).
    pub fn extensions(&self) -> &Extensions {
        self.extensions
    }
}

/// Asked when a call needs a person: answers now, or [`Decision::Later`].
///
/// Any `Fn(&PendingApproval) -> Decision` is one (a policy written in code, a test). An approver
/// that waits for a person inside the run (a chat message, a durable engine's promise) returns
/// a future that completes with the answer; one that cannot wait answers
/// [`Decision::Later`], and a checkpointed run then ends until it is resumed with the answer.
/// A run with no approver answers every such call `Later`. An approver that panics has denied
/// the call.
///
/// # Examples
///
/// ```
/// use agent_errors::approval::{ApprovalContext, Approver, Decision, PendingApproval};
/// use agent_errors::call::BoxFuture;
///
/// /// Small transfers go through; the rest wait for a person.
/// struct SmallOnly;
///
/// impl Approver for SmallOnly {
///     fn decide<'a>(
///         &'a self,
///         pending: &'a PendingApproval,
///         _run: ApprovalContext<'a>,
///     ) -> BoxFuture<'a, Decision> {
///         Box::pin(async move {
///             let args: serde_json::Value =
///                 serde_json::from_str(&pending.arguments).unwrap_or_default();
///             match args["amount"].as_u64() {
///                 Some(amount) if amount <= 100 => Decision::Approve,
///                 _ => Decision::Later,
///             }
///         })
///     }
/// }
/// ```
pub trait Approver: Send + Sync + 'static {
    /// The answer for `pending`, a call of the run `run` describes.
    fn decide<'a>(
        &'a self,
        pending: &'a PendingApproval,
        run: ApprovalContext<'a>,
    ) -> BoxFuture<'a, Decision>;
}

impl<F> Approver for F
where
    F: Fn(&PendingApproval) -> Decision + Send + Sync + 'static,
{
    fn decide<'a>(
        &'a self,
        pending: &'a PendingApproval,
        _: ApprovalContext<'a>,
    ) -> BoxFuture<'a, Decision> {
        // Answered inside the future, so a closure that panics is caught with the future.
        Box::pin(async move { self(pending) })
    }
}

/// Which calls need a person before their tool runs, beyond the tools that require it: the
/// agent's rule ([`AgentBuilder::require_approval`](crate::AgentBuilder::require_approval)).
pub(crate) type ApprovalRule = dyn Fn(&ToolCall) -> bool + Send + Sync + 'static;
