//! The store's background task: sends outcome reports to Redis off the calls' path, and while
//! Redis is away, tries it again every so often.

use std::sync::Weak;

use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior};

use super::cache::View;
use super::{Inner, millis, scripts};
use crate::breaker::{Change, Scope};

/// What the calls hand to the background task.
#[derive(Debug)]
pub(crate) enum Job {
    /// An admitted call's outcome.
    Report { key: String, ok: bool, probe: bool },
    /// A probe that will never report.
    Release { key: String },
    /// A cached view that aged past the cache ttl while someone read it.
    Refresh { key: String },
}

/// Runs until the store is dropped (its sender closes the queue).
pub(crate) async fn run(store: Weak<Inner>, mut queue: mpsc::Receiver<Job>) {
    let every = match store.upgrade() {
        Some(inner) => inner.settings.reconnect_every,
        None => return,
    };
    let mut retry = tokio::time::interval(every);
    retry.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            job = queue.recv() => {
                let (Some(job), Some(inner)) = (job, store.upgrade()) else {
                    return;
                };
                // While Redis is away the local breakers have the outcome already.
                if inner.is_up() {
                    inner.handle(job).await;
                }
            }
            _ = retry.tick() => {
                let Some(inner) = store.upgrade() else {
                    return;
                };
                if !inner.is_up() {
                    inner.ping().await;
                }
            }
        }
    }
}

impl Inner {
    async fn handle(&self, job: Job) {
        let s = &self.settings;
        match job {
            Job::Report { key, ok, probe } => {
                let mut script = scripts::REPORT_SCRIPT.key(self.breaker_key(&key));
                script
                    .arg(u8::from(ok))
                    .arg(u8::from(probe))
                    .arg(&self.token)
                    .arg(s.threshold.get())
                    .arg(millis(s.cooldown))
                    .arg(millis(s.idle_ttl));
                let reply: Option<Vec<i64>> = self.invoke(&mut script).await.ok();
                if let Some(reply) = reply {
                    // The script says whether this report opened or closed the circuit: the
                    // fleet counts each change once, in the process that caused it.
                    let change = match reply.get(3) {
                        Some(1) => Some(Change::Opened),
                        Some(2) => Some(Change::Closed),
                        _ => None,
                    };
                    if let Some(change) = change {
                        change.count(&key, Scope::Shared);
                    }
                    self.apply(&key, reply.get(..3));
                }
            }
            Job::Release { key } => {
                let mut script = scripts::RELEASE_SCRIPT.key(self.breaker_key(&key));
                script.arg(&self.token);
                let reply: Option<Vec<i64>> = self.invoke(&mut script).await.ok();
                self.apply(&key, reply.as_deref());
            }
            Job::Refresh { key } => {
                let mut script = scripts::VIEW_SCRIPT.key(self.breaker_key(&key));
                let reply: Option<Vec<i64>> = self.invoke(&mut script).await.ok();
                let now = Instant::now();
                let view = reply
                    .and_then(|r| View::from_reply(&r, now))
                    .map(|(v, _)| v);
                self.cache.refreshed(&key, view, now);
            }
        }
    }

    /// Keeps the view Redis sent back, so this process learns of an opening it caused at once.
    fn apply(&self, key: &str, reply: Option<&[i64]>) {
        let now = Instant::now();
        if let Some((view, _)) = reply.and_then(|r| View::from_reply(r, now)) {
            self.cache.update(key, view, now);
        }
    }
}
