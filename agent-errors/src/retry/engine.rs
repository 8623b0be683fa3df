//! What every retry in the crate shares: the stop rule, the retry count, the sleep, and the
//! public [`retry_after_failure`] (a policy of the one loop in [`policy`](super::policy)).

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::time::Instant;

use super::policy::{self, Policy};
use crate::classify::Classification;

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
    #[cfg(any(feature = "restate", feature = "openai", feature = "anthropic"))]
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

/// Told before each retry sleep.
///
/// # Examples
///
/// Logging each retry of a call of your own:
///
/// ```
/// use agent_errors::{HttpError, classify::classify};
/// use agent_errors::retry::{RetryNotice, RetrySchedule, retry_after_failure};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let mut seen = Vec::new();
/// let result = retry_after_failure(
///     &RetrySchedule::attempts(3).unwrap(),
///     HttpError::new(503, "busy"),
///     || async { Ok::<_, HttpError>("fresh data") },
///     |e| classify(e),
///     |_error, notice: &RetryNotice| seen.push((notice.attempt, notice.classification.kind)),
/// )
/// .await;
/// assert_eq!(result.unwrap(), "fresh data");
/// assert_eq!(seen.len(), 1); // one sleep, after the first failure
/// # }
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RetryNotice {
    /// The attempt that just failed (1-based).
    pub attempt: u32,
    /// How long we sleep before the next one.
    pub delay: Duration,
    /// What the failure was classified as.
    pub classification: Classification,
}

/// Retrying ended without success.
///
/// # Examples
///
/// ```
/// use agent_errors::{HttpError, classify::classify};
/// use agent_errors::retry::{RetrySchedule, retry_after_failure};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let failure = retry_after_failure(
///     &RetrySchedule::attempts(3).unwrap(),
///     HttpError::new(503, "busy"),
///     || async { Err::<(), _>(HttpError::new(503, "still busy")) },
///     |e| classify(e),
///     |_, _| {},
/// )
/// .await
/// .unwrap_err();
/// // Worth retrying, but the schedule ran out:
/// assert!(failure.exhausted);
/// assert_eq!(failure.attempts, 3);
/// assert_eq!(failure.into_error().message(), "still busy");
/// # }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub struct RetryFailure<E> {
    /// The last error.
    pub error: E,
    /// How many calls were made in all, counting the first.
    pub attempts: u32,
    /// What the last error was classified as.
    pub classification: Classification,
    /// True when the last failure was retryable but the schedule ran out; false when it was not
    /// worth retrying at all.
    pub exhausted: bool,
}

impl<E> RetryFailure<E> {
    /// The last error.
    pub fn into_error(self) -> E {
        self.error
    }
}

impl<E: fmt::Display> fmt::Display for RetryFailure<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let plural = if self.attempts == 1 { "" } else { "s" };
        write!(
            f,
            "failed after {} attempt{plural}: {}",
            self.attempts, self.error
        )
    }
}

impl<E: std::error::Error + 'static> std::error::Error for RetryFailure<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// The call already failed once with `first_error`: call `op` again while the failure is
/// retryable and the schedule has a delay left, sleeping between calls (see the
/// [module docs](super)).
///
/// `schedule` is a [`&RetrySchedule`](super::RetrySchedule) or any iterator of delays (one per
/// retry; it alone bounds the number of calls), such as `FromBackoff` with the `backoff`
/// feature. `notify` is told before every sleep. On success the value is returned; otherwise the
/// last error, with the number of calls made.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use agent_errors::{ErrorKind, HttpError, classify::classify, retry::RetrySchedule};
/// use agent_errors::retry::retry_after_failure;
///
/// let schedule = RetrySchedule::attempts(3).unwrap();
/// let failure = retry_after_failure(
///     &schedule,
///     HttpError::new(401, "token expired"),
///     || async { Ok::<(), HttpError>(()) },
///     |e| classify(e),
///     |_, _| {},
/// )
/// .await
/// .unwrap_err();
/// // An expired token is called once, not three times.
/// assert_eq!((failure.attempts, failure.classification.kind), (1, ErrorKind::Auth));
/// # }
/// ```
pub async fn retry_after_failure<S, T, E, F, Fut>(
    schedule: S,
    first_error: E,
    op: F,
    classify: impl Fn(&E) -> Classification,
    notify: impl FnMut(&E, &RetryNotice),
) -> Result<T, RetryFailure<E>>
where
    S: IntoIterator<Item = Duration>,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let mut policy = AfterFailure {
        retrier: Retrier::new(schedule),
        op,
        classify,
        notify,
        last: None,
    };
    match policy::retry(&mut policy, first_error).await {
        Ok(value) => Ok(value),
        Err(error) => {
            let (classification, stop) = policy
                .last
                .unwrap_or_else(|| ((policy.classify)(&error), Stop::Never));
            Err(RetryFailure {
                error,
                attempts: policy.retrier.failures(),
                classification,
                exhausted: stop != Stop::Never,
            })
        }
    }
}

/// [`retry_after_failure`] as a policy of the retry loop.
struct AfterFailure<D, F, C, N> {
    retrier: Retrier<D>,
    op: F,
    classify: C,
    notify: N,
    /// The last failure's classification, and why the loop stopped (when it did).
    last: Option<(Classification, Stop)>,
}

impl<D, F, Fut, T, E, C, N> Policy for AfterFailure<D, F, C, N>
where
    D: Iterator<Item = Duration>,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    C: Fn(&E) -> Classification,
    N: FnMut(&E, &RetryNotice),
{
    type Output = T;
    type Error = E;

    async fn call(&mut self) -> Result<T, E> {
        (self.op)().await
    }

    async fn retry(&mut self, error: &E) -> Step {
        let classification = (self.classify)(error);
        let retryable = classification.is_retryable();
        let step = self
            .retrier
            .after_failure(retryable, classification.retry_after);
        match step {
            Step::Wait(delay) => {
                let notice = RetryNotice {
                    attempt: self.retrier.failures(),
                    delay,
                    classification,
                };
                (self.notify)(error, &notice);
            }
            Step::Stop(stop) => self.last = Some((classification, stop)),
            Step::Again => {}
        }
        step
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
