//! The settings of a Redis store, and starting one.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use redis::aio::ConnectionManager;
use tokio::sync::{mpsc, watch};

use super::cache::ViewCache;
use super::{Inner, RedisStore, RedisStoreError, StoreHealth, worker};
use crate::breaker::MemoryStore;

/// Settings of a [`RedisStore`]; every duration has a default that suits a fleet of agents.
///
/// # Examples
///
/// It needs a Redis server, hence `no_run`:
///
/// ```no_run
/// use std::num::NonZeroU32;
/// use std::time::Duration;
/// use agent_errors::redis::RedisStore;
///
/// # async fn demo() -> Result<(), agent_errors::redis::RedisStoreError> {
/// let store = RedisStore::builder("redis://127.0.0.1:6379/")
///     .prefix("support-agents") // every process that shares breakers uses the same one
///     .threshold(NonZeroU32::new(10).unwrap())
///     .cooldown(Duration::from_secs(60))
///     .command_timeout(Duration::from_millis(50))
///     .connect()
///     .await?;
/// # let _ = store; Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RedisStoreBuilder {
    pub(super) url: String,
    pub(super) prefix: String,
    pub(super) threshold: NonZeroU32,
    pub(super) cooldown: Duration,
    pub(super) cache_ttl: Duration,
    pub(super) command_timeout: Duration,
    pub(super) probe_lease: Duration,
    pub(super) idle_ttl: Duration,
    pub(super) reconnect_every: Duration,
    pub(super) queue: usize,
}

impl RedisStoreBuilder {
    /// Keys are named `<prefix>:breaker:<key>` and `<prefix>:budget:<key>` (default
    /// `agent-errors`): agents that should share state use the same prefix.
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Failures across the fleet, without a success between them, that open a circuit
    /// (default 5).
    #[must_use]
    pub fn threshold(mut self, threshold: NonZeroU32) -> Self {
        self.threshold = threshold;
        self
    }

    /// How long a circuit stays open before one probe is let through (default 30 s).
    #[must_use]
    pub fn cooldown(mut self, cooldown: Duration) -> Self {
        self.cooldown = cooldown;
        self
    }

    /// How long a process decides from the state it last read before reading it again
    /// (default 250 ms): the bound on how stale a decision can be.
    #[must_use]
    pub fn cache_ttl(mut self, ttl: Duration) -> Self {
        self.cache_ttl = ttl;
        self
    }

    /// How long to wait for any Redis command before deciding locally (default 50 ms). A
    /// command whose connection broke is sent once more on a fresh connection, so a decision
    /// waits at most twice this.
    #[must_use]
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
        self
    }

    /// How long the half-open probe is leased to the process that took it (default 30 s): if
    /// that process dies mid-probe, another may probe after this.
    #[must_use]
    pub fn probe_lease(mut self, lease: Duration) -> Self {
        self.probe_lease = lease;
        self
    }

    /// How long a failure count outlives the last failure (default 60 s), and an open circuit
    /// its cooldown: the state of an upstream nobody calls expires.
    #[must_use]
    pub fn idle_ttl(mut self, ttl: Duration) -> Self {
        self.idle_ttl = ttl;
        self
    }

    /// How often to try Redis again after it went away (default 1 s).
    #[must_use]
    pub fn reconnect_every(mut self, every: Duration) -> Self {
        self.reconnect_every = every;
        self
    }

    /// Outcome reports waiting for the background task (default 1024); past that a report is
    /// dropped (this process still counts it locally).
    #[must_use]
    pub fn queue(mut self, reports: usize) -> Self {
        self.queue = reports.max(1);
        self
    }

    /// Starts the store. Fails only on bad settings: when Redis is down the store starts on
    /// local state and switches to the shared state once Redis answers. Must be called inside
    /// a Tokio runtime, which runs the store's background task.
    pub async fn connect(self) -> Result<RedisStore, RedisStoreError> {
        let client = redis::Client::open(self.url.as_str()).map_err(RedisStoreError::Config)?;
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.command_timeout.max(Duration::from_millis(200))))
            .set_response_timeout(Some(self.command_timeout))
            .set_number_of_retries(1)
            .set_max_delay(self.reconnect_every);
        let conn = ConnectionManager::new_lazy_with_config(client, config)
            .map_err(RedisStoreError::Config)?;
        let (jobs, queue) = mpsc::channel(self.queue);
        let (health, _) = watch::channel(StoreHealth::Shared);
        let inner = Arc::new(Inner {
            local: MemoryStore::new(self.threshold, self.cooldown),
            cache: ViewCache::new(self.cache_ttl),
            token: format!("{}-{:016x}", std::process::id(), fastrand::u64(..)),
            up: AtomicBool::new(true),
            conn,
            jobs,
            health,
            settings: self,
        });
        tokio::spawn(worker::run(Arc::downgrade(&inner), queue));
        // One round trip now, so a store started while Redis is down says so at once.
        inner.ping().await;
        Ok(RedisStore { inner })
    }
}
