//! The gate: what every argument set passes before a tool body may receive it.
//!
//! Whatever wrote the arguments (the model, a fixer's repair, the ladder handing them to a
//! fallback tool, a resumed run going on with what a fixer wrote before the process stopped),
//! they pass [`pass`] for the tool about to receive them, in this order: the tool was not
//! dropped by `degrade`, its per-run breaker has not tripped, no object in them gives a key
//! twice, and the permission hook allows them. Safety then holds by construction: no path to a
//! tool body goes around this function.
//!
//! A plain retry sends the same arguments to the same tool again: it is not asked about again
//! (the hook already allowed exactly these), though the attempt still checks the breaker.

use std::sync::Arc;

use super::attempt::ToolPanic;
use super::context::RunContext;
use super::outcome::{Failure, Handled, TerminationReason};
use super::permission::{Permission, PermissionDenied};
use crate::chat::ToolCall;
use crate::classify::ErrorKind;
use crate::error::ToolError;
use crate::registry::Registry;
use crate::sanitize::{MAX_TOOL_NAME_CHARS, SurfacedError, sanitize};
use crate::tool::ToolDef;

/// Why an argument set did not pass the gate.
#[derive(Debug)]
pub(crate) enum Refused {
    /// The tool is not available in this run (dropped by `degrade`, or its per-run breaker
    /// tripped): the answer, for a call of it. A fallback rung skips such a tool instead.
    Unavailable(Handled),
    /// The permission hook denied these arguments (or could not answer): the answer, a denial
    /// counted against the run's budget, or the stop of the run when that budget is spent.
    Denied(Handled),
    /// The arguments give a key twice: a failure of the arguments, for the ladder (a fixer may
    /// repair it).
    Invalid(ToolError),
}

/// Lets `arguments` through to `tool`, or says why not.
///
/// `call` is the call being answered; `tool` is the tool about to run (a fallback's, not the
/// called one's, when the ladder falls back) and `arguments` what it would receive (a fixer's
/// rewrite, or the call's own). The permission hook is asked about exactly that: a call
/// carrying the call's id, `tool`'s name and `arguments`.
#[inline]
pub(crate) fn pass(
    ctx: &RunContext,
    tool: &ToolDef,
    call: &ToolCall,
    arguments: &str,
) -> Result<(), Refused> {
    // The usual call: nothing has gone wrong in the run yet (no tool dropped, no breaker
    // tripped), no hook to ask, and a tool that refuses a repeated key itself. Every check
    // below would pass; this says so without calling them.
    if !ctx.learnt().troubled()
        && ctx.hooks().permission().is_none()
        && tool.refuses_duplicate_keys()
    {
        return Ok(());
    }
    check(ctx, tool, call, arguments)
}

/// [`pass`]'s checks, in their order.
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
    // (whose parser is unknown) and the tool must read one thing. A tool whose argument type
    // refuses a repeated key at every depth reports it itself when it parses, so without a hook
    // its arguments skip this second reading.
    if hook.is_some() || !tool.refuses_duplicate_keys() {
        crate::arguments::reject_duplicate_keys(arguments).map_err(Refused::Invalid)?;
    }
    let Some(hook) = hook else {
        return Ok(());
    };
    let asked = if tool.name() == &*call.name && arguments == call.arguments {
        ask(ctx, hook, tool, call)
    } else {
        let rewritten = ToolCall::new(Arc::clone(&call.id), tool.name(), arguments);
        ask(ctx, hook, tool, &rewritten)
    };
    match asked {
        Ok(Permission::Allow) => Ok(()),
        Ok(Permission::Deny(reason)) => {
            let shown = format!("permission denied: {reason}");
            Err(Refused::Denied(denied(
                ctx, tool, arguments, reason, &shown,
            )))
        }
        Err(panic) => {
            let message = format!(
                "the permission hook panicked ({}); the tool did not run",
                panic.message
            );
            Err(Refused::Denied(Handled::Error(
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
pub(super) fn denied(
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
