//! The gate: the one door into a tool body.
//!
//! Whatever wrote the arguments (the model, a fixer's repair, the ladder handing them to a
//! fallback tool, a person's edit, a resumed run going on with what a fixer wrote before the
//! process stopped), they pass the gate for the tool about to receive them, which checks, in
//! this order:
//!
//! 1. the tool was not dropped by `degrade`;
//! 2. its per-run breaker has not tripped;
//! 3. no object in the arguments gives a key twice;
//! 4. the permission hook allows them;
//! 5. a person approved them, when one must: the tool requires approval, the agent's
//!    `require_approval` rule picks the call, or a ladder's `ask_person` rung hands it over.
//!    An approval covers exactly the tool and arguments approved: a fixer's rewrite of approved
//!    arguments, or a fallback to a tool that requires approval, asks again.
//!
//! What the gate lets through is a [`Cleared`]: the tool and the exact arguments it passed,
//! which only this module can make and which [`attempt`](super::attempt::attempt) takes. No
//! path reaches a tool body around the gate, because no other value can start one.
//!
//! A plain retry sends the same cleared arguments to the same tool again: it is not asked about
//! again (the hook and the person already allowed exactly these), though the attempt still
//! checks the breaker.

use std::borrow::Cow;
use std::sync::Arc;

use super::approval;
use super::context::RunContext;
use super::failure::ToolPanic;
use super::outcome::{Failure, Handled, TerminationReason};
use super::permission::{Permission, PermissionDenied};
use super::resume::{Approved, CallProgress, Waiting};
use crate::approval::{Decision, PendingApproval, WaitReason};
use crate::chat::ToolCall;
use crate::classify::ErrorKind;
use crate::error::ToolError;
use crate::policy::PolicyKey;
use crate::registry::Registry;
use crate::sanitize::{MAX_TOOL_NAME_CHARS, SurfacedError, sanitize};
use crate::tool::ToolDef;

/// Arguments the gate let through to one tool: the only value a tool body can be started
/// with. Only the gate makes one (its fields are private and it has no public constructor), so
/// holding one means every check of the gate passed for exactly this tool and these arguments.
///
/// # Examples
///
/// Nothing outside the executor can make one; what it holds can be read:
///
/// ```
/// use agent_errors::call::Cleared;
///
/// fn describe(cleared: &Cleared<'_>) -> String {
///     format!("`{}` may run with {}", cleared.tool().name(), cleared.arguments())
/// }
/// # let _ = describe;
/// ```
#[derive(Debug)]
pub struct Cleared<'a> {
    tool: &'a ToolDef,
    arguments: Cow<'a, str>,
}

impl<'a> Cleared<'a> {
    /// The tool the arguments were cleared for.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::call::Cleared;
    ///
    /// fn tool_name<'a>(cleared: &Cleared<'a>) -> &'a str {
    ///     cleared.tool().name()
    /// }
    /// # let _ = tool_name;
    /// ```
    pub fn tool(&self) -> &'a ToolDef {
        self.tool
    }

    /// The exact arguments the gate let through, as the tool receives them.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::call::Cleared;
    ///
    /// fn arguments<'c>(cleared: &'c Cleared<'_>) -> &'c str {
    ///     cleared.arguments()
    /// }
    /// # let _ = arguments;
    /// ```
    pub fn arguments(&self) -> &str {
        &self.arguments
    }

    /// The arguments as the walk holds them: owned when a fixer or a person wrote them.
    pub(super) fn sent(&self) -> &Cow<'a, str> {
        &self.arguments
    }

    /// The arguments, given back for a walk that goes on without them cleared.
    pub(super) fn into_sent(self) -> Cow<'a, str> {
        self.arguments
    }
}

/// Why an argument set did not pass the gate.
#[derive(Debug)]
pub(crate) enum Refused {
    /// The tool is not available in this run (dropped by `degrade`, or its per-run breaker
    /// tripped): the answer, for a call of it. A fallback rung skips such a tool instead.
    Unavailable(Handled),
    /// The call is answered here: the permission hook or a person denied these arguments (a
    /// denial counted against the run's budget, or the stop of the run when that budget is
    /// spent), the hook could not answer, or the call waits for a person.
    Answered(Handled),
    /// The arguments give a key twice: a failure of the arguments, for the ladder (a fixer may
    /// repair it).
    Invalid(ToolError),
}

/// Why [`pass`] did not clear an argument set: refused, or a person must be asked first.
#[derive(Debug)]
pub(crate) enum Blocked {
    Refused(Refused),
    /// Everything else passed, and a person must approve these arguments: [`through`] asks.
    Ask,
}

impl From<Refused> for Blocked {
    fn from(refused: Refused) -> Self {
        Blocked::Refused(refused)
    }
}

/// Lets `arguments` through to `tool`, or says why not, without waiting: a call that needs a
/// person's approval not yet given is [`Blocked::Ask`], for [`through`] to ask.
///
/// `call` is the call being answered; `tool` is the tool about to run (a fallback's, not the
/// called one's, when the ladder falls back) and `arguments` what it would receive (a fixer's
/// rewrite, a person's edit, or the call's own). The permission hook and the agent's approval
/// rule are asked about exactly that: a call carrying the call's id, `tool`'s name and
/// `arguments`.
#[inline]
pub(crate) fn pass<'a>(
    ctx: &RunContext,
    tool: &'a ToolDef,
    call: &ToolCall,
    arguments: &Cow<'a, str>,
    approved: &Approved,
) -> Result<Cleared<'a>, Blocked> {
    // The usual call: nothing has gone wrong in the run yet (no tool dropped, no breaker
    // tripped), no hook to ask, a tool that refuses a repeated key itself, and nobody to ask.
    // Every check below would pass; this says so without calling them.
    if !ctx.learnt().troubled()
        && ctx.hooks().permission().is_none()
        && tool.refuses_duplicate_keys()
        && !approval::may_be_required(ctx, tool)
    {
        return Ok(cleared(tool, arguments.clone()));
    }
    check(ctx, tool, call, arguments)?;
    if approval::may_be_required(ctx, tool) && !approved.covers(tool.name(), arguments) {
        let sent = as_sent(call, tool, arguments);
        if approval::required(ctx, tool, &sent) {
            return Err(Blocked::Ask);
        }
    }
    Ok(cleared(tool, arguments.clone()))
}

/// The gate's one way to make a [`Cleared`].
fn cleared<'a>(tool: &'a ToolDef, arguments: Cow<'a, str>) -> Cleared<'a> {
    Cleared { tool, arguments }
}

/// `call` as it would be sent: to `tool`, with `arguments`.
fn as_sent<'c>(call: &'c ToolCall, tool: &ToolDef, arguments: &str) -> Cow<'c, ToolCall> {
    if tool.name() == &*call.name && arguments == call.arguments {
        Cow::Borrowed(call)
    } else {
        Cow::Owned(ToolCall::new(Arc::clone(&call.id), tool.name(), arguments))
    }
}

/// Who asks a person, and where a call that must wait for the answer saves its place.
pub(crate) struct Asking {
    /// The question a ladder's `ask_person` rung (or a resumed wait) asks whatever the
    /// approval rules say; `None` asks only when a person must approve.
    pub(crate) forced: Option<WaitReason>,
    /// The policy key whose ladder handed the call over, when one did: saved with a wait, so a
    /// resumed walk does not walk it again.
    pub(crate) key: Option<PolicyKey>,
    /// How far the call got: saved with a wait.
    pub(crate) progress: CallProgress,
    /// The question the run saved when it stopped to wait for this call: only an answer to
    /// exactly that question, given to the run, is taken for the first question asked.
    pub(crate) awaited: Option<PendingApproval>,
}

/// The rest of the door, for arguments [`pass`] answered [`Blocked::Ask`] about (or a question
/// `asking` forces, before any check): asks a person, and clears what they approved. An edit
/// by a person goes through every check again, the approval step included when the edit
/// answered a failure handed to a person rather than an approval; an approval is recorded in
/// `approved` for exactly the tool and arguments approved.
pub(crate) async fn through<'a>(
    ctx: &RunContext,
    tool: &'a ToolDef,
    call: &ToolCall,
    mut arguments: Cow<'a, str>,
    approved: &mut Approved,
    asking: Asking,
) -> Result<Cleared<'a>, Refused> {
    let Asking {
        forced,
        key,
        progress,
        mut awaited,
    } = asking;
    // Whether checks 1-4 passed for `arguments`: they did when `pass` asked for a person.
    let mut checked = forced.is_none();
    let mut question = Some(forced.unwrap_or(WaitReason::ApprovalRequired));
    loop {
        if let Some(reason) = question.take() {
            let pending = approval::question(tool, call, &arguments, reason, ctx.run_id());
            let awaited = awaited.take();
            match approval::decision(ctx, &pending, awaited.as_ref()).await {
                Decision::Approve | Decision::ApproveUnseen => {
                    approved.add(tool.name(), &arguments)
                }
                Decision::ApproveWith(edited) => {
                    // An edit answers the question it was asked for. Asked for an approval, the
                    // person approved what they wrote; asked about a failure (`ask_person`),
                    // they wrote new arguments, which the tool's own approval step, if it has
                    // one, asks about as it would about any other.
                    if pending.reason == WaitReason::ApprovalRequired {
                        approved.add(tool.name(), &edited);
                    }
                    arguments = Cow::Owned(edited);
                    checked = false;
                }
                Decision::Deny(reason) => {
                    let shown = format!("a person denied this call: {reason}");
                    let denial = denied(ctx, tool, &arguments, reason, &shown);
                    return Err(Refused::Answered(denial));
                }
                Decision::Expired => return Err(Refused::Answered(expired(ctx, tool))),
                Decision::Later => {
                    let mut progress = progress;
                    progress.approved = approved.clone();
                    let waited = wait_later(ctx, call, pending, key, progress).await;
                    return Err(Refused::Answered(waited));
                }
            }
        }
        if checked {
            return Ok(cleared(tool, arguments));
        }
        match pass(ctx, tool, call, &arguments, approved) {
            Ok(cleared) => return Ok(cleared),
            Err(Blocked::Refused(refused)) => return Err(refused),
            Err(Blocked::Ask) => {
                checked = true;
                question = Some(WaitReason::ApprovalRequired);
            }
        }
    }
}

/// Records that the call waits for a person and ends it so; a wait that could not be saved
/// halts the run like any unsaved progress.
async fn wait_later(
    ctx: &RunContext,
    call: &ToolCall,
    pending: PendingApproval,
    key: Option<PolicyKey>,
    progress: CallProgress,
) -> Handled {
    let waiting = || CallProgress {
        waiting: Some(Waiting {
            pending: pending.clone(),
            key: key.map(|k| k.as_str().to_owned()),
        }),
        backoff_ms: None,
        ..progress
    };
    let saved = ctx
        .journal()
        .save_progress(&call.id, waiting, || ctx.recovery());
    if !saved.await {
        return Handled::Cancelled;
    }
    Handled::Waiting(Box::new(pending))
}

/// Checks 1 to 4, in their order.
fn check(
    ctx: &RunContext,
    tool: &ToolDef,
    call: &ToolCall,
    arguments: &str,
) -> Result<(), Refused> {
    let limit = ctx.limits().max_message_chars;
    if ctx.is_degraded(tool.name()) {
        let message = "this tool was dropped for the rest of the run after it failed";
        return Err(Refused::Unavailable(Handled::Error(
            SurfacedError::bounded(tool.name(), ErrorKind::Unknown, message, limit)
                .with_suggestion("Do not call it again; continue without it."),
        )));
    }
    if let Some(failures) = ctx.learnt().breaker_tripped(tool.name()) {
        let tool = tool.name().to_owned();
        return Err(Refused::Unavailable(Handled::Tripped { tool, failures }));
    }
    let hook = ctx.hooks().permission();
    // `{"amount": 1, "amount": 1000}` reads as 1000 to one parser and 1 to another: the hook
    // and the approval rule (whose parsers are unknown), a person and the tool must read one
    // thing. A tool whose argument type refuses a repeated key at every depth reports it itself
    // when it parses, so with nobody else to read them its arguments skip this second reading.
    if hook.is_some() || approval::may_be_required(ctx, tool) || !tool.refuses_duplicate_keys() {
        crate::arguments::reject_duplicate_keys(arguments).map_err(Refused::Invalid)?;
    }
    let Some(hook) = hook else {
        return Ok(());
    };
    match ask(ctx, hook, tool, &as_sent(call, tool, arguments)) {
        Ok(Permission::Allow) => Ok(()),
        Ok(Permission::Deny(reason)) => {
            let shown = format!("permission denied: {reason}");
            Err(Refused::Answered(denied(
                ctx, tool, arguments, reason, &shown,
            )))
        }
        Err(panic) => {
            let message = format!(
                "the permission hook panicked ({}); the tool did not run",
                panic.message
            );
            Err(Refused::Answered(Handled::Error(
                SurfacedError::bounded(tool.name(), ErrorKind::Bug, &message, limit)
                    .with_suggestion(
                        "The permission check crashed, so the tool did not run. Do not call it \
                         again the same way; tell the user.",
                    ),
            )))
        }
    }
}

/// The hook's verdict on `call` for `tool`; a hook that panics has allowed nothing.
fn ask(
    ctx: &RunContext,
    hook: &dyn super::PermissionHook,
    tool: &ToolDef,
    call: &ToolCall,
) -> Result<Permission, ToolPanic> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        hook.check_in(call, &ctx.permission_context(tool.name()))
    }))
    .map_err(ToolPanic::from_payload)
}

/// A denial (the hook's, or a person's): counted, shown to the model as `shown`, or the end of
/// the run once the run's budget of denials is spent.
fn denied(
    ctx: &RunContext,
    tool: &ToolDef,
    arguments: &str,
    reason: String,
    shown: &str,
) -> Handled {
    let denials = ctx.learnt().record_denial(tool.name());
    let budget = ctx.limits().max_permission_denials;
    if budget != 0 && denials >= budget {
        let error = ToolError::execution(arguments, PermissionDenied { denials, reason });
        let mut failure = Failure::new(error, 0, ctx.hooks().classifier());
        failure.blamed = Some(tool.name().to_owned());
        let reason = TerminationReason::PermissionDenials { denials };
        return Handled::stop(reason, failure);
    }
    let limit = ctx.limits().max_message_chars;
    Handled::Error(
        SurfacedError::bounded(tool.name(), ErrorKind::Auth, shown, limit).with_suggestion(
            "The tool did not run. Reframe the request or ask the user for permission.",
        ),
    )
}

/// A call whose person's answer expired before the run reached it: not run, not counted as a
/// denial, and told to the model in words of its own so it asks again or tells the user.
fn expired(ctx: &RunContext, tool: &ToolDef) -> Handled {
    let limit = ctx.limits().max_message_chars;
    let message = "the person's approval of this call expired before it ran, so it did not run";
    Handled::Error(
        SurfacedError::bounded(tool.name(), ErrorKind::Timeout, message, limit).with_suggestion(
            "Call the tool again to ask the person again, or tell the user their approval \
             expired.",
        ),
    )
}

/// The model asked for a tool that does not exist (or no longer does): say which do. Asking
/// again and again trips the per-run breaker like any failing tool.
pub(crate) fn unknown_tool(registry: &Registry, ctx: &RunContext, call: &ToolCall) -> Handled {
    let name = sanitize(&call.name, MAX_TOOL_NAME_CHARS);
    if let Some(failures) = ctx.learnt().breaker_tripped(&name) {
        return Handled::Tripped {
            tool: name,
            failures,
        };
    }
    let available: Vec<&str> = registry
        .tool_names()
        .filter(|n| !ctx.is_degraded(n))
        .collect();
    let message = format!("no tool named `{name}` is available");
    let suggestion = if available.is_empty() {
        "No tools are available: answer without calling one.".to_owned()
    } else {
        format!("Call one of the available tools: {}.", available.join(", "))
    };
    let limit = ctx.limits().max_message_chars;
    Handled::Error(
        SurfacedError::bounded(&name, ErrorKind::NotFound, &message, limit)
            .with_suggestion(suggestion),
    )
}
