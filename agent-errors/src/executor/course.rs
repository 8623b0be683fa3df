//! A call's course: through the [gate](super::gate), the first try, then the
//! [ladder](super::ladder). One function for every call, fresh or resumed: a resumed call
//! differs only in the progress it starts from (a fixer's arguments, the attempts and repairs
//! spent, the retry rung it was on, the person it waited for, what a person approved).

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use super::attempt::{Missed, attempt};
use super::context::RunContext;
use super::failure::Failed;
use super::gate::{self, Asking, Blocked, Cleared, Refused, unknown_tool};
use super::ladder::{Sending, Walk};
use super::outcome::{Failure, Handled};
use super::resume::{
    Approved, CallInterrupted, CallProgress, CallStart, RetryPlace, SavedFailure, Waiting,
};
use super::unknown::Repeat;
use crate::chat::ToolCall;
use crate::error::ToolError;
use crate::events::Event;
use crate::extensions::Extensions;
use crate::policy::{PolicyKey, ResolvedPolicy};
use crate::reconcile::Reconciled;
use crate::registry::Registry;
use crate::tool::ToolDef;

/// Answers one call of `entry`'s tool (an unknown tool when `None`): its arguments pass the
/// gate (a person is asked when one must approve, or asked again when the call waited for
/// one), the tool is tried, and a failure walks the ladder. A call of a resumed run goes on
/// from where it got: asleep before a retry, it sleeps what was left and retries; running
/// when the process stopped, it is run again when its tool is idempotent and is otherwise a
/// failure whose outcome is unknown.
pub(super) async fn run(
    registry: &Registry,
    ctx: &RunContext,
    entry: Option<(&ToolDef, &ResolvedPolicy)>,
    call: &ToolCall,
    start: CallStart<'_>,
) -> Handled {
    let Some(entry @ (tool, _)) = entry else {
        return unknown_tool(registry, ctx, call);
    };
    let progress = start.progress();
    // Only a tool that is not idempotent, in a run where some call's outcome is unknown, asks
    // whether this call repeats one.
    let mut key_of = None;
    if !tool.is_idempotent() && ctx.learnt().any_unknown() {
        let resumed = progress.is_some();
        match Box::pin(repeat_of_unknown(registry, ctx, tool, call, resumed)).await {
            Ok(key) => key_of = key,
            Err(answer) => return answer,
        }
    }
    let sent = arguments_sent(call, progress);
    let mut approved = progress.map(|p| p.approved.clone()).unwrap_or_default();
    let waited = progress.and_then(|p| p.waiting.as_ref());
    // Whether a person was asked before the first try: what they approved is saved first.
    let mut asked = waited.is_some();
    let passed = match (waited, progress) {
        (Some(waiting), Some(progress)) => {
            let again = ask_again(registry, ctx, call, &sent, progress, waiting, &mut approved);
            Box::pin(again).await
        }
        _ => match gate::pass(ctx, tool, call, &sent, &approved) {
            Ok(cleared) => Ok(cleared),
            Err(Blocked::Refused(refused)) => Err(refused),
            Err(Blocked::Ask) => {
                asked = true;
                let asking = asking_first(progress);
                let through = gate::through(ctx, tool, call, sent.clone(), &mut approved, asking);
                Box::pin(through).await
            }
        },
    };
    let outcome = match passed {
        Ok(cleared) => Ok(cleared),
        Err(Refused::Unavailable(handled) | Refused::Answered(handled)) => return handled,
        Err(Refused::Invalid(error)) => Err(error),
    };
    if let Some(budget) = ctx.hooks().retry_budget() {
        budget.record_call(tool.breaker_key());
    }
    let extensions = ctx.call_extensions(key_of.as_ref().unwrap_or(&call.id));
    match (outcome, progress) {
        (Ok(cleared), None) if !asked => {
            // The usual call, tried at once: the course is made only for a failure.
            let error = match attempt(ctx, &cleared, &extensions).await {
                Ok(output) => return Handled::Ok(output),
                Err(Missed::Tripped { failures }) => return tripped(&cleared, failures),
                Err(Missed::Failed(error)) => error,
            };
            let course = Course::new(registry, ctx, entry, call, extensions, approved);
            Box::pin(course.failed(cleared, error, 1, None)).await
        }
        (Err(invalid), progress) => {
            let attempts = progress.map_or(1, |p| p.attempts);
            let failure = Failure::new(invalid, attempts, ctx.hooks().classifier());
            let course = Course::new(registry, ctx, entry, call, extensions, approved);
            let from = progress.map(|p| (p, None));
            let walk = course.walk(Sending::Unchecked(sent), failure, from);
            Box::pin(walk.run()).await
        }
        (Ok(cleared), progress) => {
            let progress = progress.cloned().unwrap_or_else(|| before_first(None));
            let course = Course::new(registry, ctx, entry, call, extensions, approved);
            Box::pin(course.go_on(cleared, &progress, asked)).await
        }
    }
}

/// The arguments a call sends: its own, or those a fixer wrote before the process stopped.
fn arguments_sent<'a>(call: &'a ToolCall, progress: Option<&CallProgress>) -> Cow<'a, str> {
    match progress.and_then(|p| p.arguments.as_ref()) {
        Some(arguments) => Cow::Owned(arguments.clone()),
        None => Cow::Borrowed(call.arguments.as_str()),
    }
}

/// What a call that may repeat one whose outcome is unknown becomes: `Err` with its answer when
/// it is answered instead of run, `Ok` with the earlier call's key when a keyed tool runs it
/// under that key, `Ok(None)` when it runs as itself. A call of a resumed run was looked up
/// before the process stopped, so only its key is found again.
async fn repeat_of_unknown(
    registry: &Registry,
    ctx: &RunContext,
    tool: &ToolDef,
    call: &ToolCall,
    resumed: bool,
) -> Result<Option<Arc<str>>, Handled> {
    if resumed {
        return Ok(super::unknown::resumed_key(ctx, tool, call));
    }
    match super::unknown::repeat(registry, ctx, tool, call).await {
        Repeat::Answered(answer) => Err(answer),
        Repeat::UnderKeyOf(earlier) => Ok(Some(earlier)),
        Repeat::Fresh => Ok(None),
    }
}

/// The answer for a call whose tool's per-run breaker tripped while it was on its way.
fn tripped(cleared: &Cleared<'_>, failures: u32) -> Handled {
    Handled::Tripped {
        tool: cleared.tool().name().to_owned(),
        failures,
    }
}

/// What every step of one call's course shares.
struct Course<'a> {
    registry: &'a Registry,
    ctx: &'a RunContext,
    entry: (&'a ToolDef, &'a ResolvedPolicy),
    call: &'a ToolCall,
    /// The run's values and this call's idempotency key, as every attempt sees them.
    extensions: Extensions,
    /// What a person approved for this call.
    approved: Approved,
}

impl<'a> Course<'a> {
    fn new(
        registry: &'a Registry,
        ctx: &'a RunContext,
        entry: (&'a ToolDef, &'a ResolvedPolicy),
        call: &'a ToolCall,
        extensions: Extensions,
        approved: Approved,
    ) -> Self {
        Course {
            registry,
            ctx,
            entry,
            call,
            extensions,
            approved,
        }
    }

    /// Makes the attempt `attempts` counts with the cleared arguments; a failure walks the
    /// ladder (from `progress` when the call is resumed).
    async fn first_try(
        self,
        cleared: Cleared<'a>,
        attempts: u32,
        progress: Option<(&CallProgress, Option<PolicyKey>)>,
    ) -> Handled {
        let error = match attempt(self.ctx, &cleared, &self.extensions).await {
            Ok(output) => return Handled::Ok(output),
            Err(Missed::Tripped { failures }) => return tripped(&cleared, failures),
            Err(Missed::Failed(error)) => error,
        };
        Box::pin(self.failed(cleared, error, attempts, progress)).await
    }

    /// The attempt `attempts` counts failed with `error`: the ladder answers it.
    async fn failed(
        self,
        cleared: Cleared<'a>,
        error: Box<Failed>,
        attempts: u32,
        progress: Option<(&CallProgress, Option<PolicyKey>)>,
    ) -> Handled {
        let failure = Failure::new(error, attempts, self.ctx.hooks().classifier());
        let sending = self.sending(cleared);
        self.walk(sending, failure, progress).run().await
    }

    /// Goes on with a call of a resumed run, or one a person was `asked` about, its arguments
    /// cleared.
    async fn go_on(self, cleared: Cleared<'a>, progress: &CallProgress, asked: bool) -> Handled {
        if asked {
            // A person just answered: the approved arguments are tried, counted as a new call,
            // once what was approved is saved.
            let attempts = progress.attempts + 1;
            if !self.save_running(&cleared, progress, attempts).await {
                return Handled::Cancelled;
            }
            let walked = progress.waiting.as_ref().and_then(|w| w.key.as_deref());
            let walked = walked.and_then(key_named);
            return self
                .first_try(cleared, attempts, Some((progress, walked)))
                .await;
        }
        let raw = cleared.arguments().to_owned();
        if let (Some(place), Some(delay)) = (&progress.retry, progress.backoff_ms) {
            let failure = saved_failure(self.ctx, &raw, place, progress.attempts);
            let delay = Duration::from_millis(delay);
            let sending = self.sending(cleared);
            return self
                .walk(sending, failure, Some((progress, None)))
                .at_retry(place, delay)
                .run()
                .await;
        }
        // A keyed tool's attempt carries the same key when made again: the service applies it
        // once.
        if !self.entry.0.repeats_safely() {
            let error = ToolError::execution(raw.as_str(), CallInterrupted);
            let failure = Failure::new(error, progress.attempts, self.ctx.hooks().classifier());
            let sending = self.sending(cleared);
            return self
                .walk(sending, failure, Some((progress, None)))
                .run()
                .await;
        }
        // Idempotent or keyed: a reconciler that knows the call took effect answers it;
        // otherwise the attempt that was running is made again, in the place it was made, and
        // said so (the tool may see the call twice; a keyed one with the same key).
        if let Some(reconciler) = self.registry.reconciler_of(self.entry.0) {
            let (tool, id) = (self.entry.0.name(), &*self.call.id);
            let reason = CallInterrupted.to_string();
            let asked = super::unknown::reconcile(self.ctx, reconciler, tool, id, &raw, &reason);
            if let Reconciled::Happened(output) = asked.await {
                return Handled::Ok(output);
            }
        }
        self.ctx.events().emit(Event::InterruptedRerun {
            tool: cleared.tool().name().to_owned(),
            call_id: self.call.id.to_string(),
            attempt: progress.attempts,
        });
        if let Some(place) = &progress.retry {
            let failure = saved_failure(self.ctx, &raw, place, progress.attempts);
            let sending = self.sending(cleared);
            let walk = self.walk(sending, failure, Some((progress, None)));
            return walk.at_retry(place, Duration::ZERO).run().await;
        }
        self.first_try(cleared, progress.attempts, Some((progress, None)))
            .await
    }

    /// Saves that the call is about to run its tool with the cleared arguments, as its
    /// `attempts`th call; false when the save failed.
    async fn save_running(
        &self,
        cleared: &Cleared<'_>,
        progress: &CallProgress,
        attempts: u32,
    ) -> bool {
        let running = || CallProgress {
            attempts,
            repair_steps: progress.repair_steps,
            arguments: (cleared.arguments() != self.call.arguments)
                .then(|| cleared.arguments().to_owned()),
            approved: self.approved.clone(),
            ..CallProgress::default()
        };
        let journal = self.ctx.journal();
        journal
            .save_progress(&self.call.id, running, || self.ctx.recovery())
            .await
    }

    /// What the walk sends: the cleared arguments when they were cleared for the called tool
    /// (a person may have been asked about a fallback's), else the same text, to be cleared.
    fn sending(&self, cleared: Cleared<'a>) -> Sending<'a> {
        if std::ptr::eq(cleared.tool(), self.entry.0) {
            Sending::Cleared(cleared)
        } else {
            Sending::Unchecked(cleared.into_sent())
        }
    }

    fn walk(
        self,
        sending: Sending<'a>,
        failure: Failure,
        from: Option<(&CallProgress, Option<PolicyKey>)>,
    ) -> Walk<'a> {
        let (registry, ctx, entry, call) = (self.registry, self.ctx, self.entry, self.call);
        let shared = (self.extensions, self.approved);
        Walk::new(registry, ctx, entry, call, (failure, sending), shared, from)
    }
}

/// A call that waited for a person: the same question is asked again (the run's answers
/// first), of the tool it was asked about, and what they approve is cleared.
async fn ask_again<'a>(
    registry: &'a Registry,
    ctx: &RunContext,
    call: &ToolCall,
    sent: &Cow<'a, str>,
    progress: &CallProgress,
    waiting: &Waiting,
    approved: &mut Approved,
) -> Result<Cleared<'a>, Refused> {
    let Some((tool, _, _)) = registry.entry(&waiting.pending.tool) else {
        return Err(Refused::Answered(unknown_tool(registry, ctx, call)));
    };
    let asking = Asking {
        forced: Some(waiting.pending.reason.clone()),
        key: waiting.key.as_deref().and_then(key_named),
        progress: progress.clone(),
        awaited: Some(waiting.pending.clone()),
    };
    gate::through(ctx, tool, call, sent.clone(), approved, asking).await
}

/// What a person is asked about a call's first try, as the rules require it.
fn asking_first(progress: Option<&CallProgress>) -> Asking {
    Asking {
        forced: None,
        key: None,
        progress: before_first(progress),
        awaited: None,
    }
}

/// How far a call got before its first try: what a wait for a person saves.
fn before_first(progress: Option<&CallProgress>) -> CallProgress {
    match progress {
        Some(progress) => progress.clone(),
        None => CallProgress {
            attempts: 0,
            ..CallProgress::default()
        },
    }
}

/// The policy key written as `name` in a saved progress.
fn key_named(name: &str) -> Option<PolicyKey> {
    PolicyKey::all().find(|key| key.as_str() == name)
}

/// The failure a resumed call was retrying, as its progress saved it.
fn saved_failure(ctx: &RunContext, args: &str, place: &RetryPlace, attempts: u32) -> Failure {
    let saved = SavedFailure {
        kind: place.kind,
        message: place.message.clone(),
    };
    Failure::new(
        ToolError::execution(args, saved),
        attempts,
        ctx.hooks().classifier(),
    )
}
