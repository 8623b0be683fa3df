//! Retry budgets: retries allowed as a fraction of recent calls, so that when an upstream goes
//! down the retries of every run (and every process) together add a bounded share of load
//! instead of multiplying it.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use crate::error::BoxFuture;

/// The sliding window is this many buckets: old calls leave it a tenth of a window at a time.
pub(crate) const BUCKETS: usize = 10;

/// A budget's settings were out of range.
///
/// # Examples
///
/// Settings read from configuration are checked when the budget is made:
///
/// ```
/// use std::time::Duration;
/// use agent_errors::retry::{BudgetError, RetryBudget};
///
/// let refused = RetryBudget::new(0.2, Duration::from_millis(1)).err();
/// let why = match refused {
///     Some(BudgetError::Ratio(ratio)) => format!("ratio {ratio} is not a share"),
///     Some(BudgetError::Window(window)) => format!("window {window:?} is too short"),
///     Some(other) => other.to_string(), // the enum is non-exhaustive
///     None => "fine".to_owned(),
/// };
/// assert_eq!(why, "window 1ms is too short");
/// ```
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum BudgetError {
    /// The ratio was negative, or not a number.
    #[error("the retry ratio must be a finite number of at least 0 (0.2 allows 20%), got {0}")]
    Ratio(f64),
    /// The window was shorter than its buckets can measure.
    #[error("the retry budget's window must be at least 10ms, got {0:?}")]
    Window(Duration),
}

/// Retries allowed per key (a tool's breaker key) as a fraction of the calls made in a sliding
/// window, with a floor so that low traffic can still retry: at most
/// `max(min_retries, ratio × calls)` retries per `window`.
///
/// Every first attempt of a tool is [recorded](RetryBudget::record_call); every retry must be
/// [paid for](RetryBudget::try_spend_retry) and is not made when the budget refuses it (the
/// ladder goes on to its next rung and the run records a `retry_budget_exhausted` event).
/// Kept in this process by default; with the `redis` feature it can be shared by a fleet
/// (`RetryBudget::shared_on`).
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use std::time::Duration;
/// use agent_errors::retry::RetryBudget;
///
/// let budget = RetryBudget::new(0.2, Duration::from_secs(10)).unwrap().with_min_retries(0);
/// for _ in 0..10 {
///     budget.record_call("weather-api");
/// }
/// assert!(budget.try_spend_retry("weather-api").await);
/// assert!(budget.try_spend_retry("weather-api").await);
/// assert!(!budget.try_spend_retry("weather-api").await); // 20% of 10 calls is 2 retries
/// # }
/// ```
pub struct RetryBudget {
    pub(crate) limits: BudgetLimits,
    pub(crate) local: LocalBudget,
    /// The fleet's window, when the budget is shared (see `RetryBudget::shared_on`).
    pub(crate) shared: Option<Box<dyn SharedWindow>>,
}

impl fmt::Debug for RetryBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("RetryBudget");
        d.field("limits", &self.limits);
        d.field("shared", &self.shared.is_some());
        d.finish_non_exhaustive()
    }
}

/// How many retries a window allows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct BudgetLimits {
    pub(crate) ratio: f64,
    pub(crate) window: Duration,
    pub(crate) min_retries: u32,
}

impl BudgetLimits {
    /// Retries allowed after `calls` calls in the window.
    pub(crate) fn allowed(&self, calls: u64) -> u64 {
        // The ratio is finite and non-negative, so the product is too; `as` saturates.
        let share = (calls as f64 * self.ratio).floor() as u64;
        share.max(u64::from(self.min_retries))
    }

    pub(crate) fn bucket(&self) -> Duration {
        self.window / BUCKETS as u32
    }
}

impl Default for RetryBudget {
    /// 20% of the calls over 10 s, at least 3 retries per window.
    fn default() -> Self {
        RetryBudget::new(0.2, Duration::from_secs(10)).expect("20% over 10s is in range")
    }
}

impl RetryBudget {
    /// Allows retries up to `ratio` of the calls made over the last `window` (and at least 3
    /// per window: see [`RetryBudget::with_min_retries`]), kept in this process.
    pub fn new(ratio: f64, window: Duration) -> Result<Self, BudgetError> {
        if !ratio.is_finite() || ratio < 0.0 {
            return Err(BudgetError::Ratio(ratio));
        }
        if window < Duration::from_millis(10) {
            return Err(BudgetError::Window(window));
        }
        let limits = BudgetLimits {
            ratio,
            window,
            min_retries: 3,
        };
        Ok(RetryBudget {
            limits,
            local: LocalBudget::new(limits),
            shared: None,
        })
    }

    /// Sets the retries a window always allows, however few the calls: with no floor, a tool
    /// called once a minute could never retry.
    #[must_use]
    pub fn with_min_retries(mut self, min_retries: u32) -> Self {
        self.limits.min_retries = min_retries;
        self.local = LocalBudget::new(self.limits);
        self
    }

    /// The fraction of calls that may be retried.
    pub fn ratio(&self) -> f64 {
        self.limits.ratio
    }

    /// The sliding window.
    pub fn window(&self) -> Duration {
        self.limits.window
    }

    /// The retries a window always allows.
    pub fn min_retries(&self) -> u32 {
        self.limits.min_retries
    }

    /// Counts a call (a first attempt, not a retry) of `key`. Never waits: a shared budget
    /// sends its counts in batches.
    pub fn record_call(&self, key: &str) {
        self.local.record_call(key);
        if let Some(shared) = &self.shared {
            shared.record_call(key);
        }
    }

    /// Takes one retry of `key` from the budget; false when the window's retries are used up
    /// and the retry must not be made. A shared budget asks its store (bounded by the store's
    /// command timeout) and decides locally when the store cannot answer.
    pub async fn try_spend_retry(&self, key: &str) -> bool {
        if let Some(shared) = &self.shared {
            // The local window is charged too, so it is current if the store goes away.
            let local = self.local.try_spend(key);
            return shared.try_spend(key, self.limits).await.unwrap_or(local);
        }
        self.local.try_spend(key)
    }
}

/// A window many processes spend from together (Redis, with the `redis` feature): the budget
/// reaches its store through this, as a service breaker reaches its [`BreakerStore`](crate::breaker::BreakerStore).
pub(crate) trait SharedWindow: Send + Sync + 'static {
    /// Counts a call of `key`; never waits (a store may send counts in batches).
    fn record_call(&self, key: &str);

    /// Takes a retry of `key` from the shared window under `limits`; `None` when the store
    /// could not answer, and the budget decides from this process's window instead.
    fn try_spend<'a>(&'a self, key: &'a str, limits: BudgetLimits) -> BoxFuture<'a, Option<bool>>;
}

/// One key's calls and retries, a tenth of the window per bucket.
#[derive(Debug, Clone)]
struct Window {
    /// The bucket number `calls[newest % BUCKETS]` holds.
    newest: u64,
    calls: [u32; BUCKETS],
    retries: [u32; BUCKETS],
}

impl Window {
    fn new(now: u64) -> Self {
        Window {
            newest: now,
            calls: [0; BUCKETS],
            retries: [0; BUCKETS],
        }
    }

    /// Moves the window to bucket `now`, emptying the buckets it slides past.
    fn slide(&mut self, now: u64) {
        let passed = now.saturating_sub(self.newest).min(BUCKETS as u64);
        for step in 1..=passed {
            let slot = ((self.newest + step) % BUCKETS as u64) as usize;
            self.calls[slot] = 0;
            self.retries[slot] = 0;
        }
        self.newest = self.newest.max(now);
    }

    fn slot(&self) -> usize {
        (self.newest % BUCKETS as u64) as usize
    }

    fn totals(&self) -> (u64, u64) {
        let sum = |counts: &[u32; BUCKETS]| counts.iter().map(|&n| u64::from(n)).sum();
        (sum(&self.calls), sum(&self.retries))
    }
}

/// A budget kept in this process.
#[derive(Debug)]
pub(crate) struct LocalBudget {
    limits: BudgetLimits,
    origin: Instant,
    windows: Mutex<HashMap<String, Window>>,
}

impl LocalBudget {
    fn new(limits: BudgetLimits) -> Self {
        LocalBudget {
            limits,
            origin: Instant::now(),
            windows: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Window>> {
        // Each critical section is a few additions on one entry: a panic cannot tear it.
        self.windows.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn bucket_now(&self) -> u64 {
        let bucket = self.limits.bucket().as_nanos().max(1);
        (self.origin.elapsed().as_nanos() / bucket) as u64
    }

    /// Runs `f` on `key`'s window slid to now; allocates only for a key not seen before.
    fn with_window<T>(&self, key: &str, f: impl FnOnce(&mut Window) -> T) -> T {
        let now = self.bucket_now();
        let mut windows = self.lock();
        let window = match windows.get_mut(key) {
            Some(window) => window,
            None => windows.entry(key.to_owned()).or_insert(Window::new(now)),
        };
        window.slide(now);
        f(window)
    }

    pub(crate) fn record_call(&self, key: &str) {
        self.with_window(key, |w| {
            let slot = w.slot();
            w.calls[slot] = w.calls[slot].saturating_add(1);
        });
    }

    pub(crate) fn try_spend(&self, key: &str) -> bool {
        let limits = self.limits;
        self.with_window(key, |w| {
            let (calls, retries) = w.totals();
            if retries >= limits.allowed(calls) {
                return false;
            }
            let slot = w.slot();
            w.retries[slot] = w.retries[slot].saturating_add(1);
            true
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(ratio: f64, min: u32) -> RetryBudget {
        RetryBudget::new(ratio, Duration::from_secs(10))
            .unwrap()
            .with_min_retries(min)
    }

    #[tokio::test(start_paused = true)]
    async fn allows_the_ratio_of_recent_calls_and_no_more() {
        let b = budget(0.2, 0);
        for _ in 0..20 {
            b.record_call("api");
        }
        for _ in 0..4 {
            assert!(b.try_spend_retry("api").await);
        }
        assert!(!b.try_spend_retry("api").await);
        // Another key has its own budget.
        assert!(!b.try_spend_retry("other").await);
    }

    #[tokio::test(start_paused = true)]
    async fn the_floor_lets_low_traffic_retry() {
        let b = budget(0.2, 3);
        b.record_call("api");
        for _ in 0..3 {
            assert!(b.try_spend_retry("api").await);
        }
        assert!(!b.try_spend_retry("api").await);
    }

    #[tokio::test(start_paused = true)]
    async fn calls_and_retries_leave_the_window_as_it_slides() {
        let b = budget(0.5, 0);
        for _ in 0..4 {
            b.record_call("api");
        }
        assert!(b.try_spend_retry("api").await);
        assert!(b.try_spend_retry("api").await);
        assert!(!b.try_spend_retry("api").await);
        // Half a window later the old calls and retries still count.
        tokio::time::advance(Duration::from_secs(5)).await;
        b.record_call("api");
        b.record_call("api");
        assert!(b.try_spend_retry("api").await);
        assert!(!b.try_spend_retry("api").await);
        // A full window after the first calls, only the two later calls and one retry remain.
        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(!b.try_spend_retry("api").await);
        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(
            !b.try_spend_retry("api").await,
            "no calls left in the window"
        );
        b.record_call("api");
        b.record_call("api");
        assert!(b.try_spend_retry("api").await);
    }

    #[test]
    fn bad_settings_are_errors_not_panics() {
        assert_eq!(
            RetryBudget::new(f64::NAN, Duration::from_secs(1))
                .unwrap_err()
                .to_string(),
            "the retry ratio must be a finite number of at least 0 (0.2 allows 20%), got NaN"
        );
        assert!(matches!(
            RetryBudget::new(-0.1, Duration::from_secs(1)),
            Err(BudgetError::Ratio(_))
        ));
        assert!(matches!(
            RetryBudget::new(0.2, Duration::ZERO),
            Err(BudgetError::Window(_))
        ));
    }
}
