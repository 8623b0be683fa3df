//! Calls whose outcome is unknown: which failures leave it unknown, asking the tool's
//! reconciler whether such a call took effect, the run's record of the calls nobody could tell
//! about, and the answer to a repeat of one.
//!
//! A call of a tool that is not idempotent whose outcome stays unknown is recorded (with the
//! run's recovery state, so a durable run's record outlives a crash). A later call of the same
//! tool with the same arguments (as parsed: key order, whitespace and number spelling aside) is
//! a repeat of it, and is not run: it is answered with the earlier call's unknown outcome and
//! what the model can do about it, so the effect cannot happen twice. A tool declared
//! [keyed](crate::ToolDef::keyed), whose service applies a key once, runs the repeat under the
//! earlier call's key instead: the service answers it from its record if the earlier call took
//! effect and applies it once if it did not. For any other tool nothing here can check that the
//! service deduplicates, so answering is the default that fails closed. A tool with a
//! reconciler has the earlier call reconciled first.

use std::error::Error;
use std::io;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::FutureExt;

use super::context::RunContext;
use super::context::recovery::UnknownCall;
use super::failure::ToolPanic;
use super::outcome::{Failure, Handled};
use crate::chat::ToolCall;
use crate::classify::{ErrorKind, chain};
use crate::events::Event;
use crate::idempotency::{IdempotencyKey, effect_hash};
use crate::reconcile::{ReconcileRequest, Reconciled, ReconcilerDef};
use crate::registry::Registry;
use crate::sanitize::{SurfacedError, scrub};
use crate::tool::ToolDef;

/// At most this many times is one call reconciled: a call that runs again after "did not
/// happen" and fails the same way again is not asked about forever.
pub(super) const MAX_RECONCILES: u32 = 3;

/// What the model is told to do about a repeat that was not run.
const REPEAT_SUGGESTION: &str = "Do not call it again with these arguments: it would not run. \
     Check whether the earlier call happened with a tool that only reads (look the order, \
     payment or message up), or ask the user, and tell the user what you found.";

/// Whether `failure` of `tool` leaves the call's outcome unknown: it is of kind
/// `outcome_unknown` (a crash mid-call, or a failure classified so), or the tool is not
/// idempotent and the failure may have come after its request reached the service (a timeout,
/// a connection dropped once the request was sent). A refused connection, a name that did not
/// resolve, an open circuit or an answer from the service leaves nothing unknown.
pub(super) fn may_have_taken_effect(tool: &ToolDef, failure: &Failure) -> bool {
    let kind = failure.class.kind;
    if kind == ErrorKind::OutcomeUnknown {
        return true;
    }
    !tool.is_idempotent()
        && (kind == ErrorKind::Timeout || chain(failure.error.cause()).any(dropped_after_sending))
}

/// A level of a failure's chain that says the connection broke after the request may have been
/// sent: reset, aborted or closed mid-answer, or timed out.
fn dropped_after_sending(level: &(dyn Error + 'static)) -> bool {
    if let Some(io) = level.downcast_ref::<io::Error>() {
        use io::ErrorKind as Io;
        return matches!(
            io.kind(),
            Io::ConnectionReset
                | Io::ConnectionAborted
                | Io::BrokenPipe
                | Io::UnexpectedEof
                | Io::TimedOut
        );
    }
    #[cfg(feature = "reqwest")]
    if let Some(error) = level.downcast_ref::<reqwest::Error>() {
        return error.status().is_none()
            && (error.is_timeout()
                || ((error.is_request() || error.is_body()) && !error.is_connect()));
    }
    level.is::<tokio::time::error::Elapsed>()
}

/// Asks `reconciler` whether the call `call_id` of `tool`, which sent `raw`, took effect. A
/// reconciler that fails or panics cannot tell. In a run whose journal replays (a
/// durable-execution engine), the answer is a kept step: a replay reads it back rather than
/// asking again and perhaps hearing otherwise.
pub(super) async fn reconcile(
    ctx: &RunContext,
    reconciler: &ReconcilerDef,
    tool: &str,
    call_id: &str,
    raw: &str,
    reason: &str,
) -> Reconciled {
    let limit = ctx.limits().max_message_chars;
    let request = ReconcileRequest::new(
        tool,
        IdempotencyKey::new(ctx.run_id().unwrap_or_default(), call_id),
        raw,
    )
    .with_reason(scrub(reason, limit))
    .with_context(ctx.extensions().clone());
    let answer = ctx.journal().run_step(
        || format!("reconcile:{tool}"),
        || asked(reconciler, request, tool, limit),
        (|answer| answer, |answer| answer),
        || Reconciled::StillUnknown,
    );
    let answer = answer.await;
    ctx.events().emit(Event::Reconciled {
        tool: tool.to_owned(),
        reconciler: reconciler.name().to_owned(),
        answer: match answer {
            Reconciled::Happened(_) => "happened",
            Reconciled::DidNotHappen => "did_not_happen",
            Reconciled::StillUnknown => "still_unknown",
        },
    });
    answer
}

/// The reconciler's answer, a failure or a panic (sync or async) taken as "still unknown".
async fn asked(
    reconciler: &ReconcilerDef,
    request: ReconcileRequest,
    tool: &str,
    limit: usize,
) -> Reconciled {
    let answer = match std::panic::catch_unwind(AssertUnwindSafe(|| reconciler.reconcile(request)))
    {
        Ok(future) => AssertUnwindSafe(future).catch_unwind().await,
        Err(payload) => Err(payload),
    };
    let error = match answer {
        Ok(Ok(answer)) => return answer,
        Ok(Err(error)) => error.to_string(),
        Err(payload) => ToolPanic::from_payload(payload).to_string(),
    };
    let (reconciler, error) = (reconciler.name(), scrub(&error, limit));
    tracing::warn!(tool, reconciler, %error, "the reconciler could not tell; the outcome stays unknown");
    Reconciled::StillUnknown
}

/// Records that the call `call` of `tool`, which sent `sent`, has an unknown outcome, for the
/// effect the model asked for and, when they differ (a fixer's rewrite), the one it sent. An
/// idempotent tool's call is not recorded: running it again does no harm.
pub(super) fn record(ctx: &RunContext, tool: &ToolDef, call: &ToolCall, sent: &str, reason: &str) {
    if tool.is_idempotent() {
        return;
    }
    let reason = scrub(reason, ctx.limits().max_message_chars);
    let asked = effect_hash(tool.name(), &call.arguments);
    let sent = (sent != call.arguments).then(|| effect_hash(tool.name(), sent));
    for effect in [asked, sent.flatten()].into_iter().flatten() {
        ctx.learnt().record_unknown(UnknownCall {
            tool: tool.name().to_owned(),
            effect,
            call_id: call.id.to_string(),
            reason: reason.clone(),
        });
    }
}

/// What a call of a tool that is not idempotent does about an earlier call of the same effect
/// whose outcome is unknown.
pub(super) enum Repeat {
    /// It repeats none, or the tool's reconciler said the earlier call did not happen: it runs
    /// as itself.
    Fresh,
    /// It repeats one, and its tool is keyed: it runs under the earlier call's key (the id of
    /// the call the key was made for), which the service applies once.
    UnderKeyOf(Arc<str>),
    /// It repeats one and is answered, not run.
    Answered(Handled),
}

/// The earlier call of `tool` asking for `call`'s effect whose outcome is unknown, if any.
fn earlier_call(
    ctx: &RunContext,
    tool: &ToolDef,
    call: &ToolCall,
) -> Option<(String, UnknownCall)> {
    let effect = effect_hash(tool.name(), &call.arguments)?;
    let earlier = ctx.learnt().unknown_call(tool.name(), &effect)?;
    Some((effect, earlier))
}

/// The key a keyed tool's call resumed after a crash carries: the earlier call's, when it was a
/// repeat run under that key, so the service sees the key it may already have applied.
pub(super) fn resumed_key(ctx: &RunContext, tool: &ToolDef, call: &ToolCall) -> Option<Arc<str>> {
    if !tool.is_keyed() || !ctx.learnt().any_unknown() {
        return None;
    }
    let (_, earlier) = earlier_call(ctx, tool, call)?;
    (*earlier.call_id != *call.id).then(|| Arc::from(earlier.call_id.as_str()))
}

/// What `call` does when it may repeat an earlier call of `tool` whose outcome is unknown (see
/// [`Repeat`]). Asked only of a tool that is not idempotent, in a run with a call whose outcome
/// is unknown.
pub(super) async fn repeat(
    registry: &Registry,
    ctx: &RunContext,
    tool: &ToolDef,
    call: &ToolCall,
) -> Repeat {
    let Some((effect, earlier)) = earlier_call(ctx, tool, call) else {
        return Repeat::Fresh;
    };
    if let Some(reconciler) = registry.reconciler_of(tool) {
        let reason = earlier.reason.as_str();
        let asked = reconcile(
            ctx,
            reconciler,
            tool.name(),
            &earlier.call_id,
            &call.arguments,
            reason,
        );
        match asked.await {
            // The effect the model asks for again has happened: it is told so, with the
            // earlier call's result, and the record stays for a third ask.
            Reconciled::Happened(output) => return Repeat::Answered(Handled::Ok(output)),
            Reconciled::DidNotHappen => {
                ctx.learnt().forget_unknown(tool.name(), &effect);
                return Repeat::Fresh;
            }
            Reconciled::StillUnknown => {}
        }
    }
    if tool.is_keyed() {
        // The record stays: a third ask runs under the same key too.
        ctx.events().emit(Event::RepeatUnderEarlierKey {
            tool: tool.name().to_owned(),
            earlier_call: earlier.call_id.clone(),
        });
        return Repeat::UnderKeyOf(Arc::from(earlier.call_id.as_str()));
    }
    ctx.events().emit(Event::RepeatNotRun {
        tool: tool.name().to_owned(),
        earlier_call: earlier.call_id.clone(),
    });
    let message = format!(
        "not run: an earlier call of `{}` with the same arguments (call `{}`) may already have \
         taken effect, and whether it did is unknown ({})",
        tool.name(),
        earlier.call_id,
        earlier.reason,
    );
    let limit = ctx.limits().max_message_chars;
    let surfaced = SurfacedError::bounded(tool.name(), ErrorKind::OutcomeUnknown, &message, limit)
        .with_suggestion(REPEAT_SUGGESTION);
    Repeat::Answered(Handled::Error(surfaced))
}
