//! The one retry loop of the crate, and the shape of the policies it runs (after tower's
//! `retry::Policy`): given the failure, a policy may change the request and says how long to
//! wait before calling again, or stops. Every layer that calls something again (the tool
//! ladder's retry rung, the provider transport, `FallbackModel`, `PersistentRetry`,
//! `on_llm_error`, [`retry_after_failure`](super::retry_after_failure)) is a policy of this
//! loop; none of them sleeps on its own.

use std::ops::ControlFlow;
use std::time::Duration;

use super::engine::{Sleep, Step};

/// What a layer does between the calls of the retry loop.
///
/// The loop is: `retry` -> (`before_sleep` -> sleep) -> `before_call` -> `call`, until a call
/// succeeds, `retry` stops, or a hook ends the loop with an output of its own.
pub(crate) trait Policy {
    /// What ends the loop: a call's success, or a hook's own answer.
    type Output;
    /// A failed call.
    type Error;

    /// Makes one call with the request as it stands now.
    async fn call(&mut self) -> Result<Self::Output, Self::Error>;

    /// The last call failed with `error`: change the request if that helps, and say how long
    /// to wait before the next call ([`Step::Wait`], or [`Step::Again`] for no wait at all),
    /// or stop. A policy that spends a retry budget spends it here, before saying yes.
    async fn retry(&mut self, error: &Self::Error) -> Step;

    /// About to sleep `delay` before the next call; `Break` ends the loop with that output.
    async fn before_sleep(&mut self, _delay: Duration) -> ControlFlow<Self::Output> {
        ControlFlow::Continue(())
    }

    /// About to make the next call; `Break` ends the loop with that output.
    async fn before_call(&mut self) -> ControlFlow<Self::Output> {
        ControlFlow::Continue(())
    }

    /// How the loop sleeps: tokio's clock unless the layer carries its own.
    fn sleeper(&self) -> Sleep {
        Sleep::default()
    }

    /// The longest single sleep, for a policy that is told after each piece of a long wait
    /// ([`slept`](Policy::slept)); `None` sleeps each wait in one piece.
    fn heartbeat_every(&self) -> Option<Duration> {
        None
    }

    /// A piece of the wait passed: `waited` of it so far, `remaining` still to go.
    fn slept(&mut self, _waited: Duration, _remaining: Duration) {}

    /// The loop ends after at least one failed call: a later call succeeded (`recovered`), or
    /// the policy stopped and `last` goes back to the caller. `last` is the last failure either
    /// way. Not called when a hook ends the loop with an output of its own.
    fn finished(&mut self, _last: &Self::Error, _recovered: bool) {}
}

/// Calls once and, if that fails, goes on as [`retry`] does.
pub(crate) async fn call<P: Policy>(policy: &mut P) -> Result<P::Output, P::Error> {
    match policy.call().await {
        Ok(output) => Ok(output),
        Err(error) => retry(policy, error).await,
    }
}

/// The retry loop: a call already failed with `error`. Asks the policy what next, waits, calls
/// again, until a call succeeds (its output), the policy stops (the last error, as it was), or a
/// hook ends the loop (its output).
pub(crate) async fn retry<P: Policy>(
    policy: &mut P,
    error: P::Error,
) -> Result<P::Output, P::Error> {
    let mut error = error;
    loop {
        match policy.retry(&error).await {
            Step::Stop(_) => {
                policy.finished(&error, false);
                return Err(error);
            }
            Step::Again => {}
            Step::Wait(delay) => {
                if let ControlFlow::Break(output) = policy.before_sleep(delay).await {
                    return Ok(output);
                }
                wait(policy, delay).await;
            }
        }
        if let ControlFlow::Break(output) = policy.before_call().await {
            return Ok(output);
        }
        match policy.call().await {
            Ok(output) => {
                policy.finished(&error, true);
                return Ok(output);
            }
            Err(next) => error = next,
        }
    }
}

/// Waits out `delay`, in pieces when the policy wants a heartbeat.
async fn wait<P: Policy>(policy: &mut P, delay: Duration) {
    let sleeper = policy.sleeper();
    let Some(piece) = policy.heartbeat_every() else {
        return sleeper.sleep(delay).await;
    };
    let mut waited = Duration::ZERO;
    while waited < delay {
        let step = piece.min(delay - waited);
        sleeper.sleep(step).await;
        waited += step;
        policy.slept(waited, delay - waited);
    }
}
