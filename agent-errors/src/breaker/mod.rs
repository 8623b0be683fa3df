//! Circuit breakers: a per-run counter of consecutive failures per tool, and a service breaker
//! shared across runs, whose state lives in a [`BreakerStore`]: this process's memory by
//! default, or a store shared by many processes.

mod memory;
mod store;

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

pub use memory::MemoryStore;
pub use store::{Admission, Admit, BreakerState, BreakerStore};
#[cfg(feature = "redis")]
pub(crate) use store::{Change, Scope};

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
