//! The `retry(n)` rung: the failed call made again, as a policy of the crate's one retry loop,
//! each retry paid for by the run's allowance (and the fleet's budget when it shares one), and
//! its place recorded before each sleep and each call so a resumed run goes on from it.

use std::ops::ControlFlow;
use std::time::Duration;

use super::{Next, Sending, Walk};
use crate::breaker::BreakerState;
use crate::classify::{Classification, ErrorKind, Evidence, never_reached};
use crate::error::ToolError;
use crate::events::Event;
use crate::executor::attempt::attempt;
use crate::executor::context::RunContext;
use crate::executor::failure::{Failed, MayHaveTakenEffect};
use crate::executor::outcome::Failure;
use crate::executor::outcome::Handled;
use crate::executor::resume::CallInterrupted;
use crate::executor::resume::RetryPlace;
use crate::policy::RetryAction;
use crate::retry::{Policy, Retrier, Step, Stop};
use crate::sanitize::scrub;
use crate::tool::ToolDef;

impl Walk<'_> {
    /// `retry(n)`: call again while the failure is retryable, the schedule allows and the
    /// retry budget (if the run has one) pays for it; a server's `Retry-After` replaces the
    /// computed delay.
    ///
    /// In a durable run the call's place is saved before each sleep and again before the
    /// attempt after it, so a crash in either is told apart on resume.
    pub(super) async fn retry(&mut self, retry: &RetryAction) -> Next {
        let mut rung = RetryRung {
            retrier: Retrier::new(retry.schedule().delays()),
            retries: 0,
            resumed_delay: None,
            when_safe: retry.when_safe,
            may_have_taken_effect: false,
            walk: self,
        };
        if let Some((_, _, drawn, delay)) = rung.walk.start.take() {
            rung.retrier.skip(drawn);
            rung.retries = drawn;
            rung.resumed_delay = Some(delay);
        }
        // The call already failed: the loop starts by asking the rung whether to call again.
        let next = crate::retry::retry(&mut rung, ()).await;
        if rung.may_have_taken_effect {
            return self.outcome_unknown();
        }
        next.unwrap_or(Next::Down)
    }

    /// The failure in hand may have taken effect and is not retried: it is answered as an
    /// unknown outcome, by the `outcome_unknown` ladder.
    fn outcome_unknown(&mut self) -> Next {
        let failure = std::mem::replace(
            &mut self.failure.error,
            ToolError::execution(self.call.arguments.as_str(), CallInterrupted),
        );
        let error = match failure {
            ToolError::Execution { args, source } => ToolError::Execution {
                args,
                source: Box::new(MayHaveTakenEffect::new(source)),
            },
            other => ToolError::execution(self.raw(), MayHaveTakenEffect::new(other)),
        };
        let mut class = Classification::new(
            ErrorKind::OutcomeUnknown,
            Evidence::Type("MayHaveTakenEffect"),
        );
        class.status = self.failure.class.status;
        let failed = Failed {
            error,
            class: Some(class),
        };
        let attempts = self.failure.attempts;
        self.after_failure(failed, attempts)
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
        if self.nested {
            // A fallback's own retry rung belongs to another tool's ladder: its place would
            // name a rung of the wrong ladder on resume. The attempts made are still saved.
            return self.save(None, None).await;
        }
        self.save_at(|| Some(self.retry_place(retries)), backoff)
            .await
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
    /// `retry(n, when_safe)`: retries only where a second call cannot apply the effect twice.
    when_safe: bool,
    /// Set when the rung stopped because the failure may have taken effect.
    may_have_taken_effect: bool,
}

impl<D: Iterator<Item = Duration>> Policy for RetryRung<'_, '_, D> {
    /// How the rung ended when it answered or switched keys.
    type Output = Next;
    /// The call failed again on this key; the walk holds the failure.
    type Error = ();

    async fn call(&mut self) -> Result<Next, ()> {
        let walk = &mut *self.walk;
        // The same cleared arguments again; arguments not cleared yet pass the gate first.
        let next = match &walk.sending {
            Sending::Cleared(cleared) => {
                let tried = attempt(walk.ctx, cleared, &walk.extensions).await;
                walk.attempted(tried)
            }
            Sending::Unchecked(_) => Box::pin(walk.try_again(None)).await,
        };
        match next {
            Next::Down => Err(()),
            next => Ok(next),
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
            if class.kind == ErrorKind::Unknown {
                say_unknown_is_not_retried(walk.ctx, walk.tool);
            }
            return step;
        };
        if self.when_safe && !repeats_safely(walk.tool, &walk.failure) {
            self.may_have_taken_effect = true;
            return Step::Stop(Stop::Never);
        }
        if circuit_open(walk.ctx, walk.tool) {
            // The failure in hand opened the circuit (or another call did): the retry would be
            // rejected after its sleep, so it is asked now, and the breaker's refusal (which
            // no retry follows) is what the ladder goes on with.
            return Step::Again;
        }
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

    fn sleeper(&self) -> crate::retry::Sleep {
        self.walk.ctx.sleeper()
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

/// A `retry` that never retries because nothing recognised the failure is a silent
/// misconfiguration (a tool returning bare text), so it is said: once per run and tool, as an
/// event and a `tracing` warning naming the tool and what to return instead.
fn say_unknown_is_not_retried(ctx: &RunContext, tool: &ToolDef) {
    let said = ctx.events().snapshot().iter().any(
        |event| matches!(event, Event::UnknownNotRetried { tool: said } if said == tool.name()),
    );
    if !said {
        ctx.events().emit(Event::UnknownNotRetried {
            tool: tool.name().to_owned(),
        });
    }
}

/// Whether calling `tool` again after `failure` cannot apply the call's effect twice: the tool
/// is idempotent or keyed, or the failure shows the request was not carried out: it never
/// reached the service, or the service refused it for a rate limit.
fn repeats_safely(tool: &ToolDef, failure: &Failure) -> bool {
    tool.repeats_safely()
        || failure.class.kind == ErrorKind::Quota
        || never_reached(failure.error.cause())
}

/// Whether the service breaker has the circuit of `tool` open, as it knows without waiting.
fn circuit_open(ctx: &RunContext, tool: &ToolDef) -> bool {
    ctx.hooks()
        .service_breaker()
        .is_some_and(|breaker| breaker.state(tool.breaker_key()) == BreakerState::Open)
}

/// Pays for one retry of `tool` from the run's own allowance and, when the run shares one, the
/// fleet's retry budget; a refusal is an event.
async fn spend_retry(ctx: &RunContext, tool: &ToolDef) -> bool {
    let paid = ctx.retries().try_spend()
        && match ctx.hooks().retry_budget() {
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
