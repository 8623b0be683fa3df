//! The ladder: a failed call walks the rungs its policy resolved for the failure's key, one
//! function per action, each answering "given this failure, what happens next?".
//!
//! A rung either answers the call ([`Next::Done`]), passes it down the ladder
//! ([`Next::Down`]), or reports that the failure changed into one of another key
//! ([`Next::Switch`]): a retry that now fails with a 404, a repaired call that now times out.
//! The walk then starts over on that key's ladder. Each key's ladder is walked at most once per
//! call and fixers are bounded by [`Limits::max_repair_steps`](crate::Limits), so every walk
//! ends.

use std::borrow::Cow;
use std::ops::ControlFlow;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures_util::FutureExt;

use super::attempt::{Failed, Missed, ToolPanic, attempt};
use super::context::RunContext;
use super::gate::{self, Refused};
use super::outcome::{Failure, Handled, TerminationReason};
use super::resume::{CallProgress, RetryPlace};
use crate::chat::ToolCall;
use crate::classify::ErrorKind;
use crate::events::Event;
use crate::extensions::Extensions;
use crate::fix::{Fix, FixRequest, FixerDef, FixerError};
use crate::policy::{Action, FixAction, Ladder, PolicyKey, ResolvedPolicy, RetryAction};
use crate::registry::Registry;
use crate::retry::{Policy, Retrier, Step, Stop};
use crate::sanitize::{SurfacedError, scrub};
use crate::tool::{ToolDef, to_output};

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

/// One failed call on its way down the ladders.
pub(super) struct Walk<'a> {
    registry: &'a Registry,
    ctx: &'a RunContext,
    tool: &'a ToolDef,
    policy: &'a ResolvedPolicy,
    call: &'a ToolCall,
    /// The arguments as the next attempt sends them: a fixer may have replaced them.
    raw: Cow<'a, str>,
    failure: Failure,
    walked: Vec<PolicyKey>,
    repair_steps: u32,
    /// The run's values and this call's idempotency key, as every attempt sees them.
    extensions: Extensions,
    /// The rung being tried: its key and place in that key's ladder.
    rung: (PolicyKey, usize),
    /// Where a resumed call goes on: a retry rung, the retries it had drawn, the first delay.
    start: Option<(PolicyKey, usize, u32, Duration)>,
}

impl<'a> Walk<'a> {
    pub(super) fn new(
        registry: &'a Registry,
        ctx: &'a RunContext,
        (tool, policy): (&'a ToolDef, &'a ResolvedPolicy),
        call: &'a ToolCall,
        failure: Failure,
        extensions: Extensions,
    ) -> Self {
        Walk {
            registry,
            ctx,
            tool,
            policy,
            call,
            raw: Cow::Borrowed(&call.arguments),
            failure,
            walked: Vec::with_capacity(2),
            repair_steps: 0,
            extensions,
            rung: (PolicyKey::Execution, 0),
            start: None,
        }
    }

    /// A walk for a call of a resumed run: the repairs it already spent stay spent, and the
    /// arguments a fixer wrote are the ones sent.
    pub(super) fn resumed(mut self, progress: &CallProgress) -> Self {
        self.repair_steps = progress.repair_steps;
        if let Some(arguments) = &progress.arguments {
            self.raw = Cow::Owned(arguments.clone());
        }
        self
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
                    Next::Done(handled) => return handled,
                    Next::Stop(reason) => return Handled::stop(reason, self.failure),
                    Next::Down => {}
                    Next::Switch => continue 'ladders,
                }
            }
            return Handled::default_fate(self.ctx, self.tool.name(), self.failure);
        }
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
        self.failure = failure;
        !self.walked.contains(&self.entry().0)
    }

    async fn rung(&mut self, action: &Action) -> Next {
        match action {
            Action::Retry(retry) => self.retry(retry).await,
            Action::Fix(fix) => self.fix(fix).await,
            Action::Fallback { tool } => self.fallback(tool).await,
            Action::Escalate => self.escalate(),
            Action::Throw => self.throw(),
            Action::Degrade => self.degrade(),
        }
    }

    /// `retry(n)`: call again while the failure is retryable, the schedule allows and the
    /// retry budget (if the run has one) pays for it; a server's `Retry-After` replaces the
    /// computed delay.
    ///
    /// In a durable run the call's place is saved before each sleep and again before the
    /// attempt after it, so a crash in either is told apart on resume.
    async fn retry(&mut self, retry: &RetryAction) -> Next {
        let mut rung = RetryRung {
            retrier: Retrier::new(retry.schedule().delays()),
            retries: 0,
            resumed_delay: None,
            walk: self,
        };
        if let Some((_, _, drawn, delay)) = rung.walk.start.take() {
            rung.retrier.skip(drawn);
            rung.retries = drawn;
            rung.resumed_delay = Some(delay);
        }
        // The call already failed: the loop starts by asking the rung whether to call again.
        crate::retry::retry(&mut rung, ())
            .await
            .unwrap_or(Next::Down)
    }

    /// The retry rung being walked, having drawn `retries`.
    fn retry_place(&self, retries: u32) -> RetryPlace {
        let limit = self.ctx.limits().max_message_chars;
        RetryPlace {
            key: self.rung.0.as_str().to_owned(),
            rung: self.rung.1,
            retries,
            kind: self.failure.class.kind,
            message: scrub(&self.failure.message(), limit),
        }
    }

    /// Records the call's place on this retry rung: asleep for `backoff`, or about to call.
    async fn save_retry(&self, retries: u32, backoff: Option<Duration>) -> bool {
        if !self.ctx.recorder().records() {
            return true;
        }
        self.save(Some(self.retry_place(retries)), backoff).await
    }

    /// Records how far the call got; false when the save failed and the call must stop here.
    async fn save(&self, retry: Option<RetryPlace>, backoff: Option<Duration>) -> bool {
        let recorder = self.ctx.recorder();
        if !recorder.records() {
            return true;
        }
        let progress = CallProgress {
            attempts: self.failure.attempts,
            repair_steps: self.repair_steps,
            arguments: match &self.raw {
                Cow::Owned(raw) => Some(raw.clone()),
                Cow::Borrowed(_) => None,
            },
            retry,
            backoff_ms: backoff.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        };
        recorder.progress(&self.call.id, progress, self.ctx).await
    }

    /// `fix(agent = ..)`: ask the fixer for new arguments (and call again) or for a result.
    async fn fix(&mut self, fix: &FixAction) -> Next {
        let Some(fixer) = self.registry.fixer(&fix.agent) else {
            return Next::Down;
        };
        let key = self.entry().0;
        for attempt_no in 1..=fix.retries.get() {
            if self.repair_steps >= self.ctx.limits().max_repair_steps {
                break;
            }
            self.repair_steps += 1;
            let request = self.fix_request(key, attempt_no);
            let next = match ask(fixer, request).await {
                Ok(Ok(Fix::Result(value))) => {
                    self.fixed(fixer, attempt_no);
                    let output = to_output(&value).unwrap_or_else(|_| value.to_string());
                    Next::Done(Handled::Ok(output))
                }
                Ok(Ok(Fix::Args(new_raw))) => self.rerun_fixed(fixer, attempt_no, new_raw).await,
                Ok(Err(FixerError::Escalate { reason, severity })) => {
                    let kind = self.failure.class.kind;
                    let tool = self.tool.name();
                    Next::Done(Handled::escalate(self.ctx, tool, kind, &reason, severity))
                }
                Ok(Err(FixerError::Throw(reason))) => {
                    let reason = scrub(&reason, self.ctx.limits().max_message_chars);
                    Next::Stop(TerminationReason::Thrown(reason))
                }
                Ok(Err(FixerError::Other(error))) => {
                    let error = scrub(&error.to_string(), self.ctx.limits().max_message_chars);
                    let (tool, fixer) = (self.tool.name(), fixer.name());
                    tracing::warn!(tool, fixer, attempt = attempt_no, %error, "fixer failed");
                    Next::Down
                }
                Err(panic) => {
                    let (tool, fixer) = (self.tool.name(), fixer.name());
                    let error = scrub(&panic.to_string(), self.ctx.limits().max_message_chars);
                    tracing::warn!(tool, fixer, attempt = attempt_no, %error, "fixer panicked");
                    Next::Down
                }
            };
            // `Down` here means "this try did not help": the next try of the same fixer.
            if !matches!(next, Next::Down) {
                return next;
            }
        }
        Next::Down
    }

    fn fix_request(&self, key: PolicyKey, attempt: u32) -> FixRequest {
        FixRequest {
            tool: self.tool.name().to_owned(),
            raw_args: self.raw.to_string(),
            args: serde_json::from_str(&self.raw).ok(),
            failure: scrub(&self.failure.message(), self.ctx.limits().max_message_chars),
            kind: self.failure.class.kind,
            key,
            attempt,
            context: self.extensions.clone(),
        }
    }

    /// Calls the tool again with the arguments a fixer wrote, once they pass the gate: a fixer
    /// chooses what the tool receives no more than the model does.
    async fn rerun_fixed(&mut self, fixer: &FixerDef, attempt_no: u32, new_raw: String) -> Next {
        self.raw = Cow::Owned(new_raw);
        match gate::pass(self.ctx, self.tool, self.call, &self.raw) {
            Ok(()) => {}
            Err(Refused::Unavailable(handled) | Refused::Denied(handled)) => {
                return Next::Done(handled);
            }
            Err(Refused::Invalid(error)) => {
                let attempts = self.failure.attempts;
                return self.after_failure(error, attempts);
            }
        }
        self.failure.attempts += 1;
        if !self.save(None, None).await {
            return Next::Done(Handled::Cancelled);
        }
        match attempt(self.ctx, self.tool, &self.raw, &self.extensions).await {
            Ok(output) => {
                self.fixed(fixer, attempt_no);
                Next::Done(Handled::Ok(output))
            }
            Err(Missed::Failed(error)) => {
                let attempts = self.failure.attempts;
                self.after_failure(error, attempts)
            }
            Err(Missed::Tripped { failures }) => self.tripped(self.tool.name(), failures),
        }
    }

    fn fixed(&self, fixer: &FixerDef, attempt: u32) {
        self.ctx.events().emit(Event::ToolFixed {
            tool: self.tool.name().to_owned(),
            fixer: fixer.name().to_owned(),
            attempt,
        });
    }

    /// `fallback(tool = ..)`: call another tool once with the same arguments, outside its own
    /// policy. The arguments pass the gate as the fallback's: an unavailable fallback is
    /// skipped, a denied one answers the call as a denial. Auth ends the run, naming the
    /// fallback; any other failure goes on down the ladder.
    async fn fallback(&mut self, target: &str) -> Next {
        let Some(fallback) = self.registry.tool(target) else {
            return Next::Down;
        };
        match gate::pass(self.ctx, fallback, self.call, &self.raw) {
            Ok(()) => {}
            Err(Refused::Unavailable(_)) => return Next::Down,
            Err(Refused::Denied(handled)) => return Next::Done(handled),
            Err(Refused::Invalid(error)) => {
                self.failure = Failure::new(error, self.failure.attempts, self.ctx.classifier());
                self.failure.blamed = Some(fallback.name().to_owned());
                return Next::Down;
            }
        }
        self.ctx.events().emit(Event::FellBack {
            tool: self.tool.name().to_owned(),
            to: fallback.name().to_owned(),
        });
        self.failure.attempts += 1;
        if !self.save(None, None).await {
            return Next::Done(Handled::Cancelled);
        }
        match attempt(self.ctx, fallback, &self.raw, &self.extensions).await {
            Ok(output) => Next::Done(Handled::Ok(output)),
            Err(Missed::Tripped { failures }) => self.tripped(fallback.name(), failures),
            Err(Missed::Failed(error)) => {
                self.failure = Failure::new(error, self.failure.attempts, self.ctx.classifier());
                self.failure.blamed = Some(fallback.name().to_owned());
                if self.failure.class.kind == ErrorKind::Auth {
                    return Next::Stop(TerminationReason::Auth);
                }
                Next::Down
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
        let reason = scrub(&self.failure.message(), self.ctx.limits().max_message_chars);
        Next::Stop(TerminationReason::Thrown(reason))
    }

    /// `degrade`: drop the tool for the rest of the run and tell the model to go on without it.
    fn degrade(&mut self) -> Next {
        let tool = self.tool.name();
        self.ctx.degrade(tool);
        self.ctx.events().emit(Event::Degraded {
            tool: tool.to_owned(),
        });
        let limit = self.ctx.limits().max_message_chars;
        let kind = self.failure.class.kind;
        let surfaced = SurfacedError::bounded(tool, kind, &self.failure.message(), limit)
            .with_suggestion(format!(
                "`{tool}` is unavailable for the rest of this run. Continue without it."
            ));
        Next::Done(Handled::Error(surfaced))
    }

    /// A retry or repair failed again: a new key's ladder, or the next rung of this one.
    fn after_failure(&mut self, error: impl Into<Failed>, attempts: u32) -> Next {
        if self.failed_again(Failure::new(error, attempts, self.ctx.classifier())) {
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

/// The retry rung as a policy of the retry loop. The failure in hand is the walk's own (a new
/// failure of the same key replaces it), so the loop's error carries nothing.
struct RetryRung<'w, 'a, D> {
    walk: &'w mut Walk<'a>,
    retrier: Retrier<D>,
    /// Retries drawn on this rung, counting those a resumed call had drawn.
    retries: u32,
    /// The delay a resumed call was sleeping when its run stopped: slept before anything else.
    resumed_delay: Option<Duration>,
}

impl<D: Iterator<Item = Duration>> Policy for RetryRung<'_, '_, D> {
    /// How the rung ended when it answered or switched keys.
    type Output = Next;
    /// The call failed again on this key; the walk holds the failure.
    type Error = ();

    async fn call(&mut self) -> Result<Next, ()> {
        let walk = &mut *self.walk;
        match attempt(walk.ctx, walk.tool, &walk.raw, &walk.extensions).await {
            Ok(output) => Ok(Next::Done(Handled::Ok(output))),
            Err(Missed::Tripped { failures }) => Ok(walk.tripped(walk.tool.name(), failures)),
            Err(Missed::Failed(error)) => {
                let attempts = walk.failure.attempts;
                match walk.after_failure(error, attempts) {
                    Next::Switch => Ok(Next::Switch),
                    _ => Err(()),
                }
            }
        }
    }

    async fn retry(&mut self, (): &()) -> Step {
        if let Some(delay) = self.resumed_delay.take() {
            return Step::Wait(delay);
        }
        let walk = &mut *self.walk;
        let class = &walk.failure.class;
        let step = self
            .retrier
            .after_failure(class.is_retryable(), class.retry_after);
        let Step::Wait(delay) = step else {
            return step;
        };
        if !spend_retry(walk.ctx, walk.tool).await {
            return Step::Stop(Stop::Exhausted);
        }
        walk.ctx.events().emit(Event::ToolRetry {
            tool: walk.tool.name().to_owned(),
            attempt: walk.failure.attempts,
            kind: class.kind,
            delay,
        });
        self.retries += 1;
        walk.failure.attempts += 1;
        step
    }

    async fn before_sleep(&mut self, delay: Duration) -> ControlFlow<Next> {
        self.saved(Some(delay)).await
    }

    async fn before_call(&mut self) -> ControlFlow<Next> {
        self.saved(None).await
    }
}

impl<D> RetryRung<'_, '_, D> {
    /// Saves the call's place (asleep for `backoff`, or about to call) when the run is
    /// durable; a failed save stops the call here.
    async fn saved(&self, backoff: Option<Duration>) -> ControlFlow<Next> {
        if self.walk.save_retry(self.retries, backoff).await {
            ControlFlow::Continue(())
        } else {
            ControlFlow::Break(Next::Done(Handled::Cancelled))
        }
    }
}

/// Asks a fixer, catching a panic whether the fixer is sync (panics when called) or async
/// (panics when polled).
async fn ask(fixer: &FixerDef, request: FixRequest) -> Result<Result<Fix, FixerError>, ToolPanic> {
    let answer = match std::panic::catch_unwind(AssertUnwindSafe(|| fixer.fix(request))) {
        Ok(future) => AssertUnwindSafe(future).catch_unwind().await,
        Err(payload) => Err(payload),
    };
    answer.map_err(ToolPanic::from_payload)
}

/// Pays for one retry of `tool` from the run's own allowance and, when the run shares one, the
/// fleet's retry budget; a refusal is an event.
async fn spend_retry(ctx: &RunContext, tool: &ToolDef) -> bool {
    let paid = ctx.retries().try_spend()
        && match ctx.retry_budget() {
            None => true,
            Some(budget) => budget.try_spend_retry(tool.breaker_key()).await,
        };
    if paid {
        return true;
    }
    ctx.events().emit(Event::RetryBudgetExhausted {
        tool: tool.name().to_owned(),
    });
    false
}
