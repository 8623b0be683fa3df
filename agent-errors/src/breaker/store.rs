//! Where service breakers keep their state: the trait a store implements, and the answer to
//! "may this call go to the service?".

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::error::BoxFuture;

/// A service breaker's state.
///
/// # Examples
///
/// A health check that reports each upstream's circuit:
///
/// ```
/// use agent_errors::breaker::{BreakerState, ServiceBreaker};
///
/// let breaker = ServiceBreaker::default();
/// let health = match breaker.state("weather-api") {
///     BreakerState::Closed => "up",
///     BreakerState::HalfOpen => "recovering",
///     BreakerState::Open => "down",
/// };
/// assert_eq!(health, "up");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    /// Calls go through; failures are counted.
    Closed,
    /// Calls are rejected at once until the cooldown ends.
    Open,
    /// The cooldown ended: one probe call is let through.
    HalfOpen,
}

/// Whether a call may go to the service.
///
/// # Examples
///
/// Asking a store before calling the service yourself:
///
/// ```
/// use std::num::NonZeroU32;
/// use std::time::Duration;
/// use agent_errors::breaker::{Admission, BreakerStore, MemoryStore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let store = MemoryStore::new(NonZeroU32::new(1).unwrap(), Duration::from_secs(30));
/// store.record("search", false); // one failure opens it
/// match store.admit("search").await {
///     Admission::Allowed | Admission::Probe => { /* call, then store.record("search", ok) */ }
///     Admission::Rejected => println!("search is down: not called"),
/// }
/// assert_eq!(store.admit("search").await, Admission::Rejected);
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Go ahead.
    Allowed,
    /// Go ahead: this call is the half-open probe. Its outcome must be recorded, or the probe
    /// given back with [`BreakerStore::release_probe`].
    Probe,
    /// The circuit is open: do not call.
    Rejected,
}

/// A store's answer to [`BreakerStore::admit`]: decided from local state at once (the common
/// case, no allocation), or after asking a shared store (the rare case: a stale cache, a
/// half-open probe).
///
/// # Examples
///
/// A store that answers from memory at once, and asks elsewhere only when it must:
///
/// ```
/// use agent_errors::breaker::{Admission, Admit};
///
/// fn admit_from(cached: Option<Admission>) -> Admit<'static> {
///     match cached {
///         Some(admission) => Admit::Ready(admission), // no allocation
///         None => Admit::Asking(Box::pin(async { Admission::Allowed })), // a shared store's round trip
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// assert_eq!(admit_from(Some(Admission::Rejected)).await, Admission::Rejected);
/// assert_eq!(admit_from(None).await, Admission::Allowed);
/// # }
/// ```
#[must_use = "a future does nothing unless awaited"]
pub enum Admit<'a> {
    /// Decided.
    Ready(Admission),
    /// Decided once the store has been asked.
    Asking(BoxFuture<'a, Admission>),
}

impl fmt::Debug for Admit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Admit::Ready(admission) => f.debug_tuple("Ready").field(admission).finish(),
            Admit::Asking(_) => f.write_str("Asking(..)"),
        }
    }
}

impl Future for Admit<'_> {
    type Output = Admission;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Admission> {
        match self.get_mut() {
            Admit::Ready(admission) => Poll::Ready(*admission),
            Admit::Asking(asking) => asking.as_mut().poll(cx),
        }
    }
}

/// The state behind a [`ServiceBreaker`](crate::breaker::ServiceBreaker), one circuit per key (the
/// upstream a tool names with [`ToolDef::with_breaker_key`](crate::ToolDef::with_breaker_key),
/// else the tool's name).
///
/// [`MemoryStore`](crate::breaker::MemoryStore) keeps it in this process; `RedisStore` (feature `redis`)
/// shares it between processes. A store decides; the executor asks it before every call and
/// tells it how every admitted call went.
///
/// # Examples
///
/// A store of your own that wraps another, here to count the calls it refused:
///
/// ```
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use std::sync::Arc;
/// use agent_errors::breaker::{Admission, Admit, BreakerState, BreakerStore, MemoryStore, ServiceBreaker};
///
/// #[derive(Debug)]
/// struct Counting { inner: MemoryStore, refused: AtomicU32 }
///
/// impl BreakerStore for Counting {
///     fn admit<'a>(&'a self, key: &'a str) -> Admit<'a> {
///         Admit::Asking(Box::pin(async move {
///             let admission = self.inner.admit(key).await;
///             if admission == Admission::Rejected {
///                 self.refused.fetch_add(1, Ordering::Relaxed);
///             }
///             admission
///         }))
///     }
///     fn record(&self, key: &str, ok: bool) { self.inner.record(key, ok) }
///     fn release_probe(&self, key: &str) { self.inner.release_probe(key) }
///     fn state(&self, key: &str) -> BreakerState { self.inner.state(key) }
/// }
///
/// let store = Counting { inner: MemoryStore::new(5.try_into()?, std::time::Duration::from_secs(30)), refused: AtomicU32::new(0) };
/// let breaker = Arc::new(ServiceBreaker::with_store(store));
/// # let _ = breaker;
/// # Ok::<(), std::num::TryFromIntError>(())
/// ```
pub trait BreakerStore: Send + Sync + fmt::Debug + 'static {
    /// Asks to call `key` now. A store that must ask elsewhere returns [`Admit::Asking`] and
    /// must bound that wait itself.
    fn admit<'a>(&'a self, key: &'a str) -> Admit<'a>;

    /// Records the outcome of an admitted call: `ok` when the service answered (even with an
    /// error that is the caller's fault), false when it looked unwell.
    fn record(&self, key: &str, ok: bool);

    /// Gives back a half-open probe whose outcome will never be recorded (its call was
    /// cancelled), so another call may probe.
    fn release_probe(&self, key: &str);

    /// The state of `key`'s circuit, as this store knows it now without waiting: a shared
    /// store may answer from what it last read (it documents how old that can be).
    fn state(&self, key: &str) -> BreakerState;

    /// The state of `key`'s circuit, read afresh: a shared store asks the state it shares (and
    /// must bound that wait itself). By default, [`state`](BreakerStore::state).
    fn current_state<'a>(&'a self, key: &'a str) -> BoxFuture<'a, BreakerState> {
        Box::pin(std::future::ready(self.state(key)))
    }
}

/// A change of a service breaker's state, counted as the metric
/// `agent_errors.service_breaker.transitions`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// Failures reached the threshold, or the half-open probe failed.
    Opened,
    /// The cooldown ended and a probe was let through.
    HalfOpened,
    /// A call succeeded on an open or half-open circuit.
    Closed,
}

/// Whose state changed: this process's own breaker, or the one a fleet shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    Local,
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    Shared,
}

impl Change {
    /// Counts this change of `key`'s circuit (the `agent_errors.service_breaker.transitions`
    /// counter). Changes are rare, so the metric's key is built here rather than kept.
    pub(crate) fn count(self, key: &str, scope: Scope) {
        let to = match self {
            Change::Opened => "open",
            Change::HalfOpened => "half_open",
            Change::Closed => "closed",
        };
        let store = match scope {
            Scope::Local => "local",
            Scope::Shared => "shared",
        };
        metrics::counter!(
            "agent_errors.service_breaker.transitions",
            "breaker" => key.to_owned(), "store" => store, "to" => to
        )
        .increment(1);
    }
}
