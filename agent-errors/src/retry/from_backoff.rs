//! Interop with the `backoff` crate (feature `backoff`).

use std::num::NonZeroU32;
use std::time::Duration;

/// A `backoff::backoff::Backoff` used as a retry schedule (feature `backoff`).
///
/// For code that already configures the `backoff` crate: pass it to
/// [`retry_after_failure`](super::retry_after_failure). The backoff is reset first, as `backoff::retry` does. Its own
/// limits (such as `max_elapsed_time`) still apply; [`FromBackoff::with_max_attempts`] adds a
/// limit on calls.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use std::num::NonZeroU32;
/// use agent_errors::{HttpError, classify::classify};
/// use agent_errors::retry::{FromBackoff, retry_after_failure};
///
/// let exponential = backoff::ExponentialBackoff::default();
/// let schedule = FromBackoff::new(exponential).with_max_attempts(NonZeroU32::MIN);
/// let failure = retry_after_failure(
///     schedule,
///     HttpError::new(503, "busy"),
///     || async { Ok::<(), HttpError>(()) },
///     |e| classify(e),
///     |_, _| {},
/// )
/// .await
/// .unwrap_err();
/// assert!(failure.exhausted);
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct FromBackoff<B> {
    backoff: B,
    retries_left: Option<u32>,
}

impl<B: backoff::backoff::Backoff> FromBackoff<B> {
    /// Wraps `backoff`, reset to its initial state.
    pub fn new(mut backoff: B) -> Self {
        backoff.reset();
        FromBackoff {
            backoff,
            retries_left: None,
        }
    }

    /// Makes at most `max_attempts` calls in all, counting the first.
    #[must_use]
    pub fn with_max_attempts(mut self, max_attempts: NonZeroU32) -> Self {
        self.retries_left = Some(max_attempts.get() - 1);
        self
    }

    /// The wrapped backoff.
    pub fn into_inner(self) -> B {
        self.backoff
    }
}

impl<B: backoff::backoff::Backoff> Iterator for FromBackoff<B> {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        if let Some(left) = &mut self.retries_left {
            if *left == 0 {
                return None;
            }
            *left -= 1;
        }
        self.backoff.next_backoff()
    }
}
