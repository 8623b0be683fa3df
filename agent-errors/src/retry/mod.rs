//! The retry engine: one loop, one schedule of delays, one stop rule and one sleep, used by
//! every layer of the crate that calls something again.
//!
//! # One loop, policies around it
//!
//! There is one retry loop. Each layer is a *policy* of it, in the shape of tower's
//! `retry::Policy`: given the failure, the policy may change the request and says how long to
//! wait before the next call, or stops. The loop asks, sleeps, calls, and asks again:
//!
//! | policy | changes the request | stops when |
//! | --- | --- | --- |
//! | a tool's `retry(n)` rung | no | the kind is not retryable, `n` calls were made, the fleet's `RetryBudget` or the run's allowance refuses |
//! | the provider transport | `max_tokens` (once, after a context overflow), the API key (once, after a 401) | the status can't change on retry, 3 requests were made, the allowance refuses |
//! | `FallbackModel` | no (it then calls the fallback) | the failure is not an overload, the primary was called `after` times, the allowance refuses |
//! | `PersistentRetry` | no | waiting can't fix it, the next wait would pass the time cap, the allowance refuses |
//! | `on_llm_error` | no | the handler says so, `max_attempts` calls were made, the allowance refuses |
//! | [`retry_after_failure`] | no | the kind is not retryable, the schedule has no delay left |
//!
//! A durable run saves a tool call's place at the loop's two hooks: before each sleep (asleep
//! for this long) and before the call after it (about to call).
//!
//! # The model-call stack
//!
//! What runs inside what, outermost first, for one model turn of an agent run:
//!
//! ```text
//! agent loop: one model turn
//!  └─ on_llm_error                 Retry { max_attempts: R }: up to R calls of all below
//!      └─ your wrappers, outermost first (as you wrapped them), e.g.
//!          FallbackModel           up to `after` (A) calls of the primary while it is
//!                                  overloaded, then one call of the fallback
//!          PersistentRetry         calls again until its time cap (6 h by default)
//!          └─ provider transport   up to T = 3 HTTP requests per call, plus one after a
//!                                  context overflow and one after a credential refresh
//! ```
//!
//! `on_llm_error` is always outermost (it sees what every wrapper gave up on) and the transport
//! always innermost (it retries one HTTP request). The limits multiply: with
//! `on_llm_error` `retry(3, ..)`, `FallbackModel::after(3)` and the transport's 3, one turn
//! could send 3 × (3 × 3 + 3) = 36 requests.
//!
//! **One budget bounds them all.** Inside an agent run every retry at every layer (a tool's
//! retry, a transport retry, a shrink or refresh, a wrapper's retry, an `on_llm_error` retry)
//! first spends one retry of the run's allowance, [`Limits::max_retries`](crate::Limits)
//! (default 32), which a durable run carries across restarts. So a whole run makes at most
//! `max_retries` retries, however the layers nest: its HTTP requests are at most
//! `model turns + fallback switches + max_retries`, and each tool call is run at most once plus
//! the retries it was allowed. A switch to the fallback model is not a retry (it is the
//! fallback's first call) and spends nothing; with the allowance spent, an overloaded primary
//! goes to the fallback at once. Outside a run (a wrapper or provider used on its own) each
//! layer has only its own limits.
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
//! A policy stops, and the loop returns the last failure, when the first of these holds:
//!
//! - the failure is not worth calling again: its kind is not retryable
//!   ([`ErrorKind::is_retryable`](crate::ErrorKind::is_retryable): `Auth`, `NotFound`,
//!   `Validation`, `Bug` and `Unknown` are tried exactly once), or the server said
//!   `x-should-retry: false` (or the status table did, as for 501);
//! - the schedule has no retry left (`max_attempts` calls were made);
//! - the wait would end after the loop's deadline (only `PersistentRetry` has one);
//! - the run's retry allowance (or, for tools, the fleet's retry budget) has none left.
//!
//! A server's `Retry-After` (capped by whoever read it) replaces the computed delay for that
//! retry, exactly and without jitter: the server named the moment it expects to be ready.
//!
//! Every wait is `tokio::time::sleep` (a provider may be given its own sleeper for tests on real
//! sockets), so tests under `tokio::time::pause()` run instantly and see exact delays.
//!
//! [`retry_after_failure`] runs this loop for a call that already failed once. Its schedule is
//! a [`&RetrySchedule`](RetrySchedule) or any iterator of delays; with the `backoff` feature,
//! `FromBackoff` adapts a `backoff::backoff::Backoff`.

mod after_failure;
mod allowance;
mod engine;
#[cfg(feature = "backoff")]
mod from_backoff;
mod policy;

use std::num::NonZeroU32;
use std::time::Duration;

pub use crate::budget::{BudgetError, RetryBudget};
pub use after_failure::{RetryFailure, RetryNotice, retry_after_failure};
pub(crate) use allowance::{RetryAllowance, RunRetries};
pub(crate) use engine::{Retrier, Sleep, Step, Stop, decide};
#[cfg(feature = "backoff")]
pub use from_backoff::FromBackoff;
pub(crate) use policy::{Policy, call, retry};

/// When to call again: `initial · 2^(n-1)` capped at `max`, plus `0..jitter` of that at random.
///
/// See the [module docs](self) for the exact bounds.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use agent_errors::retry::RetrySchedule;
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
///
/// # Examples
///
/// A count read from configuration is checked where it is turned into a schedule:
///
/// ```
/// use agent_errors::retry::{RetrySchedule, ZeroAttempts};
///
/// let from_config = 0;
/// assert_eq!(RetrySchedule::attempts(from_config), Err(ZeroAttempts));
/// ```
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
