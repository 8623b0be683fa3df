//! The retry engine: one schedule of delays, one stop rule and one sleep, used by every loop in
//! the crate that calls something again (tool retries, the model-call transport,
//! `FallbackModel`, `PersistentRetry` and `on_llm_error`).
//!
//! # The schedule
//!
//! [`RetrySchedule::default`] makes at most 3 calls in all (`max_attempts` counts the first
//! call). Before retry number *n* (1-based) it waits
//!
//! ```text
//! base(n)  = min(initial · 2^(n-1), max)            initial = 500 ms, max = 32 s
//! delay(n) = base(n) + r · jitter · base(n)          r uniform in [0, 1), jitter = 0.25
//! ```
//!
//! so every delay lies in `[base(n), base(n) · 1.25]`: 500 ms, 1 s, 2 s, ... 32 s, 32 s, plus up
//! to a quarter more. Jitter only ever lengthens a delay, so a server is never called sooner
//! than the exponential curve says, and a crowd of agents that failed together spreads out.
//!
//! # When to stop
//!
//! A loop stops, returning the last failure, when the first of these holds:
//!
//! - the failure is not worth calling again: its kind is not retryable
//!   ([`ErrorKind::is_retryable`](crate::ErrorKind::is_retryable): `Auth`, `NotFound`,
//!   `Validation`, `Bug` and `Unknown` are tried exactly once), or the server said
//!   `x-should-retry: false` (or the status table did, as for 501);
//! - the schedule has no retry left (`max_attempts` calls were made);
//! - the wait would end after the loop's deadline (only `PersistentRetry` has one).
//!
//! A server's `Retry-After` (capped by whoever read it) replaces the computed delay for that
//! retry, exactly and without jitter: the server named the moment it expects to be ready.
//!
//! Every wait is `tokio::time::sleep`, so tests under `tokio::time::pause()` run instantly and
//! see exact delays.
//!
//! [`retry_after_failure`] runs this loop for a call that already failed once. Its schedule is
//! a [`&RetrySchedule`](RetrySchedule) or any iterator of delays; with the `backoff` feature,
//! `FromBackoff` adapts a `backoff::backoff::Backoff`.

mod allowance;
mod engine;
#[cfg(feature = "backoff")]
mod from_backoff;
mod policy;

use std::num::NonZeroU32;
use std::time::Duration;

pub(crate) use allowance::{RetryAllowance, RunRetries};
pub(crate) use engine::{Retrier, Sleep, Step, Stop, decide};
pub use engine::{RetryFailure, RetryNotice, retry_after_failure};
#[cfg(feature = "backoff")]
pub use from_backoff::FromBackoff;
pub(crate) use policy::{Policy, call, retry};

/// When to call again: `initial · 2^(n-1)` capped at `max`, plus `0..jitter` of that at random.
///
/// See the [module docs](self) for the exact bounds.
///
/// ```
/// use std::time::Duration;
/// use agent_errors::RetrySchedule;
///
/// let schedule = RetrySchedule::attempts(5).unwrap().with_jitter(0.0);
/// let delays: Vec<Duration> = schedule.delays().collect();
/// assert_eq!(delays, [500, 1000, 2000, 4000].map(Duration::from_millis));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct RetrySchedule {
    max_attempts: NonZeroU32,
    initial: Duration,
    max: Duration,
    jitter: f64,
}

/// A count of attempts was zero: every count of attempts includes the first call, so it is at
/// least 1. Returned by [`RetrySchedule::attempts`], `LlmErrorDecision::retry` and
/// `FallbackModel::after`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("max_attempts must be at least 1 (it counts the first call)")]
pub struct ZeroAttempts;

impl Default for RetrySchedule {
    fn default() -> Self {
        RetrySchedule {
            max_attempts: NonZeroU32::new(3).expect("3 is not zero"),
            initial: Duration::from_millis(500),
            max: Duration::from_secs(32),
            jitter: 0.25,
        }
    }
}

impl RetrySchedule {
    /// The default schedule (500 ms, capped at 32 s, 25% jitter) with this many attempts.
    pub fn new(max_attempts: NonZeroU32) -> Self {
        RetrySchedule {
            max_attempts,
            ..RetrySchedule::default()
        }
    }

    /// Like [`RetrySchedule::new`], from a plain count.
    pub fn attempts(max_attempts: u32) -> Result<Self, ZeroAttempts> {
        NonZeroU32::new(max_attempts)
            .map(Self::new)
            .ok_or(ZeroAttempts)
    }

    /// Sets the first delay.
    #[must_use]
    pub fn with_initial(mut self, initial: Duration) -> Self {
        self.initial = initial;
        self
    }

    /// Sets the cap on any one computed delay.
    #[must_use]
    pub fn with_max(mut self, max: Duration) -> Self {
        self.max = max;
        self
    }

    /// Sets the jitter as a fraction of the delay (clamped to `0.0..=1.0`); `0.0` disables it.
    #[must_use]
    pub fn with_jitter(mut self, fraction: f64) -> Self {
        self.jitter = if fraction.is_finite() {
            fraction.clamp(0.0, 1.0)
        } else {
            0.0
        };
        self
    }

    /// How many calls at most, counting the first.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts.get()
    }

    /// The delay before retry number `retry` (1-based), without jitter.
    pub fn base_delay(&self, retry: u32) -> Duration {
        let exp = retry.saturating_sub(1).min(31);
        self.initial.saturating_mul(1u32 << exp).min(self.max)
    }

    /// The first delay.
    pub fn initial(&self) -> Duration {
        self.initial
    }

    /// The cap on any one computed delay (before jitter).
    pub fn max(&self) -> Duration {
        self.max
    }

    /// The jitter, as a fraction of the delay.
    pub fn jitter(&self) -> f64 {
        self.jitter
    }

    /// The delay before retry number `retry`, with jitter applied: within
    /// `[base_delay(retry), base_delay(retry) · (1 + jitter)]`.
    pub fn delay(&self, retry: u32) -> Duration {
        let base = self.base_delay(retry);
        if self.jitter == 0.0 {
            return base;
        }
        // Whole nanoseconds, rounded down, so the upper bound holds exactly.
        let extra = (base.as_nanos() as f64 * self.jitter * fastrand::f64()).floor() as u64;
        base.saturating_add(Duration::from_nanos(extra))
    }

    /// The delays before each retry this schedule allows: `max_attempts - 1` of them.
    pub fn delays(&self) -> impl Iterator<Item = Duration> + Clone + Send + Sync + use<> {
        let schedule = self.clone();
        (1..schedule.max_attempts()).map(move |retry| schedule.delay(retry))
    }

    /// The delays of this schedule with no limit on attempts, for loops bounded otherwise.
    pub(crate) fn unbounded_delays(&self) -> impl Iterator<Item = Duration> + use<> {
        let schedule = self.clone();
        (1..=u32::MAX).map(move |retry| schedule.delay(retry))
    }

    /// This schedule with another attempt count.
    pub(crate) fn with_attempts(mut self, max_attempts: NonZeroU32) -> Self {
        self.max_attempts = max_attempts;
        self
    }
}

impl<'a> IntoIterator for &'a RetrySchedule {
    type Item = Duration;
    type IntoIter = Box<dyn Iterator<Item = Duration> + Send + Sync + 'a>;

    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.delays())
    }
}
