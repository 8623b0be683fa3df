//! Breakers and retry budgets shared by many processes through Redis (feature `redis`).
//!
//! Every transition runs as one Lua script on the server, so the fleet agrees on
//! it: the circuit opens once the fleet's failures cross the threshold, and exactly one process
//! gets the half-open probe. The happy path does not wait for Redis: each process decides from
//! a view cached for [`RedisStoreBuilder::cache_ttl`] and reports outcomes through a bounded
//! channel to a background task. When Redis is unreachable or slow, every decision falls back
//! to this process's own breakers (kept current all along, and taking up the circuits the
//! shared state last had open) within one command timeout, or two when the connection broke
//! and a fresh one is tried first, and goes back to the shared state once Redis answers again.

mod budget;
mod builder;
mod cache;
mod scripts;
mod worker;

use std::fmt;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::{FromRedisValue, ScriptInvocation};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::breaker::{Admission, Admit, BreakerState, BreakerStore, Change, MemoryStore, Scope};
use crate::escapes::Visible;
use cache::{Cached, View, ViewCache};
use worker::Job;

pub use builder::RedisStoreBuilder;

/// The Redis store could not be set up, or could not answer.
///
/// # Examples
///
/// A URL Redis cannot read is refused before any connection is tried, so this runs without a
/// server:
///
/// ```
/// use agent_errors::redis::{RedisStore, RedisStoreError};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let refused = RedisStore::builder("not a redis url").connect().await;
/// let fix = match refused {
///     Err(RedisStoreError::Config(_)) => "check the URL",
///     Err(RedisStoreError::Redis(_) | RedisStoreError::TimedOut(_)) => "is Redis up?",
///     Err(_) => "report a bug", // `Reply`, and the non-exhaustive rest
///     Ok(_) => "connected",
/// };
/// assert_eq!(fix, "check the URL");
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedisStoreError {
    /// The URL or the connection settings were refused.
    #[error("invalid Redis settings: {0}")]
    Config(#[source] redis::RedisError),
    /// Redis answered with an error, or the connection failed.
    #[error("Redis failed: {0}")]
    Redis(#[source] redis::RedisError),
    /// Redis did not answer within the command timeout.
    #[error("Redis did not answer within {0:?}")]
    TimedOut(Duration),
    /// Redis answered something the scripts never return.
    #[error("unexpected reply from Redis")]
    Reply,
}

impl RedisStoreError {
    /// The connection broke (rather than Redis refusing or being slow): a new one may work.
    fn is_broken_connection(&self) -> bool {
        matches!(self, RedisStoreError::Redis(e) if e.is_unrecoverable_error() || e.is_connection_dropped())
    }
}

/// Where a [`RedisStore`]'s decisions come from now.
///
/// # Examples
///
/// Reporting when a process falls back to its own breakers. It needs a Redis server, hence
/// `no_run`:
///
/// ```no_run
/// use agent_errors::redis::{RedisStore, StoreHealth};
///
/// # async fn demo() -> Result<(), agent_errors::redis::RedisStoreError> {
/// let store = RedisStore::builder("redis://127.0.0.1:6379/").connect().await?;
/// let mut health = store.watch_health();
/// tokio::spawn(async move {
///     while health.changed().await.is_ok() {
///         match *health.borrow() {
///             StoreHealth::Shared => tracing::info!("breakers shared with the fleet again"),
///             StoreHealth::Local => tracing::warn!("Redis unreachable: deciding from this process alone"),
///         }
///     }
/// });
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreHealth {
    /// From the state shared on Redis.
    Shared,
    /// From this process alone: Redis is unreachable or too slow.
    Local,
}

/// A [`BreakerStore`] shared by every process that uses the same Redis and prefix; with
/// [`RetryBudget::shared_on`](crate::retry::RetryBudget::shared_on) it also shares retry budgets.
/// Clones share one connection and one background task.
///
/// A decision on the happy path is made from a view of the shared state at most
/// [`cache_ttl`](RedisStoreBuilder::cache_ttl) old (read again, one round trip, by the first
/// call after that); the half-open probe is always taken from Redis itself.
///
/// # Examples
///
/// It needs a Redis server, hence `no_run`:
///
/// ```no_run
/// # async fn demo() -> Result<(), agent_errors::redis::RedisStoreError> {
/// use std::sync::Arc;
/// use agent_errors::{Agent, breaker::ServiceBreaker, redis::RedisStore, retry::RetryBudget};
///
/// let store = RedisStore::builder("redis://127.0.0.1:6379/").connect().await?;
/// let breaker = Arc::new(ServiceBreaker::with_store(store.clone()));
/// let budget = Arc::new(RetryBudget::default().shared_on(&store));
/// let agent = Agent::builder("support").service_breaker(breaker).retry_budget(budget);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    settings: RedisStoreBuilder,
    conn: ConnectionManager,
    /// This process's name for the probes it holds.
    token: String,
    up: AtomicBool,
    health: watch::Sender<StoreHealth>,
    /// This process's own breakers, fed every outcome: what decides while Redis is away.
    local: MemoryStore,
    cache: ViewCache,
    jobs: mpsc::Sender<Job>,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.inner.settings.prefix)
            .field("health", &self.health())
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Settings for a store on the Redis at `url` (`redis://host:port/db`).
    pub fn builder(url: impl Into<String>) -> RedisStoreBuilder {
        RedisStoreBuilder {
            url: url.into(),
            prefix: "agent-errors".to_owned(),
            threshold: NonZeroU32::new(5).expect("5 is not zero"),
            cooldown: Duration::from_secs(30),
            cache_ttl: Duration::from_millis(250),
            command_timeout: Duration::from_millis(50),
            probe_lease: Duration::from_secs(30),
            idle_ttl: Duration::from_secs(60),
            reconnect_every: Duration::from_secs(1),
            queue: 1024,
        }
    }

    /// Whether decisions come from Redis or, while it is away, from this process alone.
    pub fn health(&self) -> StoreHealth {
        *self.inner.health.borrow()
    }

    /// Follows [`RedisStore::health`]: changes when Redis goes away and when it comes back.
    pub fn watch_health(&self) -> watch::Receiver<StoreHealth> {
        self.inner.health.subscribe()
    }

    /// The state of `key`'s circuit as Redis has it now, read past the cache (one round trip),
    /// or why Redis could not say. [`BreakerStore::current_state`] is the same read that
    /// answers from this process's own state when Redis is away.
    pub async fn shared_state(&self, key: &str) -> Result<BreakerState, RedisStoreError> {
        let view = self.inner.read_view(key).await?;
        Ok(view.state(Instant::now()))
    }
}

impl BreakerStore for RedisStore {
    fn admit<'a>(&'a self, key: &'a str) -> Admit<'a> {
        let inner = &self.inner;
        if !inner.is_up() {
            return Admit::Ready(inner.decide_locally(key));
        }
        match inner.cache.decide(key, Instant::now()) {
            Cached::Decided(admission) => Admit::Ready(admission),
            Cached::Ask => Admit::Asking(Box::pin(inner.ask(key))),
        }
    }

    fn record(&self, key: &str, ok: bool) {
        let inner = &self.inner;
        // A success needs telling only when there may be failures to clear: the happy path
        // sends nothing.
        let tell = !ok || inner.local.has_failures(key) || inner.cache.success_matters(key);
        let change = inner.local.record_outcome(key, ok);
        if !inner.is_up() {
            // This process's breaker decides while Redis is away: its changes are the ones
            // that happen.
            if let Some(change) = change {
                change.count(key, Scope::Local);
            }
        }
        let probe = inner.cache.take_probe(key);
        if inner.is_up() && (tell || probe) {
            inner.send(Job::Report {
                key: key.to_owned(),
                ok,
                probe,
            });
        }
    }

    fn release_probe(&self, key: &str) {
        let inner = &self.inner;
        inner.local.release_probe(key);
        if inner.cache.take_probe(key) && inner.is_up() {
            inner.send(Job::Release {
                key: key.to_owned(),
            });
        }
    }

    /// The state this process last read from Redis, without a round trip: at most
    /// [`cache_ttl`](RedisStoreBuilder::cache_ttl) old when it is fresh. An older one is
    /// answered as it stands while a fresh read is fetched in the background, so a caller
    /// polling `state` sees a change within `cache_ttl` and one round trip;
    /// [`current_state`](BreakerStore::current_state) reads Redis now. While Redis is away,
    /// the state this process decides by.
    fn state(&self, key: &str) -> BreakerState {
        let inner = &self.inner;
        if !inner.is_up() {
            return inner.local_state(key);
        }
        let (state, refresh) = inner.cache.read(key, Instant::now());
        if refresh
            && !inner.send(Job::Refresh {
                key: key.to_owned(),
            })
        {
            inner.cache.refreshed(key, None, Instant::now());
        }
        state
    }

    /// The state Redis has now (one round trip, kept as this process's view); while Redis is
    /// away, or when it does not answer within the command timeout, the state this process
    /// decides by.
    // The boxed future spelled out: naming the crate's alias would import the model layer.
    fn current_state<'a>(
        &'a self,
        key: &'a str,
    ) -> Pin<Box<dyn Future<Output = BreakerState> + Send + 'a>> {
        let inner = &self.inner;
        Box::pin(async move {
            if inner.is_up() {
                if let Ok(view) = inner.read_view(key).await {
                    return view.state(Instant::now());
                }
            }
            inner.local_state(key)
        })
    }
}

impl Inner {
    fn is_up(&self) -> bool {
        self.up.load(Ordering::Acquire)
    }

    fn breaker_key(&self, key: &str) -> String {
        format!("{}:breaker:{key}", self.settings.prefix)
    }

    /// Hands a job to the background task; false when the queue is full and it was dropped.
    fn send(&self, job: Job) -> bool {
        let sent = self.jobs.try_send(job).is_ok();
        if !sent {
            tracing::debug!(
                event = "breaker_store_queue_full",
                "an outcome report was dropped"
            );
        }
        sent
    }

    /// Runs a script under the command timeout; a failure marks Redis as away. A connection
    /// that broke (the server restarted while this process was idle, say) is replaced by the
    /// connection manager, and the script runs once more on the new one before Redis counts as
    /// away: one restart must not make this process decide alone.
    async fn invoke<T: FromRedisValue>(
        &self,
        script: &mut ScriptInvocation<'_>,
    ) -> Result<T, RedisStoreError> {
        let mut result = self.invoke_once(script).await;
        if result
            .as_ref()
            .is_err_and(RedisStoreError::is_broken_connection)
        {
            result = self.invoke_once(script).await;
        }
        if let Err(error) = &result {
            self.went_away(error);
        }
        result
    }

    async fn invoke_once<T: FromRedisValue>(
        &self,
        script: &ScriptInvocation<'_>,
    ) -> Result<T, RedisStoreError> {
        let mut conn = self.conn.clone();
        let limit = self.settings.command_timeout;
        match tokio::time::timeout(limit, script.invoke_async(&mut conn)).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(RedisStoreError::Redis(error)),
            Err(_) => Err(RedisStoreError::TimedOut(limit)),
        }
    }

    /// Reads `key`'s breaker from Redis and keeps it as this process's view.
    async fn read_view(&self, key: &str) -> Result<View, RedisStoreError> {
        let mut script = scripts::VIEW_SCRIPT.key(self.breaker_key(key));
        let reply: Vec<i64> = self.invoke(&mut script).await?;
        let now = Instant::now();
        let (view, _) = View::from_reply(&reply, now).ok_or(RedisStoreError::Reply)?;
        self.cache.store(key, view, now);
        Ok(view)
    }

    /// Decides from this process's own breaker, for when Redis cannot be asked. It took up
    /// the shared circuits it last read open when Redis went away ([`Inner::went_away`]), so it
    /// never lets through a call the shared state refused.
    fn decide_locally(&self, key: &str) -> Admission {
        self.local.admit_now(key)
    }

    /// The state [`Inner::decide_locally`] decides by.
    fn local_state(&self, key: &str) -> BreakerState {
        self.local.state(key)
    }

    /// Asks Redis to call `key`: refreshes the view and, if the probe is free, takes it.
    async fn ask(&self, key: &str) -> Admission {
        // A call cancelled mid-ask must not leave the key marked as being asked about, or this
        // process would decide from a stale view for good.
        let mut unmark = Unmark {
            cache: &self.cache,
            key,
            armed: true,
        };
        let s = &self.settings;
        let mut script = scripts::ADMIT_SCRIPT.key(self.breaker_key(key));
        script
            .arg(&self.token)
            .arg(millis(s.probe_lease))
            .arg(millis(s.idle_ttl));
        let reply: Option<Vec<i64>> = self.invoke(&mut script).await.ok();
        let now = Instant::now();
        let answer = reply.and_then(|r| View::from_reply(&r, now));
        unmark.armed = false;
        self.cache.asked(key, answer, now);
        match answer {
            None => self.decide_locally(key),
            Some((_, true)) => {
                Change::HalfOpened.count(key, Scope::Shared);
                Admission::Probe
            }
            Some((View::Closed { .. }, _)) => Admission::Allowed,
            Some(_) => Admission::Rejected,
        }
    }

    /// Redis failed: decisions are this process's from now on. Its breakers first take up
    /// every circuit the shared state had open (or half-open) when last read, so a call the
    /// fleet refused is not let through because this process alone saw no failure: each stays
    /// open until the end of the cooldown Redis gave it, then lets one probe through.
    fn went_away(&self, error: &RedisStoreError) {
        for (key, until, probing) in self
            .cache
            .open_circuits(Instant::now(), self.settings.idle_ttl)
        {
            self.local.adopt_open(&key, until, probing);
        }
        if self.up.swap(false, Ordering::AcqRel) {
            tracing::warn!(event = "breaker_store_down", error = %Visible::of(error), "deciding locally until Redis answers");
            self.health.send_replace(StoreHealth::Local);
        }
    }

    fn came_back(&self) {
        self.cache.clear();
        if !self.up.swap(true, Ordering::AcqRel) {
            tracing::info!(
                event = "breaker_store_up",
                "Redis answers again: sharing state"
            );
            self.health.send_replace(StoreHealth::Shared);
        }
    }

    /// One PING under the command timeout: marks Redis as there or away.
    async fn ping(&self) {
        let mut conn = self.conn.clone();
        let limit = self.settings.command_timeout;
        let command = redis::cmd("PING");
        let ping = command.query_async::<String>(&mut conn);
        match tokio::time::timeout(limit, ping).await {
            Ok(Ok(_)) => self.came_back(),
            Ok(Err(error)) => self.went_away(&RedisStoreError::Redis(error)),
            Err(_) => self.went_away(&RedisStoreError::TimedOut(limit)),
        }
    }
}

/// Clears the asking mark of a key when an ask ends without an answer stored.
struct Unmark<'a> {
    cache: &'a ViewCache,
    key: &'a str,
    armed: bool,
}

impl Drop for Unmark<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.cache.asked(self.key, None, Instant::now());
        }
    }
}

/// A duration as whole milliseconds for a script, at least 1.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}
