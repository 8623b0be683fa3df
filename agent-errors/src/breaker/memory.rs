//! The in-process breaker store: the default.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use super::store::{Admission, Admit, BreakerState, BreakerStore, Change, Scope};

#[derive(Debug, Clone)]
struct Circuit {
    failures: u32,
    opened_at: Option<Instant>,
    probing: bool,
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
    cooldown: Duration,
    circuits: Mutex<HashMap<String, Circuit>>,
}

impl MemoryStore {
    /// Opens after `threshold` consecutive failures; lets one probe through after `cooldown`.
    pub fn new(threshold: NonZeroU32, cooldown: Duration) -> Self {
        MemoryStore {
            threshold: threshold.get(),
            cooldown,
            circuits: Mutex::new(HashMap::new()),
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

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Circuit>> {
        // Every critical section is a lookup and a few field writes: a panic cannot tear it.
        self.circuits.lock().unwrap_or_else(|p| p.into_inner())
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
        let mut circuits = self.lock();
        if ok {
            // Skipping the removal when nothing is tracked keeps the happy path to one lookup.
            if circuits.is_empty() {
                return None;
            }
            let removed = circuits.remove(key)?;
            return removed.opened_at.map(|_| Change::Closed);
        }
        let c = circuits.entry(key.to_owned()).or_insert(Circuit {
            failures: 0,
            opened_at: None,
            probing: false,
        });
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

    /// Takes up a circuit a shared store had open until `until` (with this process holding its
    /// probe when `probing`): it stays open here until then, then lets one probe through. A
    /// circuit open here for longer keeps its own time.
    #[cfg(feature = "redis")]
    pub(crate) fn adopt_open(&self, key: &str, until: Instant, probing: bool) {
        let opened_at = until.checked_sub(self.cooldown).unwrap_or(until);
        let mut circuits = self.lock();
        let c = circuits.entry(key.to_owned()).or_insert(Circuit {
            failures: 0,
            opened_at: None,
            probing: false,
        });
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
}
