//! The executor: one tool call in, exactly one outcome out.
//!
//! The path of one call, in file order:
//!
//! 1. [`context`]: the run the call belongs to (limits, cancellation, breakers, the tools
//!    `degrade` dropped), and [`permission`]: the hook asked before a tool runs.
//! 2. this module's [`execute`]: find the tool, refuse what must not run, make the first
//!    [`attempt`](attempt::attempt), and report the outcome on the per-run breaker.
//! 3. [`attempt`]: refuse arguments that give a key twice, parse them, ask the service
//!    breaker, run the tool under its timeout, catch a panic.
//! 4. [`ladder`]: a failed call walks its policy's rungs (retry, fix, fallback, escalate,
//!    throw, degrade) until it is answered.
//! 5. [`outcome`]: the decision becomes a [`CallOutcome`]: a result for the model, or a stop of
//!    the run.
//!
//! Whatever happens (an unknown tool, a denial, a panic, a cancelled run) the call gets exactly
//! one outcome.

mod attempt;
mod context;
mod entry;
mod ladder;
mod outcome;
mod permission;
mod record;
mod resume;

use std::borrow::Cow;
use std::future::poll_fn;
use std::pin::pin;
use std::task::Poll;

use futures_util::future::join_all;

pub use attempt::{CircuitOpen, ToolPanic};
pub use context::{Cancellation, DEFAULT_MAX_PERMISSION_DENIALS, Limits, RunContext};
pub use outcome::{CallOutcome, Terminated, TerminationReason};
pub use permission::{Permission, PermissionContext, PermissionDenied, PermissionHook};

pub(crate) use context::RecoveryState;
pub(crate) use outcome::CANCELLED;
pub(crate) use record::{CallRecorder, NoRecorder, Recorded};
pub use resume::CallInterrupted;
pub(crate) use resume::{CallProgress, CallStart};

use tokio_util::sync::CancellationToken;

use crate::chat::ToolCall;
use crate::classify::ErrorKind;
use crate::error::ToolError;
use crate::events::Event;
use crate::registry::Registry;
use crate::sanitize::{MAX_TOOL_NAME_CHARS, SurfacedError, sanitize};
use crate::tool::ToolDef;
use attempt::Missed;
use ladder::Walk;
use outcome::{Failure, Handled};

/// Runs one tool call through its resolved policy, inside its span: see [`Registry::execute`].
/// A call of a resumed run starts from how far it got; any other starts fresh.
pub(crate) async fn execute(
    registry: &Registry,
    ctx: &RunContext,
    call: &ToolCall,
    start: CallStart<'_>,
) -> CallOutcome {
    let meters = registry.meters(&call.name);
    let handled = handle(registry, ctx, call, start);
    crate::observe::tool_call(call, meters, execute_call(registry, ctx, call, handled)).await
}

async fn execute_call(
    registry: &Registry,
    ctx: &RunContext,
    call: &ToolCall,
    handled: impl Future<Output = Handled>,
) -> CallOutcome {
    ctx.adopt_classifier(registry.classifier());
    let halt = ctx.halt_token();
    if halt.is_cancelled() {
        return CallOutcome::cancelled(call);
    }
    let Some(handled) = until_halted(halt, handled).await else {
        return CallOutcome::cancelled(call);
    };
    if matches!(handled, Handled::Cancelled) {
        return CallOutcome::cancelled(call);
    }
    let ok = matches!(handled, Handled::Ok(_));
    let kind = match &handled {
        Handled::Error(surfaced) => surfaced.kind,
        Handled::Stop(stop) => stop.1.class.kind,
        Handled::Ok(_) | Handled::Tripped { .. } | Handled::Cancelled => ErrorKind::Unknown,
    };
    let outcome = handled.into_outcome(ctx, call);
    if outcome.stop().is_some() {
        return outcome;
    }
    // An unknown name is the model's text: bound it before it is used as a key.
    let tool = if ok {
        Cow::Borrowed(call.name.as_str())
    } else {
        Cow::Owned(sanitize(&call.name, MAX_TOOL_NAME_CHARS))
    };
    match ctx.record_outcome(&tool, ok) {
        None => outcome,
        Some(failures) => {
            let tool = tool.into_owned();
            ctx.events().emit(Event::BreakerTripped {
                tool: tool.clone(),
                failures,
            });
            outcome::tripped(tool, kind, failures)
        }
    }
}

/// Runs `work` until it finishes (`Some`) or the run halts (`None`). Work that is ready on its
/// first poll never registers for the halt's wake-up.
async fn until_halted<T>(halt: &CancellationToken, work: impl Future<Output = T>) -> Option<T> {
    let mut work = pin!(work);
    let mut halted = pin!(halt.cancelled());
    poll_fn(|cx| {
        if let Poll::Ready(out) = work.as_mut().poll(cx) {
            return Poll::Ready(Some(out));
        }
        halted.as_mut().poll(cx).map(|()| None)
    })
    .await
}

/// Runs the calls of one model turn concurrently and answers them in order: the engine of
/// [`Registry::execute_turn`] and of the agent loop, which answers its built-in tools itself.
///
/// Within a turn, parallel failures of one tool count once for the per-run breaker, and the
/// first answer that ends the run halts the calls still running.
pub(crate) async fn execute_turn<'a, T, Fut>(
    ctx: &'a RunContext,
    calls: &'a [ToolCall],
    answer: impl Fn(&'a ToolCall) -> Fut,
    ends_run: impl Fn(&T) -> bool,
) -> Vec<T>
where
    Fut: Future<Output = T>,
{
    ctx.begin_turn();
    answer_all(ctx, calls, answer, ends_run).await
}

/// Answers the calls of a turn already begun: [`execute_turn`] without counting a new turn, for
/// a durable run that saves the turn first (and a resumed one that goes on with it).
pub(crate) async fn answer_all<'a, T, Fut>(
    ctx: &'a RunContext,
    calls: &'a [ToolCall],
    answer: impl Fn(&'a ToolCall) -> Fut,
    ends_run: impl Fn(&T) -> bool,
) -> Vec<T>
where
    Fut: Future<Output = T>,
{
    let ends_run = &ends_run;
    join_all(calls.iter().map(|call| {
        let answered = answer(call);
        async move {
            let answer = answered.await;
            // This call ends the run: the others answer "operation cancelled" now rather than
            // holding the stop up until they finish.
            if ends_run(&answer) {
                ctx.halt();
            }
            answer
        }
    }))
    .await
}

/// Finds the tool, refuses what must not run, and makes the first attempt; a failure walks the
/// ladder. A call of a resumed run passes the same refusals before it goes on from where it was.
async fn handle(
    registry: &Registry,
    ctx: &RunContext,
    call: &ToolCall,
    start: CallStart<'_>,
) -> Handled {
    let Some(entry @ (tool, _)) = registry.entry(&call.name) else {
        return unknown_tool(registry, ctx, call);
    };
    // The gate sees the arguments the tool would receive: for a resumed call, the ones a fixer
    // wrote before the run was interrupted, when one did.
    let refused = match start {
        CallStart::From(CallProgress {
            arguments: Some(arguments),
            ..
        }) => {
            let sent = ToolCall::new(call.id.clone(), call.name.clone(), arguments.clone());
            refusal(ctx, tool, &sent)
        }
        _ => refusal(ctx, tool, call),
    };
    if let Some(refused) = refused {
        return refused;
    }
    if let Some(budget) = ctx.retry_budget() {
        budget.record_call(tool.breaker_key());
    }
    let extensions = ctx.call_extensions(&call.id);
    if let CallStart::From(progress) = start {
        return Box::pin(resume::go_on(
            registry, ctx, entry, call, progress, extensions,
        ))
        .await;
    }
    match attempt::attempt(ctx, tool, &call.arguments, &extensions).await {
        Ok(output) => Handled::Ok(output),
        Err(Missed::Tripped { failures }) => Handled::Tripped {
            tool: tool.name().to_owned(),
            failures,
        },
        // Recovery is the rare path: boxing it keeps the happy path's future small.
        Err(Missed::Failed(error)) => {
            let walk = Walk::new(
                registry,
                ctx,
                entry,
                call,
                Failure::new(error, 1, ctx.classifier()),
                extensions,
            );
            Box::pin(walk.run()).await
        }
    }
}

/// The model asked for a tool that does not exist (or no longer does): say which do. Asking
/// again and again trips the per-run breaker like any failing tool.
fn unknown_tool(registry: &Registry, ctx: &RunContext, call: &ToolCall) -> Handled {
    let name = sanitize(&call.name, MAX_TOOL_NAME_CHARS);
    if let Some(failures) = ctx.breaker_tripped(&name) {
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

/// Why `tool` must not run for `call` in this run, if it must not: dropped by `degrade`,
/// stopped by the per-run breaker, or denied by the permission hook. Arguments that give a key
/// twice are not shown to the hook: the attempt that follows refuses them.
fn refusal(ctx: &RunContext, tool: &ToolDef, call: &ToolCall) -> Option<Handled> {
    let limit = ctx.limits().max_message_chars;
    if ctx.is_degraded(tool.name()) {
        let message = "this tool was dropped for the rest of the run after it failed";
        return Some(Handled::Error(
            SurfacedError::bounded(tool.name(), ErrorKind::Unknown, message, limit)
                .with_suggestion("Do not call it again; continue without it."),
        ));
    }
    if let Some(failures) = ctx.breaker_tripped(tool.name()) {
        let tool = tool.name().to_owned();
        return Some(Handled::Tripped { tool, failures });
    }
    let hook = ctx.permission()?;
    // Arguments that give a key twice read differently to different parsers: the hook is not
    // asked about them, and the attempt refuses them before the tool runs.
    if crate::arguments::reject_duplicate_keys(&call.arguments).is_err() {
        return None;
    }
    let asked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        hook.check_in(call, &ctx.permission_context(tool.name()))
    }));
    let verdict = match asked {
        Ok(verdict) => verdict,
        // Fail closed: a hook that cannot answer has not allowed anything.
        Err(payload) => {
            let panic = ToolPanic::from_payload(payload);
            let message = format!(
                "the permission hook panicked ({}); the tool did not run",
                panic.message
            );
            return Some(Handled::Error(
                SurfacedError::bounded(tool.name(), ErrorKind::Bug, &message, limit)
                    .with_suggestion(
                        "The permission check crashed, so the tool did not run. Do not call it \
                         again the same way; tell the user.",
                    ),
            ));
        }
    };
    let Permission::Deny(reason) = verdict else {
        return None;
    };
    let denials = ctx.record_denial(tool.name());
    let budget = ctx.limits().max_permission_denials;
    if budget != 0 && denials >= budget {
        let args = serde_json::from_str(&call.arguments)
            .unwrap_or_else(|_| serde_json::Value::String(call.arguments.clone()));
        let error = ToolError::execution(args, PermissionDenied { denials, reason });
        let failure = Failure::new(error, 0, ctx.classifier());
        let reason = TerminationReason::PermissionDenials { denials };
        return Some(Handled::stop(reason, failure));
    }
    let message = format!("permission denied: {reason}");
    Some(Handled::Error(
        SurfacedError::bounded(tool.name(), ErrorKind::Auth, &message, limit).with_suggestion(
            "The tool did not run. Reframe the request or ask the user for permission.",
        ),
    ))
}
