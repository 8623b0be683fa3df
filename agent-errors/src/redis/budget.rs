//! Retry budgets on Redis: calls are counted locally and sent in batches, retries are taken by
//! a script so the whole fleet spends from one window.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use tokio::time::MissedTickBehavior;

use super::{Inner, RedisStore, millis, scripts};
use crate::budget::RetryBudget;
use crate::budget::{BUCKETS, BudgetLimits, SharedWindow};
use crate::error::BoxFuture;

/// The Redis half of a [`RetryBudget`](crate::retry::RetryBudget).
pub(crate) struct SharedBudget {
    inner: Arc<Inner>,
    /// Calls not yet sent, per key.
    pending: Arc<Mutex<HashMap<String, u64>>>,
}

impl fmt::Debug for SharedBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedBudget")
            .field("prefix", &self.inner.settings.prefix)
            .finish_non_exhaustive()
    }
}

impl SharedBudget {
    /// Sends the counted calls every cache ttl from a task of the current runtime; outside one,
    /// calls are sent with the next retry instead.
    pub(crate) fn new(store: &RedisStore, limits: BudgetLimits) -> Self {
        let budget = SharedBudget {
            inner: Arc::clone(&store.inner),
            pending: Arc::default(),
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (inner, pending) = (
                Arc::downgrade(&budget.inner),
                Arc::downgrade(&budget.pending),
            );
            runtime.spawn(flush_every_ttl(inner, pending, limits));
        }
        budget
    }

    fn record(&self, key: &str) {
        let mut pending = lock(&self.pending);
        match pending.get_mut(key) {
            Some(n) => *n += 1,
            None => {
                pending.insert(key.to_owned(), 1);
            }
        }
    }

    /// Takes a retry from the fleet's window under `limits` (the budget's, which may have
    /// changed since); `None` when Redis could not answer.
    async fn spend(&self, key: &str, limits: BudgetLimits) -> Option<bool> {
        if !self.inner.is_up() {
            return None;
        }
        let calls = lock(&self.pending).remove(key).unwrap_or(0);
        let reply = send(&self.inner, limits, key, calls, true).await?;
        Some(reply.first() == Some(&1))
    }
}

impl SharedWindow for SharedBudget {
    fn record_call(&self, key: &str) {
        self.record(key);
    }

    fn try_spend<'a>(&'a self, key: &'a str, limits: BudgetLimits) -> BoxFuture<'a, Option<bool>> {
        Box::pin(self.spend(key, limits))
    }
}

impl RetryBudget {
    /// Spends from one window shared by every process on `store` (same Redis, same prefix)
    /// instead of this process's own. Calls are sent in batches every
    /// [`cache_ttl`](crate::redis::RedisStoreBuilder::cache_ttl), so the fleet's window may miss the
    /// last moment's calls (it errs towards fewer retries); each retry is one round trip, and
    /// when Redis cannot answer the budget decides from this process's window.
    #[must_use]
    pub fn shared_on(mut self, store: &RedisStore) -> Self {
        self.shared = Some(Box::new(SharedBudget::new(store, self.limits)));
        self
    }
}

fn lock(pending: &Mutex<HashMap<String, u64>>) -> MutexGuard<'_, HashMap<String, u64>> {
    // Every critical section is one insert or a swap: a panic cannot tear it.
    pending.lock().unwrap_or_else(|p| p.into_inner())
}

/// Adds `calls` to `key`'s window and, when `spend`, takes a retry: `{granted, calls, retries}`.
async fn send(
    inner: &Inner,
    limits: BudgetLimits,
    key: &str,
    calls: u64,
    spend: bool,
) -> Option<Vec<i64>> {
    let name = format!("{}:budget:{key}", inner.settings.prefix);
    let mut script = scripts::BUDGET_SCRIPT.key(name);
    script
        .arg(millis(limits.bucket()))
        .arg(BUCKETS)
        .arg(limits.ratio)
        .arg(limits.min_retries)
        .arg(calls)
        .arg(u8::from(spend));
    inner.invoke(&mut script).await.ok()
}

async fn flush_every_ttl(
    inner: Weak<Inner>,
    pending: Weak<Mutex<HashMap<String, u64>>>,
    limits: BudgetLimits,
) {
    let Some(every) = inner.upgrade().map(|i| i.settings.cache_ttl) else {
        return;
    };
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let (Some(inner), Some(pending)) = (inner.upgrade(), pending.upgrade()) else {
            return;
        };
        let batch = std::mem::take(&mut *lock(&pending));
        // While Redis is away the local window counts these calls; the fleet's loses them.
        if !inner.is_up() {
            continue;
        }
        for (key, calls) in batch {
            send(&inner, limits, &key, calls, false).await;
        }
    }
}
