//! Circuit breakers: a per-run counter of consecutive failures per tool, and a service breaker
//! shared across runs, whose state lives in a [`BreakerStore`]: this process's memory by
//! default, or a store shared by many processes.

mod memory;
mod store;

use std::collections::{HashMap, VecDeque};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use memory::FailureRate;
pub use memory::MemoryStore;
pub(crate) use store::Change;
#[cfg(feature = "redis")]
pub(crate) use store::Scope;
pub use store::{Admission, Admit, BreakerState, BreakerStore};

/// The default number of consecutive failures that trips a run's breaker.
pub(crate) const DEFAULT_THRESHOLD: u32 = 3;

/// Between a tool's name and a kind in the key of a count kept per kind: a control character,
/// which a tool name never holds (names are sanitized before they are counted).
const KIND_SEPARATOR: char = '\u{1f}';

/// The key of `tool`'s count of failures of one `kind`.
pub(crate) fn per_kind_key(tool: &str, kind: &str) -> String {
    format!("{tool}{KIND_SEPARATOR}{kind}")
}

/// Consecutive failures per tool (or per tool and kind) within one run; resets on success.
/// Fresh for every run.
#[derive(Debug, Clone)]
pub(crate) struct RunBreaker {
    threshold: u32,
    failures: HashMap<String, u32>,
    /// Under a failure-rate rule, each tool's last calls, oldest first: `None` a success, else
    /// the key its failure was counted under.
    windows: HashMap<String, VecDeque<Option<String>>>,
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
            windows: HashMap::new(),
        }
    }

    /// Records a success of `tool` in its failure-rate window, kept `window` calls long.
    pub(crate) fn succeeded_in_window(&mut self, tool: &str, window: u32) {
        let calls = self.windows.entry(tool.to_owned()).or_default();
        push_bounded(calls, None, window);
    }

    /// Records a failure of `tool` counted under `key` in its failure-rate window; returns the
    /// window's failures under `key` when they trip `rate`.
    pub(crate) fn failed_in_window(
        &mut self,
        tool: &str,
        key: &str,
        rate: crate::policy::RunFailureRate,
    ) -> Option<u32> {
        let calls = self.windows.entry(tool.to_owned()).or_default();
        push_bounded(calls, Some(key.to_owned()), rate.window());
        let failed = calls
            .iter()
            .filter(|call| call.as_deref() == Some(key))
            .count();
        let failed = u32::try_from(failed).unwrap_or(u32::MAX);
        let len = u32::try_from(calls.len()).unwrap_or(u32::MAX);
        rate.trips(failed, len).then_some(failed)
    }

    /// The failure-rate windows, per tool.
    pub(crate) fn windows(&self) -> &HashMap<String, VecDeque<Option<String>>> {
        &self.windows
    }

    /// Takes up windows saved from another run of the same breaker.
    pub(crate) fn restore_windows(&mut self, windows: HashMap<String, VecDeque<Option<String>>>) {
        self.windows = windows;
    }

    /// Records a success of `tool`: every count of it starts again, whichever kind it was kept
    /// for.
    pub(crate) fn succeeded(&mut self, tool: &str) {
        // Skipping the hash when nothing has failed keeps the happy path cheap.
        if self.failures.is_empty() {
            return;
        }
        if let Some(n) = self.failures.get_mut(tool) {
            *n = 0;
        }
        let kinds = self.failures.iter_mut().filter(|(key, _)| {
            key.split_once(KIND_SEPARATOR)
                .is_some_and(|(t, _)| t == tool)
        });
        for (_, n) in kinds {
            *n = 0;
        }
    }

    /// Records a failure counted under `key` (a tool's name, or [`per_kind_key`]); returns the
    /// consecutive-failure count when this trips the breaker.
    pub(crate) fn failed(&mut self, key: &str) -> Option<u32> {
        let n = self.failures.entry(key.to_owned()).or_insert(0);
        *n += 1;
        (*n >= self.threshold).then_some(*n)
    }

    /// Forgets every count of `tool`: it was taken off the table, and its counts must not stop
    /// a call still in flight.
    pub(crate) fn forget(&mut self, tool: &str) {
        self.windows.remove(tool);
        self.failures.retain(|key, _| {
            key != tool
                && key
                    .split_once(KIND_SEPARATOR)
                    .is_none_or(|(t, _)| t != tool)
        });
    }

    /// The consecutive failures counted per tool.
    pub(crate) fn counts(&self) -> &HashMap<String, u32> {
        &self.failures
    }

    /// Takes up counts saved from another run of the same breaker.
    pub(crate) fn restore(&mut self, failures: HashMap<String, u32>) {
        self.failures = failures;
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

/// Appends `call`, dropping the oldest calls past `window`.
fn push_bounded(calls: &mut VecDeque<Option<String>>, call: Option<String>, window: u32) {
    calls.push_back(call);
    let window = usize::try_from(window).unwrap_or(usize::MAX);
    while calls.len() > window {
        calls.pop_front();
    }
}

impl ServiceBreaker {
    /// The recommended preset's service breaker: opens when half of the last 100 calls failed,
    /// judged from the 20th, and lets a probe through after 30 s. The field's count-based
    /// breakers wait for many calls before judging (resilience4j and Polly from 100): judged
    /// from the 10th, the retries of one run through a service failing half its calls opened
    /// its circuit, and the model's next call met a refusal it could only wait out.
    pub(crate) fn recommended() -> ServiceBreaker {
        ServiceBreaker::failure_rate(50, 100, 20, Duration::from_secs(30))
            .expect("the preset's settings are in range")
    }
}

/// A breaker per upstream, shared by every run of an agent: closed, open (rejects at once),
/// half-open (one probe after the cooldown). Its state lives in a [`BreakerStore`]: a
/// [`MemoryStore`] unless [`ServiceBreaker::with_store`] says otherwise.
///
/// # Examples
///
/// One breaker shared by two agents that call the same upstreams:
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use agent_errors::Agent;
/// use agent_errors::breaker::{BreakerState, ServiceBreaker};
/// use agent_errors::testing::ScriptedModel;
///
/// let breaker = Arc::new(ServiceBreaker::new(3, Duration::from_secs(60))?);
/// let support = Agent::builder("support").model(ScriptedModel::new()).service_breaker(Arc::clone(&breaker)).build()?;
/// let billing = Agent::builder("billing").model(ScriptedModel::new()).service_breaker(Arc::clone(&breaker)).build()?;
/// assert!(Arc::ptr_eq(support.service_breaker(), billing.service_breaker()));
/// assert_eq!(breaker.state("crm"), BreakerState::Closed);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct ServiceBreaker {
    store: Store,
}

/// The in-memory store is called directly, not through the trait object, so the executor's
/// happy path costs what it did before stores existed.
#[derive(Debug)]
enum Store {
    Memory(MemoryStore),
    Shared(Arc<dyn BreakerStore>),
}

impl Default for ServiceBreaker {
    fn default() -> Self {
        ServiceBreaker::from_store(MemoryStore::new(
            NonZeroU32::new(5).expect("5 is not zero"),
            Duration::from_secs(30),
        ))
    }
}

/// A service breaker's settings were out of range.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use agent_errors::breaker::{BreakerSettingsError, ServiceBreaker};
///
/// match ServiceBreaker::new(0, Duration::from_secs(30)) {
///     Err(BreakerSettingsError::ZeroThreshold) => {}
///     Err(BreakerSettingsError::ZeroCooldown) => unreachable!("the cooldown is 30 s"),
///     Err(other) => panic!("{other}"),
///     Ok(_) => unreachable!("a breaker that opens after 0 failures is refused"),
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BreakerSettingsError {
    /// A threshold of 0 failures would open the circuit before any call.
    #[error("a service breaker's threshold must be at least 1 failure, got 0")]
    ZeroThreshold,
    /// A cooldown of 0 would let every call through as a probe: the circuit never stays open.
    #[error("a service breaker's cooldown must be longer than 0")]
    ZeroCooldown,
    /// A failure rate must be a percentage from 1 to 100.
    #[error("a service breaker's failure rate must be from 1 to 100 percent, got {0}")]
    RateOutOfRange(u8),
    /// A window of 0 calls, or a minimum of 0 calls or more than the window holds: the rate
    /// would be judged on nothing, or never.
    #[error(
        "a service breaker's window must hold at least 1 call and its minimum must be from 1 to \
         the window ({window}), got {min_calls}"
    )]
    BadWindow {
        /// The calls the window keeps.
        window: u32,
        /// The calls needed before the rate is judged.
        min_calls: u32,
    },
}

impl ServiceBreaker {
    /// Opens after `threshold` consecutive failures; lets one probe through after `cooldown`.
    /// The state stays in this process.
    ///
    /// A threshold of 0 or a zero cooldown is refused with [`BreakerSettingsError`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use agent_errors::breaker::{BreakerState, ServiceBreaker};
    ///
    /// let breaker = ServiceBreaker::new(5, Duration::from_secs(30))?;
    /// assert_eq!(breaker.state("weather"), BreakerState::Closed);
    /// # Ok::<(), agent_errors::breaker::BreakerSettingsError>(())
    /// ```
    pub fn new(threshold: u32, cooldown: Duration) -> Result<Self, BreakerSettingsError> {
        let threshold = NonZeroU32::new(threshold).ok_or(BreakerSettingsError::ZeroThreshold)?;
        if cooldown.is_zero() {
            return Err(BreakerSettingsError::ZeroCooldown);
        }
        Ok(ServiceBreaker::from_store(MemoryStore::new(
            threshold, cooldown,
        )))
    }

    /// Opens when `percent`% or more of the last `window` calls failed, once at least
    /// `min_calls` of them were made (the rule of resilience4j's count-based window and of
    /// Polly's minimum throughput); lets one probe through after `cooldown`. The state stays in
    /// this process.
    ///
    /// The rate is judged when a call fails, as Polly judges it, not after every call as
    /// resilience4j does: a success never opens the circuit, so failure, failure, success,
    /// success under `failure_rate(50, 10, 4, _)` stays closed (2 of 4 failed) until the next
    /// failure opens it (3 of 5).
    ///
    /// Where failures are independent blips, this rule keeps the circuit closed while most calls
    /// get through; the consecutive rule of [`ServiceBreaker::new`] opens on any short run of
    /// bad luck (at a 50% failure rate, 5 in a row come once in every 32 calls or so), and its
    /// rejections then fail calls that would have worked.
    ///
    /// ```
    /// use std::time::Duration;
    /// use agent_errors::breaker::{BreakerSettingsError, BreakerState, ServiceBreaker};
    ///
    /// // Opens when half of the last 20 calls failed, judged from the 10th call on.
    /// let breaker = ServiceBreaker::failure_rate(50, 20, 10, Duration::from_secs(30))?;
    /// assert_eq!(breaker.state("search"), BreakerState::Closed);
    /// assert!(matches!(
    ///     ServiceBreaker::failure_rate(50, 20, 30, Duration::from_secs(30)),
    ///     Err(BreakerSettingsError::BadWindow { window: 20, min_calls: 30 })
    /// ));
    /// # Ok::<(), BreakerSettingsError>(())
    /// ```
    pub fn failure_rate(
        percent: u8,
        window: u32,
        min_calls: u32,
        cooldown: Duration,
    ) -> Result<Self, BreakerSettingsError> {
        if !(1..=100).contains(&percent) {
            return Err(BreakerSettingsError::RateOutOfRange(percent));
        }
        let bad_window = BreakerSettingsError::BadWindow { window, min_calls };
        let (Some(window), Some(min_calls)) = (NonZeroU32::new(window), NonZeroU32::new(min_calls))
        else {
            return Err(bad_window);
        };
        if min_calls > window {
            return Err(bad_window);
        }
        if cooldown.is_zero() {
            return Err(BreakerSettingsError::ZeroCooldown);
        }
        let rate = FailureRate {
            percent,
            window,
            min_calls,
        };
        Ok(ServiceBreaker::from_store(MemoryStore::with_failure_rate(
            rate, cooldown,
        )))
    }

    fn from_store(store: MemoryStore) -> Self {
        ServiceBreaker {
            store: Store::Memory(store),
        }
    }

    /// A breaker whose state lives in `store`: the threshold and cooldown are the store's.
    pub fn with_store(store: impl BreakerStore) -> Self {
        ServiceBreaker::with_shared_store(Arc::new(store))
    }

    /// A breaker whose state lives in a store already shared (with a retry budget, say).
    pub fn with_shared_store(store: Arc<dyn BreakerStore>) -> Self {
        ServiceBreaker {
            store: Store::Shared(store),
        }
    }

    /// The store.
    pub fn store(&self) -> &dyn BreakerStore {
        match &self.store {
            Store::Memory(memory) => memory,
            Store::Shared(shared) => shared.as_ref(),
        }
    }

    /// Asks to call the service `key` names now.
    pub(crate) fn admit<'a>(&'a self, key: &'a str) -> Admit<'a> {
        match &self.store {
            Store::Memory(memory) => Admit::Ready(memory.admit_now(key)),
            Store::Shared(shared) => shared.admit(key),
        }
    }

    /// Records the outcome of an admitted call.
    pub(crate) fn record(&self, key: &str, ok: bool) {
        match &self.store {
            Store::Memory(memory) => memory.record(key, ok),
            Store::Shared(shared) => shared.record(key, ok),
        }
    }

    /// Records the outcome of an admitted call, and says how it changed the circuit: exactly,
    /// for a circuit kept in this process; for a shared store, as its state read before and
    /// after says (a store that records in the background may show the change only later).
    pub(crate) fn record_change(&self, key: &str, ok: bool) -> Option<Change> {
        match &self.store {
            Store::Memory(memory) => {
                let change = memory.record_outcome(key, ok);
                if let Some(change) = change {
                    change.count(key, store::Scope::Local);
                }
                change
            }
            Store::Shared(shared) => {
                let before = shared.state(key);
                shared.record(key, ok);
                match (before, shared.state(key)) {
                    (BreakerState::Open, BreakerState::Open) => None,
                    (_, BreakerState::Open) => Some(Change::Opened),
                    (BreakerState::Closed, BreakerState::Closed) => None,
                    (_, BreakerState::Closed) => Some(Change::Closed),
                    (_, BreakerState::HalfOpen) => None,
                }
            }
        }
    }

    /// How long until the open circuit of `key` lets a probe through, when this process knows:
    /// a circuit kept in this process's memory.
    pub(crate) fn probe_in(&self, key: &str) -> Option<Duration> {
        match &self.store {
            Store::Memory(memory) => memory.probe_in(key),
            Store::Shared(_) => None,
        }
    }

    /// Gives back a half-open probe whose outcome will never be recorded (its call was
    /// cancelled): the next call after the cooldown may probe again.
    pub(crate) fn release_probe(&self, key: &str) {
        self.store().release_probe(key);
    }

    /// The state of the circuit of `key` (a breaker key, by default a tool's name) now, as
    /// the store knows it without waiting (see [`BreakerStore::state`]).
    pub fn state(&self, key: &str) -> BreakerState {
        self.store().state(key)
    }

    /// The state of the circuit of `key`, read afresh from the store: for a shared store,
    /// what the fleet's state is now rather than what this process last read.
    ///
    /// ```
    /// use agent_errors::breaker::{BreakerState, ServiceBreaker};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let breaker = ServiceBreaker::default();
    /// assert_eq!(breaker.current_state("weather").await, BreakerState::Closed);
    /// # }
    /// ```
    pub async fn current_state(&self, key: &str) -> BreakerState {
        match &self.store {
            Store::Memory(memory) => memory.state(key),
            Store::Shared(shared) => shared.current_state(key).await,
        }
    }
}
