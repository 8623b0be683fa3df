//! The executor: one tool call in, exactly one outcome out.
//!
//! The path of one call, in file order:
//!
//! 1. [`context`]: the run the call belongs to (limits, cancellation, breakers, the tools
//!    `degrade` dropped), and [`permission`]: the hook asked before a tool runs.
//! 2. this module's [`execute`]: find the tool, run the call's [`course`], and report the
//!    outcome on the per-run breaker.
//! 3. [`course`]: one function for every call, fresh or resumed: through the gate, the first
//!    try, then the ladder, differing only in the progress the call starts from.
//! 4. [`gate`]: the one door into a tool body, for every argument set whoever wrote it (the
//!    model, a fixer, a fallback, a person, a resumed run): the tool is available, no key is
//!    given twice, the permission hook allows it, a person approved it when one must. Its
//!    answer, a [`Cleared`], is the only value a tool body starts from.
//! 5. [`attempt`]: count the tool body on the run's usage meter, parse the cleared arguments,
//!    ask the service breaker, run the tool under its timeout, catch a panic.
//! 6. [`ladder`]: a failed call walks its policy's rungs (retry, fix, fallback, escalate,
//!    throw, degrade, ask a person) until it is answered; every new argument set and every
//!    other tool goes back through the gate.
//! 7. [`outcome`]: the decision becomes a [`CallOutcome`]: a result for the model, or a stop of
//!    the run.
//!
//! Whatever happens (an unknown tool, a denial, a panic, a cancelled run) the call gets exactly
//! one outcome.

mod approval;
mod attempt;
mod cancel;
mod context;
mod course;
mod entry;
mod failure;
mod gate;
mod journal;
mod ladder;
mod limits;
mod outcome;
mod permission;
mod resume;
mod timer;
mod unknown;

use std::future::poll_fn;
use std::pin::pin;
use std::task::Poll;

pub use cancel::Cancellation;
pub use context::RunContext;
pub use failure::{CircuitOpen, MayHaveTakenEffect, ToolPanic};
pub use gate::Cleared;
pub use limits::{DEFAULT_MAX_PERMISSION_DENIALS, Limits};
pub use outcome::{CallOutcome, Terminated, TerminationReason};
pub use permission::{Permission, PermissionContext, PermissionDenied, PermissionHook};

pub(crate) use context::{Approvals, RecoveryState, RunSetup};
use context::{Halt, Trip};
pub(crate) use journal::{Held, Journal, NoJournal, Recorded, Saved};
pub(crate) use outcome::CANCELLED;
pub use resume::CallInterrupted;
pub(crate) use resume::{CallProgress, CallStart};
pub(crate) use timer::runtime_has_timer;

use crate::chat::{ToolCall, ToolResult};
use crate::classify::ErrorKind;
use crate::events::Event;
use crate::policy::RunBreakerRule;
use crate::registry::Registry;
use crate::sanitize::{MAX_TOOL_NAME_CHARS, sanitize};
use outcome::Handled;

/// Runs one tool call through its resolved policy, inside its span: see [`Registry::execute`].
/// A call of a resumed run starts from how far it got; any other starts fresh.
pub(crate) fn execute<'a>(
    registry: &'a Registry,
    ctx: &'a RunContext,
    call: &'a ToolCall,
    start: CallStart<'a>,
) -> impl Future<Output = CallOutcome> + 'a {
    execute_spanned(registry, ctx, call, start, || {
        crate::observe::spans::execute_tool(call, ctx.run_id())
    })
}

/// [`execute`] for a fresh call that already has its span: the `execute_tool` span of the
/// framework whose loop made the call (rig's), so the call is not traced twice under two ids.
#[cfg(feature = "rig")]
pub(crate) fn execute_in_span<'a>(
    registry: &'a Registry,
    ctx: &'a RunContext,
    call: &'a ToolCall,
    span: tracing::Span,
) -> impl Future<Output = CallOutcome> + 'a {
    execute_spanned(registry, ctx, call, CallStart::Fresh, || span)
}

/// [`execute`] inside the span `span` makes.
async fn execute_spanned(
    registry: &Registry,
    ctx: &RunContext,
    call: &ToolCall,
    start: CallStart<'_>,
    span: impl FnOnce() -> tracing::Span,
) -> CallOutcome {
    // The name is looked up once: the tool, its policy and its meters come together.
    let found = registry.entry(&call.name);
    let meters = found.map(|(_, _, meters)| meters);
    let entry = found.map(|(tool, policy, _)| (tool, policy));
    // An unknown name has no policy: nothing to take off the table, the run's default rule.
    let rule = found
        .map(|(_, policy, _)| policy.run_breaker())
        .unwrap_or_default();
    // Boxed once here, the call's work is not copied again by each layer that wraps it (the
    // span, the halt, a turn's join): one allocation costs less than those copies.
    let handled = Box::pin(course::run(registry, ctx, entry, call, start));
    let work = || execute_call(registry, ctx, call, rule, handled);
    crate::observe::tool_call(span(), meters, work).await
}

async fn execute_call(
    registry: &Registry,
    ctx: &RunContext,
    call: &ToolCall,
    rule: RunBreakerRule,
    handled: impl Future<Output = Handled>,
) -> CallOutcome {
    ctx.hooks().adopt_classifier(registry.classifier());
    if ctx.halting().is_halted() {
        return CallOutcome::cancelled(call);
    }
    let Some(handled) = until_halted(ctx.halting(), handled).await else {
        return CallOutcome::cancelled(call);
    };
    let surfaced = match handled {
        Handled::Ok(output) => {
            ctx.learnt()
                .record_outcome(&call.name, ErrorKind::Unknown, true, rule);
            return CallOutcome::Result(ToolResult::ok(call, output));
        }
        Handled::Error(surfaced) => surfaced,
        // The run ends (or the call was cancelled): nothing for the breaker to count.
        handled => return handled.into_outcome(ctx, call),
    };
    // An unknown name is the model's text: bound it before it is used as a key.
    let tool = sanitize(&call.name, MAX_TOOL_NAME_CHARS);
    let kind = surfaced.kind;
    match ctx.learnt().record_outcome(&tool, kind, false, rule) {
        None => Handled::Error(surfaced).into_outcome(ctx, call),
        Some(Trip::Stop { failures }) => {
            // Reported as shown, though the run ends before the model sees it.
            let _ = Handled::Error(surfaced).into_outcome(ctx, call);
            ctx.events().emit(Event::BreakerTripped {
                tool: tool.clone(),
                failures,
            });
            outcome::tripped(tool, kind, failures)
        }
        Some(Trip::Removed { failures }) => {
            let shown =
                Handled::Error(outcome::removed(surfaced, &tool, failures)).into_outcome(ctx, call);
            ctx.events().emit(Event::BreakerTripped {
                tool: tool.clone(),
                failures,
            });
            ctx.events().emit(Event::Degraded { tool });
            shown
        }
    }
}

/// Runs `work` until it finishes (`Some`) or the run halts (`None`). Work that is ready on its
/// first poll never makes the halt's token nor registers for its wake-up.
async fn until_halted<T>(halt: &Halt, work: impl Future<Output = T>) -> Option<T> {
    let mut work = pin!(work);
    let mut halted = pin!(None);
    poll_fn(|cx| {
        if let Poll::Ready(out) = work.as_mut().poll(cx) {
            return Poll::Ready(Some(out));
        }
        if halted.is_none() {
            halted.set(Some(halt.token().cancelled()));
        }
        match halted.as_mut().as_pin_mut() {
            Some(halted) => halted.poll(cx).map(|()| None),
            None => Poll::Pending,
        }
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
    ctx.learnt().begin_turn();
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
    // The journal awaits the answers: together, or one after another when it replays the run.
    let answers = calls.iter().map(|call| {
        let answered = answer(call);
        async move {
            let answer = answered.await;
            // This call ends the run: the others answer "operation cancelled" now rather than
            // holding the stop up until they finish.
            if ends_run(&answer) {
                ctx.halting().halt();
            }
            answer
        }
    });
    ctx.journal().answer_all(answers).await
}
