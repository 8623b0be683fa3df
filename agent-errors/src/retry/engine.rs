//! What every retry in the crate shares: the stop rule, the retry count and the sleep. The one
//! loop that runs them is in [`policy`](super::policy); the public
//! [`retry_after_failure`](super::retry_after_failure), a policy of that loop, in
//! `after_failure.rs`.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::time::Instant;

/// Why a retry loop ends without another call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// The failure is not one that calling again can fix.
    Never,
    /// The schedule has no retry left.
    Exhausted,
    /// The wait would end after the deadline.
    Deadline,
}

/// What a retry loop does after a failed call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Sleep this long, then call again.
    Wait(Duration),
    /// Call again at once: the request was changed (a smaller `max_tokens`, a fresh key), or
    /// the call will be refused without reaching its service (an open circuit), so there is
    /// nothing to wait for.
    Again,
    /// Give up.
    Stop(Stop),
}

/// The one stop rule. `retryable` is what the classification (or a provider's rule built on it)
/// says; `computed` is the schedule's next delay, `None` once the budget is used up; a server's
/// `Retry-After` (already capped by whoever read it) replaces the computed delay exactly, since
/// the server named the moment it expects to be ready.
pub(crate) fn decide(
    retryable: bool,
    computed: Option<Duration>,
    server_delay: Option<Duration>,
    deadline: Option<Instant>,
) -> Step {
    if !retryable {
        return Step::Stop(Stop::Never);
    }
    let Some(computed) = computed else {
        return Step::Stop(Stop::Exhausted);
    };
    let delay = server_delay.unwrap_or(computed);
    let fits = deadline.is_none_or(|deadline| {
        Instant::now()
            .checked_add(delay)
            .is_some_and(|wake| wake <= deadline)
    });
    if fits {
        Step::Wait(delay)
    } else {
        Step::Stop(Stop::Deadline)
    }
}

/// A retry loop's state: the delays left and how many calls failed so far.
#[derive(Debug)]
pub(crate) struct Retrier<D> {
    delays: D,
    failures: u32,
    deadline: Option<Instant>,
}

impl<D: Iterator<Item = Duration>> Retrier<D> {
    /// A loop whose budget is `delays`: one delay per retry, ending when none is left.
    pub(crate) fn new(delays: impl IntoIterator<IntoIter = D>) -> Self {
        Retrier {
            delays: delays.into_iter(),
            failures: 0,
            deadline: None,
        }
    }

    /// Refuses any wait that would end after `deadline`.
    pub(crate) fn with_deadline(mut self, deadline: Option<Instant>) -> Self {
        self.deadline = deadline;
        self
    }

    /// A call failed: what next, by [`decide`]. The schedule's delay is drawn only for a failure
    /// worth retrying, so a `Retry-After` still uses up one retry of the budget.
    pub(crate) fn after_failure(
        &mut self,
        retryable: bool,
        server_delay: Option<Duration>,
    ) -> Step {
        self.failures = self.failures.saturating_add(1);
        let computed = if retryable { self.delays.next() } else { None };
        decide(retryable, computed, server_delay, self.deadline)
    }

    /// Passes over the first `retries` delays: retries a resumed loop already made.
    pub(crate) fn skip(&mut self, retries: u32) {
        for _ in 0..retries {
            if self.delays.next().is_none() {
                break;
            }
            self.failures = self.failures.saturating_add(1);
        }
    }

    /// How many calls have failed.
    pub(crate) fn failures(&self) -> u32 {
        self.failures
    }
}

type SleepFn = dyn Fn(Duration) -> BoxFuture<'static, ()> + Send + Sync;

/// How a retry loop waits: `tokio::time::sleep`, so paused test time drives every loop. A
/// provider tested against a real socket cannot pause time (tokio would fire its request
/// timeout whenever the runtime idles on I/O), so it may carry a replacement.
#[derive(Clone, Default)]
pub(crate) struct Sleep(Option<Arc<SleepFn>>);

impl Sleep {
    /// Waits with `sleep` instead of tokio's clock: an engine's durable sleep, or a provider's
    /// replacement.
    #[cfg(any(feature = "restate", feature = "_provider"))]
    pub(crate) fn with<F, Fut>(sleep: F) -> Self
    where
        F: Fn(Duration) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        Sleep(Some(Arc::new(move |delay| Box::pin(sleep(delay)))))
    }

    /// Waits out `delay`.
    pub(crate) async fn sleep(&self, delay: Duration) {
        match &self.0 {
            Some(sleep) => sleep(delay).await,
            None => tokio::time::sleep(delay).await,
        }
    }
}

impl fmt::Debug for Sleep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "Sleep(custom)"
        } else {
            "Sleep(tokio)"
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn the_stop_rule_checks_retryability_then_budget_then_deadline() {
        assert_eq!(
            decide(false, Some(S(1)), None, None),
            Step::Stop(Stop::Never)
        );
        assert_eq!(
            decide(true, None, Some(S(1)), None),
            Step::Stop(Stop::Exhausted)
        );
        assert_eq!(decide(true, Some(S(1)), Some(S(7)), None), Step::Wait(S(7)));
        assert_eq!(decide(true, Some(S(1)), None, None), Step::Wait(S(1)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_past_the_deadline_is_refused() {
        let deadline = Some(Instant::now() + S(10));
        assert_eq!(decide(true, Some(S(10)), None, deadline), Step::Wait(S(10)));
        assert_eq!(
            decide(true, Some(S(1)), Some(S(11)), deadline),
            Step::Stop(Stop::Deadline)
        );
    }

    #[test]
    fn a_non_retryable_failure_leaves_the_budget_alone() {
        let mut retrier = Retrier::new([S(1)]);
        assert_eq!(retrier.after_failure(false, None), Step::Stop(Stop::Never));
        assert_eq!(retrier.after_failure(true, None), Step::Wait(S(1)));
        assert_eq!(
            retrier.after_failure(true, None),
            Step::Stop(Stop::Exhausted)
        );
        assert_eq!(retrier.failures(), 3);
    }
}
