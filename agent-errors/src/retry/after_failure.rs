//! The public retry of a call that already failed once: [`retry_after_failure`], a policy of
//! the crate's one retry loop, what it tells before each sleep ([`RetryNotice`]) and how it
//! ends without success ([`RetryFailure`]).

use std::fmt;
use std::future::Future;
use std::time::Duration;

use super::engine::{Retrier, Step, Stop};
use super::policy::{self, Policy};
use crate::classify::Classification;

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
