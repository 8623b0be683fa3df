//! The in-process breaker store: the default.

use std::collections::{HashMap, VecDeque};
use std::num::NonZeroU32;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use super::store::{Admission, Admit, BreakerState, BreakerStore, Change, Scope};

#[derive(Debug, Clone, Default)]
struct Circuit {
    failures: u32,
    opened_at: Option<Instant>,
    probing: bool,
    /// The outcomes of the last calls, oldest first (`true`: failed), under a failure-rate rule.
    window: VecDeque<bool>,
}

/// A failure-rate rule: the circuit opens when, among the last `window` calls (and at least
/// `min_calls` of them), `percent`% or more failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FailureRate {
    pub(crate) percent: u8,
    pub(crate) window: NonZeroU32,
    pub(crate) min_calls: NonZeroU32,
}

impl FailureRate {
    /// Whether `window`'s outcomes open the circuit.
    fn opens(&self, window: &VecDeque<bool>) -> bool {
        let calls = window.len() as u64;
        let failed = window.iter().filter(|failed| **failed).count() as u64;
        calls >= u64::from(self.min_calls.get()) && failed * 100 >= u64::from(self.percent) * calls
    }
}

/// Breakers kept in this process: closed, open after `threshold` consecutive failures, one
/// probe after `cooldown`. What every agent uses unless told otherwise.
///
/// # Examples
///
/// ```
/// use std::num::NonZeroU32;
/// use std::time::Duration;
/// use agent_errors::breaker::{BreakerState, BreakerStore, MemoryStore};
///
/// let store = MemoryStore::new(NonZeroU32::new(2).unwrap(), Duration::from_secs(30));
/// store.record("weather-api", false);
/// store.record("weather-api", false);
/// assert_eq!(store.state("weather-api"), BreakerState::Open);
/// ```
#[derive(Debug)]
pub struct MemoryStore {
    threshold: u32,
    /// When set, the circuit opens on this rule instead of `threshold` consecutive failures.
    rate: Option<FailureRate>,
    cooldown: Duration,
    circuits: Mutex<Circuits>,
}

/// The circuits by key, hashed with foldhash: randomly seeded, and a few times cheaper than
/// std's SipHash on a short key, which a failed call and its retry hash four times. A key is a
/// service or tool name the program gave, not text from outside, so the interactive collision
/// attacks SipHash resists (and foldhash does not claim to) have nothing to send it; a circuit
/// is also dropped at the key's next success, so the map holds the keys failing now.
type Circuits = HashMap<String, Circuit, foldhash::fast::RandomState>;

impl MemoryStore {
    /// Opens after `threshold` consecutive failures; lets one probe through after `cooldown`.
    pub fn new(threshold: NonZeroU32, cooldown: Duration) -> Self {
        MemoryStore {
            threshold: threshold.get(),
            rate: None,
            cooldown,
            circuits: Mutex::new(Circuits::default()),
        }
    }

    /// Opens on a failure rate: see [`ServiceBreaker::failure_rate`](super::ServiceBreaker::failure_rate).
    pub(crate) fn with_failure_rate(rate: FailureRate, cooldown: Duration) -> Self {
        MemoryStore {
            threshold: rate.min_calls.get(),
            rate: Some(rate),
            cooldown,
            circuits: Mutex::new(Circuits::default()),
        }
    }

    /// The consecutive failures that open a circuit.
    pub fn threshold(&self) -> NonZeroU32 {
        NonZeroU32::new(self.threshold).expect("built from a NonZeroU32")
    }

    /// How long a circuit stays open before it lets a probe through.
    pub fn cooldown(&self) -> Duration {
        self.cooldown
    }

    fn lock(&self) -> MutexGuard<'_, Circuits> {
        // Every critical section is a lookup and a few field writes: a panic cannot tear it.
        self.circuits.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How long until the open circuit of `key` lets a probe through; `None` when it is not
    /// open.
    pub(crate) fn probe_in(&self, key: &str) -> Option<Duration> {
        let circuits = self.lock();
        let at = circuits.get(key)?.opened_at?;
        Some(self.cooldown.saturating_sub(at.elapsed()))
    }

    /// Asks to call `key` now, answered at once.
    pub(crate) fn admit_now(&self, key: &str) -> Admission {
        let mut circuits = self.lock();
        let Some(c) = circuits.get_mut(key) else {
            return Admission::Allowed;
        };
        match c.opened_at {
            None => Admission::Allowed,
            Some(at) if at.elapsed() >= self.cooldown && !c.probing => {
                c.probing = true;
                drop(circuits);
                Change::HalfOpened.count(key, Scope::Local);
                Admission::Probe
            }
            Some(_) => Admission::Rejected,
        }
    }

    /// Records an outcome; returns the change of state it made, if any.
    pub(crate) fn record_outcome(&self, key: &str, ok: bool) -> Option<Change> {
        if let Some(rate) = self.rate {
            return self.record_in_window(rate, key, ok);
        }
        let mut circuits = self.lock();
        if ok {
            // Skipping the removal when nothing is tracked keeps the happy path to one lookup.
            if circuits.is_empty() {
                return None;
            }
            let removed = circuits.remove(key)?;
            return removed.opened_at.map(|_| Change::Closed);
        }
        let c = circuits.entry(key.to_owned()).or_default();
        c.failures += 1;
        if c.probing || c.failures >= self.threshold {
            // Failures of calls let through before it opened keep it open, but change nothing.
            let opens = c.probing || c.opened_at.is_none();
            c.opened_at = Some(Instant::now());
            c.probing = false;
            return opens.then_some(Change::Opened);
        }
        None
    }

    /// [`record_outcome`](Self::record_outcome) under a failure-rate rule: every call is kept
    /// in the window, successes too, so the rate is over calls and not over failures alone.
    fn record_in_window(&self, rate: FailureRate, key: &str, ok: bool) -> Option<Change> {
        let mut circuits = self.lock();
        if !circuits.contains_key(key) {
            circuits.insert(key.to_owned(), Circuit::default());
        }
        let c = circuits.get_mut(key).expect("inserted above");
        if c.opened_at.is_some() {
            // The probe's outcome (or that of a call let through before it opened) decides.
            let probed = std::mem::take(&mut c.probing);
            if ok {
                *c = Circuit::default();
                return Some(Change::Closed);
            }
            c.opened_at = Some(Instant::now());
            return probed.then_some(Change::Opened);
        }
        if c.window.len() >= rate.window.get() as usize {
            c.window.pop_front();
        }
        c.window.push_back(!ok);
        if !ok && rate.opens(&c.window) {
            // A fresh window after the circuit closes again: old calls judged it already.
            c.window.clear();
            c.opened_at = Some(Instant::now());
            return Some(Change::Opened);
        }
        None
    }

    /// Takes up a circuit a shared store had open until `until` (with this process holding its
    /// probe when `probing`): it stays open here until then, then lets one probe through. A
    /// circuit open here for longer keeps its own time.
    #[cfg(feature = "redis")]
    pub(crate) fn adopt_open(&self, key: &str, until: Instant, probing: bool) {
        let opened_at = until.checked_sub(self.cooldown).unwrap_or(until);
        let mut circuits = self.lock();
        let c = circuits.entry(key.to_owned()).or_default();
        if c.opened_at.is_none_or(|at| at < opened_at) {
            c.opened_at = Some(opened_at);
        }
        c.probing |= probing;
    }

    /// Whether anything has failed for `key` since its last success.
    #[cfg(feature = "redis")]
    pub(crate) fn has_failures(&self, key: &str) -> bool {
        let circuits = self.lock();
        !circuits.is_empty() && circuits.contains_key(key)
    }
}

impl BreakerStore for MemoryStore {
    fn admit<'a>(&'a self, key: &'a str) -> Admit<'a> {
        Admit::Ready(self.admit_now(key))
    }

    fn record(&self, key: &str, ok: bool) {
        if let Some(change) = self.record_outcome(key, ok) {
            change.count(key, Scope::Local);
        }
    }

    fn release_probe(&self, key: &str) {
        if let Some(c) = self.lock().get_mut(key) {
            c.probing = false;
        }
    }

    fn state(&self, key: &str) -> BreakerState {
        let circuits = self.lock();
        match circuits
            .get(key)
            .and_then(|c| c.opened_at.map(|at| (at, c.probing)))
        {
            None => BreakerState::Closed,
            Some((_, true)) => BreakerState::HalfOpen,
            Some((at, false)) if at.elapsed() >= self.cooldown => BreakerState::HalfOpen,
            Some(_) => BreakerState::Open,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> MemoryStore {
        MemoryStore::new(NonZeroU32::new(2).unwrap(), Duration::from_secs(30))
    }

    #[tokio::test(start_paused = true)]
    async fn opens_at_the_threshold_and_lets_one_probe_through_after_the_cooldown() {
        let s = store();
        s.record("api", false);
        assert_eq!(s.admit_now("api"), Admission::Allowed);
        s.record("api", false);
        assert_eq!(s.admit_now("api"), Admission::Rejected);
        tokio::time::advance(Duration::from_secs(30)).await;
        assert_eq!(s.state("api"), BreakerState::HalfOpen);
        assert_eq!(s.admit_now("api"), Admission::Probe);
        assert_eq!(s.admit_now("api"), Admission::Rejected);
        s.record("api", true);
        assert_eq!(s.state("api"), BreakerState::Closed);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_probe_reopens_and_a_released_probe_can_be_taken_again() {
        let s = store();
        s.record("api", false);
        s.record("api", false);
        tokio::time::advance(Duration::from_secs(30)).await;
        assert_eq!(s.admit_now("api"), Admission::Probe);
        s.release_probe("api");
        assert_eq!(s.admit_now("api"), Admission::Probe);
        s.record("api", false);
        assert_eq!(s.state("api"), BreakerState::Open);
    }

    fn rate(percent: u8, window: u32, min_calls: u32) -> MemoryStore {
        let rate = FailureRate {
            percent,
            window: NonZeroU32::new(window).unwrap(),
            min_calls: NonZeroU32::new(min_calls).unwrap(),
        };
        MemoryStore::with_failure_rate(rate, Duration::from_secs(30))
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_rate_is_judged_only_from_the_minimum_of_calls_on() {
        let s = rate(50, 4, 4);
        for _ in 0..3 {
            s.record("api", false);
        }
        assert_eq!(s.state("api"), BreakerState::Closed, "3 calls are too few");
        s.record("api", true);
        assert_eq!(
            s.state("api"),
            BreakerState::Closed,
            "a success opens nothing"
        );
        s.record("api", false);
        assert_eq!(s.state("api"), BreakerState::Open, "3 of the last 4 failed");
    }

    #[tokio::test(start_paused = true)]
    async fn blips_between_successes_keep_a_failure_rate_circuit_closed() {
        let s = rate(70, 10, 5);
        let consecutive = store();
        let mut consecutive_opened = false;
        for n in 0..40 {
            let ok = n % 4 >= 2; // two failures, two successes: half failed, 2 in a row
            s.record("api", ok);
            assert_eq!(s.state("api"), BreakerState::Closed, "call {n}");
            consecutive.record("api", ok);
            consecutive_opened |= consecutive.state("api") == BreakerState::Open;
        }
        assert!(
            consecutive_opened,
            "2 failures in a row open the consecutive rule"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_rate_circuit_probes_after_its_cooldown_and_starts_a_fresh_window() {
        let s = rate(50, 2, 2);
        s.record("api", false);
        s.record("api", false);
        assert_eq!(s.admit_now("api"), Admission::Rejected);
        tokio::time::advance(Duration::from_secs(30)).await;
        assert_eq!(s.admit_now("api"), Admission::Probe);
        s.record("api", false);
        assert_eq!(
            s.state("api"),
            BreakerState::Open,
            "a failed probe reopens it"
        );
        tokio::time::advance(Duration::from_secs(30)).await;
        assert_eq!(s.admit_now("api"), Admission::Probe);
        s.record("api", true);
        assert_eq!(s.state("api"), BreakerState::Closed);
        s.record("api", false);
        assert_eq!(
            s.state("api"),
            BreakerState::Closed,
            "one call of a fresh window"
        );
    }
}
