//! Circuit breakers: a per-run counter of consecutive failures per tool, and a service breaker
//! shared across runs.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// The default number of consecutive failures that trips a run's breaker.
pub(crate) const DEFAULT_THRESHOLD: u32 = 3;

/// Consecutive failures per tool within one run; resets on success. Fresh for every run.
#[derive(Debug, Clone)]
pub(crate) struct RunBreaker {
    threshold: u32,
    failures: HashMap<String, u32>,
}

impl Default for RunBreaker {
    fn default() -> Self {
        RunBreaker::new(NonZeroU32::new(DEFAULT_THRESHOLD).expect("3 is not zero"))
    }
}

impl RunBreaker {
    /// A breaker that trips after `threshold` consecutive failures of one tool.
    pub(crate) fn new(threshold: NonZeroU32) -> Self {
        RunBreaker {
            threshold: threshold.get(),
            failures: HashMap::new(),
        }
    }

    /// Records an outcome; returns the consecutive-failure count when this trips the breaker.
    pub(crate) fn record(&mut self, tool: &str, ok: bool) -> Option<u32> {
        if ok {
            // Skipping the hash when nothing has failed keeps the happy path cheap.
            if self.failures.is_empty() {
                return None;
            }
            if let Some(n) = self.failures.get_mut(tool) {
                *n = 0;
            }
            return None;
        }
        let n = self.failures.entry(tool.to_owned()).or_insert(0);
        *n += 1;
        (*n >= self.threshold).then_some(*n)
    }

    /// The failure count, when this tool has tripped the breaker.
    pub(crate) fn tripped(&self, tool: &str) -> Option<u32> {
        if self.failures.is_empty() {
            return None;
        }
        self.failures
            .get(tool)
            .copied()
            .filter(|n| *n >= self.threshold)
    }
}

/// A service breaker's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    /// Calls go through; failures are counted.
    Closed,
    /// Calls are rejected at once until the cooldown ends.
    Open,
    /// The cooldown ended: one probe call is let through.
    HalfOpen,
}

#[derive(Debug, Clone)]
struct Circuit {
    failures: u32,
    opened_at: Option<Instant>,
    probing: bool,
}

/// Whether a call may go to the service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Go ahead.
    Allowed,
    /// Go ahead: this call is the half-open probe.
    Probe,
    /// The circuit is open: do not call.
    Rejected,
}

/// A breaker per tool (service), shared by every run of an agent: closed, open (rejects at once),
/// half-open (one probe after the cooldown).
#[derive(Debug)]
pub struct ServiceBreaker {
    threshold: u32,
    cooldown: Duration,
    circuits: Mutex<HashMap<String, Circuit>>,
}

impl Default for ServiceBreaker {
    fn default() -> Self {
        ServiceBreaker::new(
            NonZeroU32::new(5).expect("5 is not zero"),
            Duration::from_secs(30),
        )
    }
}

impl ServiceBreaker {
    /// Opens after `threshold` consecutive failures; lets one probe through after `cooldown`.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use std::time::Duration;
    /// use agent_errors::{BreakerState, ServiceBreaker};
    ///
    /// let breaker = ServiceBreaker::new(NonZeroU32::new(5).unwrap(), Duration::from_secs(30));
    /// assert_eq!(breaker.state("weather"), BreakerState::Closed);
    /// ```
    pub fn new(threshold: NonZeroU32, cooldown: Duration) -> Self {
        ServiceBreaker {
            threshold: threshold.get(),
            cooldown,
            circuits: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Circuit>> {
        self.circuits.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Asks to call `service` now.
    pub(crate) fn admit(&self, service: &str) -> Admission {
        let mut circuits = self.lock();
        let Some(c) = circuits.get_mut(service) else {
            return Admission::Allowed;
        };
        match c.opened_at {
            None => Admission::Allowed,
            Some(at) if at.elapsed() >= self.cooldown && !c.probing => {
                c.probing = true;
                Admission::Probe
            }
            Some(_) => Admission::Rejected,
        }
    }

    /// Records the outcome of an admitted call.
    pub(crate) fn record(&self, service: &str, ok: bool) {
        let mut circuits = self.lock();
        if ok {
            circuits.remove(service);
            return;
        }
        let c = circuits.entry(service.to_owned()).or_insert(Circuit {
            failures: 0,
            opened_at: None,
            probing: false,
        });
        c.failures += 1;
        if c.probing || c.failures >= self.threshold {
            c.opened_at = Some(Instant::now());
            c.probing = false;
        }
    }

    /// Gives back a half-open probe whose outcome will never be recorded (its call was
    /// cancelled): the next call after the cooldown may probe again.
    pub(crate) fn release_probe(&self, service: &str) {
        if let Some(c) = self.lock().get_mut(service) {
            c.probing = false;
        }
    }

    /// The state of `service`'s circuit now.
    pub fn state(&self, service: &str) -> BreakerState {
        let circuits = self.lock();
        match circuits
            .get(service)
            .and_then(|c| c.opened_at.map(|at| (at, c.probing)))
        {
            None => BreakerState::Closed,
            Some((_, true)) => BreakerState::HalfOpen,
            Some((at, false)) if at.elapsed() >= self.cooldown => BreakerState::HalfOpen,
            Some(_) => BreakerState::Open,
        }
    }
}
