//! The ladder: a failed call walks the rungs its policy resolved for the failure's key, one
//! function per action, each answering "given this failure, what happens next?".
//!
//! A rung either answers the call ([`Next::Done`]), passes it down the ladder
//! ([`Next::Down`]), or reports that the failure changed into one of another key
//! ([`Next::Switch`]): a retry that now fails with a 404, a repaired call that now times out.
//! The walk then starts over on that key's ladder. Each key's ladder is walked at most once per
//! call and fixers are bounded by [`Limits::max_repair_steps`](crate::Limits), so every walk
//! ends.
//!
//! The rungs that do the most live in files of their own: [`retry`], [`fix`] and [`fallback`].

mod fallback;
mod fix;
mod person;
mod reconcile;
mod retry;

use std::borrow::Cow;
use std::time::Duration;

use super::attempt::{Missed, attempt};
use super::context::RunContext;
use super::failure::Failed;
use super::gate::{self, Asking, Blocked, Cleared, Refused};
use super::journal::Saved;
use super::outcome::{Failure, Handled, TerminationReason};
use super::resume::Approved;
use super::resume::{CallProgress, RetryPlace};
use crate::approval::WaitReason;
use crate::chat::ToolCall;
use crate::classify::ErrorKind;
use crate::events::Event;
use crate::extensions::Extensions;
use crate::policy::{Action, Ladder, PolicyKey, ResolvedPolicy};
use crate::registry::Registry;
use crate::sanitize::{SurfacedError, scrub};
use crate::tool::{ToolDef, ToolOutput};

/// What a rung decided.
enum Next {
    /// The call is answered.
    Done(Handled),
    /// The run ends, for the failure in hand.
    Stop(TerminationReason),
    /// This rung could not help: try the next one.
    Down,
    /// The failure is now of another key: walk that key's ladder.
    Switch,
}

/// The arguments a walk's next attempt sends to its tool: cleared by the gate, or not yet (a
/// fixer's rewrite, arguments the gate refused as invalid), to be cleared before they are sent.
pub(super) enum Sending<'a> {
    Cleared(Cleared<'a>),
    Unchecked(Cow<'a, str>),
}

impl<'a> Sending<'a> {
    fn raw(&self) -> &Cow<'a, str> {
        match self {
            Sending::Cleared(cleared) => cleared.sent(),
            Sending::Unchecked(raw) => raw,
        }
    }
}

/// One failed call on its way down the ladders.
pub(super) struct Walk<'a> {
    registry: &'a Registry,
    ctx: &'a RunContext,
    tool: &'a ToolDef,
    policy: &'a ResolvedPolicy,
    call: &'a ToolCall,
    /// The arguments as the next attempt sends them: a fixer or a person may have replaced
    /// them.
    sending: Sending<'a>,
    /// What a person approved for this call: other arguments ask again.
    approved: Approved,
    failure: Failure,
    walked: Vec<PolicyKey>,
    repair_steps: u32,
    /// The run's values and this call's idempotency key, as every attempt sees them.
    extensions: Extensions,
    /// The rung being tried: its key and place in that key's ladder.
    rung: (PolicyKey, usize),
    /// Where a resumed call goes on: a retry rung, the retries it had drawn, the first delay.
    start: Option<(PolicyKey, usize, u32, Duration)>,
    /// The fixer (and its try) whose answer the call goes on with: announced as `tool_fixed`
    /// when the call succeeds, however many retries it took after the fix.
    fixed_by: Option<(String, u32)>,
    /// This walk is a fallback's own retries, inside the walk of the call that fell back: its
    /// place on a retry rung is not saved (a resumed call walks the called tool's ladder).
    nested: bool,
    /// A failure of the call may have taken effect, and nothing since said whether it did: a
    /// call answered in this state is recorded as one whose outcome is unknown.
    uncertain: bool,
    /// Times the tool's reconciler was asked about this call.
    reconciles: u32,
}

impl<'a> Walk<'a> {
    /// A walk of `tool`'s ladders for `failure`, sending `sending` from now on. A call of a
    /// resumed run goes on from `progress`: the repairs it already spent stay spent. `walked`
    /// counts a ladder as walked already: a person it handed the call to approved another try,
    /// and a new failure of the same key does not walk it again.
    pub(super) fn new(
        registry: &'a Registry,
        ctx: &'a RunContext,
        (tool, policy): (&'a ToolDef, &'a ResolvedPolicy),
        call: &'a ToolCall,
        (failure, sending): (Failure, Sending<'a>),
        (extensions, approved): (Extensions, Approved),
        from: Option<(&CallProgress, Option<PolicyKey>)>,
    ) -> Self {
        let (repair_steps, walked) = match from {
            Some((progress, walked)) => (progress.repair_steps, walked),
            None => (0, None),
        };
        let mut walked_keys = Vec::with_capacity(2);
        walked_keys.extend(walked);
        let uncertain = super::unknown::may_have_taken_effect(tool, &failure);
        Walk {
            registry,
            ctx,
            tool,
            policy,
            call,
            sending,
            approved,
            failure,
            walked: walked_keys,
            repair_steps,
            extensions,
            rung: (PolicyKey::Execution, 0),
            start: None,
            fixed_by: None,
            nested: false,
            uncertain,
            reconciles: 0,
        }
    }

    /// Starts on the retry rung `place` names, its drawn retries spent, the next attempt made
    /// after `delay`; a ladder that no longer has a retry rung there is walked from its top.
    pub(super) fn at_retry(mut self, place: &RetryPlace, delay: Duration) -> Self {
        if let Some(key) = place.key() {
            self.start = Some((key, place.rung, place.retries, delay));
        }
        self
    }

    /// Walks the ladders until the call succeeds, is shown to the model, or stops the run.
    pub(super) async fn run(mut self) -> Handled {
        'ladders: loop {
            match self.reconciled().await {
                None => {}
                // Run again, the call failed another way: that failure is asked about first.
                Some(Next::Switch) => continue 'ladders,
                Some(Next::Done(handled)) => return self.answered(handled),
                Some(Next::Stop(reason)) => return self.stopped(reason),
                // Run again, the call failed with a key whose ladder it walked already.
                Some(Next::Down) => return self.after_walked().await,
            }
            let (key, ladder) = self.entry();
            self.walked.push(key);
            let from = match self.start {
                Some((start_key, rung, _, _))
                    if start_key == key
                        && matches!(ladder.actions().get(rung), Some(Action::Retry(_))) =>
                {
                    rung
                }
                _ => {
                    self.start = None;
                    0
                }
            };
            for (index, action) in ladder.actions().iter().enumerate().skip(from) {
                self.rung = (key, index);
                match self.rung(action).await {
                    Next::Done(handled) => return self.answered(handled),
                    Next::Stop(reason) => return self.stopped(reason),
                    Next::Down => {}
                    Next::Switch => continue 'ladders,
                }
            }
            return self.ran_out();
        }
    }

    /// The call is answered: announced, and recorded when its outcome is unknown.
    fn answered(mut self, handled: Handled) -> Handled {
        if matches!(handled, Handled::Error(_)) {
            self.record_unknown();
        }
        self.announced(handled)
    }

    /// The run ends for the failure in hand.
    fn stopped(self, reason: TerminationReason) -> Handled {
        self.count_outcome(false);
        self.record_unknown();
        Handled::stop(reason, self.failure)
    }

    /// A call run again after its reconciler said the first did not happen failed with a key
    /// whose ladder it walked already: that ladder is not walked twice, but its last rung, when
    /// it is not a retry, decides as it did the first time (the preset's `escalate` shows the
    /// model the failure); a ladder of retries alone has run out.
    async fn after_walked(mut self) -> Handled {
        let (key, ladder) = self.entry();
        let last = ladder.actions().len().checked_sub(1);
        match last.map(|index| (index, &ladder.actions()[index])) {
            Some((index, action)) if !matches!(action, Action::Retry(_)) => {
                self.rung = (key, index);
                match self.rung(action).await {
                    Next::Done(handled) => self.answered(handled),
                    Next::Stop(reason) => self.stopped(reason),
                    Next::Down | Next::Switch => self.ran_out(),
                }
            }
            _ => self.ran_out(),
        }
    }

    /// The ladders ran out without a terminal rung: the failure's default fate.
    fn ran_out(self) -> Handled {
        self.count_outcome(false);
        self.record_unknown();
        Handled::default_fate(self.ctx, self.tool.name(), self.failure)
    }

    /// Counts how the call's recovery ended: it succeeded in the end, or its last failure is
    /// shown to the model or ends the run.
    fn count_outcome(&self, recovered: bool) {
        crate::events::count_outcome(
            crate::events::Layer::Tool,
            recovered,
            self.failure.class.kind,
        );
    }

    /// A call a fixer's answer made succeed says so, once, whichever rung saw the success.
    fn announced(&mut self, handled: Handled) -> Handled {
        match &handled {
            Handled::Ok(_) => self.count_outcome(true),
            Handled::Cancelled | Handled::Waiting(_) => {}
            _ => self.count_outcome(false),
        }
        if let (Handled::Ok(_), Some((fixer, attempt))) = (&handled, self.fixed_by.take()) {
            self.ctx.events().emit(Event::ToolFixed {
                tool: self.tool.name().to_owned(),
                fixer,
                attempt,
            });
        }
        handled
    }

    /// The key that answers the current failure, and its ladder.
    fn entry(&self) -> (PolicyKey, &'a Ladder) {
        if self.failure.error.is_invalid_args() {
            (PolicyKey::InvalidArgs, self.policy.for_invalid_args().0)
        } else {
            let (key, ladder, _) = self.policy.for_kind(self.failure.class.kind);
            (key, ladder)
        }
    }

    /// Takes a new failure; true when its key has a ladder not walked yet.
    fn failed_again(&mut self, failure: Failure) -> bool {
        self.uncertain |= super::unknown::may_have_taken_effect(self.tool, &failure);
        self.failure = failure;
        !self.walked.contains(&self.entry().0)
    }

    async fn rung(&mut self, action: &Action) -> Next {
        match action {
            Action::Retry(retry) => self.retry(retry).await,
            Action::Fix(fix) => self.fix(fix).await,
            Action::FixBuiltin { retries } => self.fix_builtin(*retries).await,
            Action::Fallback { tool } => self.fallback(tool).await,
            Action::Escalate => self.escalate(),
            Action::Throw => self.throw(),
            Action::Degrade => self.degrade(),
            Action::AskPerson => self.ask_person().await,
        }
    }

    /// Records how far the call got; false when the save failed and the call must stop here.
    fn save(&self, retry: Option<RetryPlace>, backoff: Option<Duration>) -> Saved<'_> {
        self.save_at(|| retry, backoff)
    }

    /// Records how far the call got, on the retry rung `retry` names when the journal asks.
    fn save_at(
        &self,
        retry: impl FnOnce() -> Option<RetryPlace>,
        backoff: Option<Duration>,
    ) -> Saved<'_> {
        let progress = || CallProgress {
            retry: retry(),
            backoff_ms: backoff.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            ..self.progress()
        };
        let journal = self.ctx.journal();
        journal.save_progress(&self.call.id, progress, || self.ctx.recovery())
    }

    /// How far the call got, on no retry rung.
    fn progress(&self) -> CallProgress {
        CallProgress {
            attempts: self.failure.attempts,
            repair_steps: self.repair_steps,
            arguments: match self.sending.raw() {
                Cow::Owned(raw) => Some(raw.clone()),
                Cow::Borrowed(_) => None,
            },
            approved: self.approved.clone(),
            ..CallProgress::default()
        }
    }

    /// The arguments of the walk, as its next attempt sends them.
    fn raw(&self) -> &str {
        self.sending.raw()
    }

    /// Sends `raw` from now on: it passes the gate before it is sent.
    fn send(&mut self, raw: String) {
        self.sending = Sending::Unchecked(Cow::Owned(raw));
    }

    /// Lets the walk's arguments through the gate for `tool` (a person asked when one must
    /// approve, or whatever the rules say when `forced`): cleared, or why not.
    async fn clear_for(
        &mut self,
        tool: &'a ToolDef,
        forced: Option<WaitReason>,
    ) -> Result<Cleared<'a>, Refused> {
        let raw = self.sending.raw().clone();
        if forced.is_none() {
            match gate::pass(self.ctx, tool, self.call, &raw, &self.approved) {
                Ok(cleared) => return Ok(cleared),
                Err(Blocked::Refused(refused)) => return Err(refused),
                Err(Blocked::Ask) => {}
            }
        }
        let asking = Asking {
            forced,
            key: Some(self.rung.0),
            progress: self.progress(),
            awaited: None,
        };
        let mut approved = std::mem::take(&mut self.approved);
        let through = gate::through(self.ctx, tool, self.call, raw, &mut approved, asking);
        let cleared = Box::pin(through).await;
        self.approved = approved;
        cleared
    }

    /// Makes the walk's next attempt: its arguments through the gate first when they are not
    /// cleared yet (a person's edit is sent from then on), and a failure taken as the failure
    /// in hand. `forced` asks a person first, whatever the rules say.
    async fn try_again(&mut self, forced: Option<WaitReason>) -> Next {
        if forced.is_some() || matches!(self.sending, Sending::Unchecked(_)) {
            match self.clear_for(self.tool, forced).await {
                Ok(cleared) => self.sending = Sending::Cleared(cleared),
                Err(Refused::Unavailable(handled) | Refused::Answered(handled)) => {
                    return Next::Done(handled);
                }
                Err(Refused::Invalid(error)) => {
                    let attempts = self.failure.attempts;
                    return self.after_failure(error, attempts);
                }
            }
        }
        self.attempt_cleared().await
    }

    /// The attempt with the walk's cleared arguments: the answer, or the failure taken.
    async fn attempt_cleared(&mut self) -> Next {
        let Sending::Cleared(cleared) = &self.sending else {
            return Next::Down;
        };
        let tried = attempt(self.ctx, cleared, &self.extensions).await;
        self.attempted(tried)
    }

    /// What an attempt of the walk's tool came to: the answer, or the failure taken.
    fn attempted(&mut self, tried: Result<ToolOutput, Missed>) -> Next {
        match tried {
            Ok(output) => Next::Done(Handled::Ok(output)),
            Err(Missed::Tripped { failures }) => self.tripped(self.tool.name(), failures),
            Err(Missed::Failed(error)) => {
                let attempts = self.failure.attempts;
                self.after_failure(error, attempts)
            }
        }
    }

    /// `escalate`: show the failure to the model.
    fn escalate(&mut self) -> Next {
        let tool = self.tool.name();
        Next::Done(Handled::escalate_failure(self.ctx, tool, &self.failure))
    }

    /// `throw`: end the run. An auth failure says so; anything else carries its message.
    fn throw(&mut self) -> Next {
        if self.failure.class.kind == ErrorKind::Auth {
            return Next::Stop(TerminationReason::Auth);
        }
        let reason = scrub(
            &self.failure.shown_message(),
            self.ctx.limits().max_message_chars,
        );
        Next::Stop(TerminationReason::Thrown(reason))
    }

    /// `degrade`: drop the tool for the rest of the run and tell the model to go on without it.
    fn degrade(&mut self) -> Next {
        let tool = self.tool.name();
        self.ctx.learnt().degrade(tool);
        self.ctx.events().emit(Event::Degraded {
            tool: tool.to_owned(),
        });
        let limit = self.ctx.limits().max_message_chars;
        let kind = self.failure.class.kind;
        let surfaced = SurfacedError::bounded(tool, kind, &self.failure.shown_message(), limit)
            .with_suggestion(format!(
                "`{tool}` is unavailable for the rest of this run. Continue without it."
            ));
        Next::Done(Handled::Error(surfaced))
    }

    /// A retry or repair failed again: a new key's ladder, or the next rung of this one.
    fn after_failure(&mut self, error: impl Into<Failed>, attempts: u32) -> Next {
        if self.failed_again(Failure::new(error, attempts, self.ctx.hooks().classifier())) {
            Next::Switch
        } else {
            Next::Down
        }
    }

    fn tripped(&self, tool: &str, failures: u32) -> Next {
        let tool = tool.to_owned();
        Next::Done(Handled::Tripped { tool, failures })
    }
}
