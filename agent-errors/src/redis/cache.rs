//! What this process last heard from the shared store, per breaker key: decisions on the happy
//! path are made from it without a round trip while it is fresh.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use crate::breaker::{Admission, BreakerState};

/// A breaker as the store described it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum View {
    Closed { fails: u32 },
    Open { until: Instant },
    ProbeOut { until: Instant },
    ProbeFree,
}

impl View {
    /// Reads a script's `{code, fails, remaining_ms}` answer, received at `now`. The second
    /// value is true when the probe was granted to the caller.
    pub(crate) fn from_reply(reply: &[i64], now: Instant) -> Option<(View, bool)> {
        let [code, fails, remaining] = *reply else {
            return None;
        };
        let until = now + Duration::from_millis(u64::try_from(remaining).unwrap_or(0));
        let fails = u32::try_from(fails).unwrap_or(u32::MAX);
        Some(match code {
            0 => (View::Closed { fails }, false),
            1 => (View::Open { until }, false),
            2 => (View::ProbeOut { until }, false),
            3 => (View::ProbeFree, false),
            4 => (View::ProbeOut { until }, true),
            _ => return None,
        })
    }

    pub(crate) fn state(self, now: Instant) -> BreakerState {
        match self {
            View::Closed { .. } => BreakerState::Closed,
            View::Open { until } if now < until => BreakerState::Open,
            View::Open { .. } | View::ProbeOut { .. } | View::ProbeFree => BreakerState::HalfOpen,
        }
    }
}

#[derive(Debug)]
struct Entry {
    view: View,
    fetched: Instant,
    /// A call of this process is asking the store: the others decide from the view they have.
    asking: bool,
    /// This process holds the half-open probe.
    probing: bool,
    /// A read for [`ViewCache::read`] is on its way: one at a time per key.
    refreshing: bool,
}

/// The answer from the cache alone, or the need to ask.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Cached {
    Decided(Admission),
    Ask,
}

#[derive(Debug)]
pub(crate) struct ViewCache {
    ttl: Duration,
    entries: Mutex<HashMap<String, Entry>>,
}

impl ViewCache {
    pub(crate) fn new(ttl: Duration) -> Self {
        ViewCache {
            ttl,
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        // Every critical section is a lookup and a few field writes: a panic cannot tear it.
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Decides from the cached view when it is fresh and says enough; otherwise asks, one call
    /// per key at a time (the caller must then call [`ViewCache::asked`]).
    pub(crate) fn decide(&self, key: &str, now: Instant) -> Cached {
        let mut entries = self.lock();
        let Some(entry) = entries.get_mut(key) else {
            entries.insert(key.to_owned(), Entry::asking(now));
            return Cached::Ask;
        };
        let fresh = now.duration_since(entry.fetched) < self.ttl;
        let from_view = match entry.view {
            View::Closed { .. } => Some(Admission::Allowed),
            View::Open { until } | View::ProbeOut { until } if now < until => {
                Some(Admission::Rejected)
            }
            View::Open { .. } | View::ProbeOut { .. } | View::ProbeFree => None,
        };
        match from_view {
            Some(admission) if fresh => Cached::Decided(admission),
            _ if entry.asking => Cached::Decided(from_view.unwrap_or(Admission::Rejected)),
            _ => {
                entry.asking = true;
                Cached::Ask
            }
        }
    }

    /// Stores what the store answered (or only clears the asking mark when it did not).
    pub(crate) fn asked(&self, key: &str, answer: Option<(View, bool)>, now: Instant) {
        let mut entries = self.lock();
        let Some(entry) = entries.get_mut(key) else {
            return;
        };
        entry.asking = false;
        if let Some((view, granted)) = answer {
            entry.view = view;
            entry.fetched = now;
            entry.probing |= granted;
        }
    }

    /// Stores a view the store sent back after a report.
    pub(crate) fn update(&self, key: &str, view: View, now: Instant) {
        if let Some(entry) = self.lock().get_mut(key) {
            entry.view = view;
            entry.fetched = now;
        }
    }

    /// Whether the fleet may have failures to clear, or this process holds the probe: a
    /// success only then needs telling.
    pub(crate) fn success_matters(&self, key: &str) -> bool {
        self.lock()
            .get(key)
            .is_some_and(|e| e.probing || !matches!(e.view, View::Closed { fails: 0 }))
    }

    /// Takes this process's probe mark, if it holds the probe.
    pub(crate) fn take_probe(&self, key: &str) -> bool {
        self.lock()
            .get_mut(key)
            .is_some_and(|e| std::mem::take(&mut e.probing))
    }

    /// The state as last read, and whether a fresh read should be fetched now: the view is
    /// older than the ttl and nobody is reading it already (the caller must then call
    /// [`ViewCache::refreshed`]).
    pub(crate) fn read(&self, key: &str, now: Instant) -> (BreakerState, bool) {
        let mut entries = self.lock();
        let entry = match entries.get_mut(key) {
            Some(entry) => entry,
            None => entries
                .entry(key.to_owned())
                .or_insert_with(|| Entry::unknown(now, self.ttl)),
        };
        let stale = now.duration_since(entry.fetched) >= self.ttl;
        let refresh = stale && !entry.refreshing && !entry.asking;
        entry.refreshing |= refresh;
        (entry.view.state(now), refresh)
    }

    /// Stores a fresh read (or only clears the reading mark when there is none).
    pub(crate) fn refreshed(&self, key: &str, view: Option<View>, now: Instant) {
        if let Some(entry) = self.lock().get_mut(key) {
            entry.refreshing = false;
            if let Some(view) = view {
                entry.view = view;
                entry.fetched = now;
            }
        }
    }

    /// Stores a view read at `now`, for a key this process may not have asked about yet.
    pub(crate) fn store(&self, key: &str, view: View, now: Instant) {
        let mut entries = self.lock();
        let entry = entries
            .entry(key.to_owned())
            .or_insert_with(|| Entry::unknown(now, self.ttl));
        entry.view = view;
        entry.fetched = now;
    }

    /// Every circuit last read open or half-open, as `(key, open until, this process holds the
    /// probe)`, leaving out those Redis has let expire by now (`idle_ttl` after their end).
    pub(crate) fn open_circuits(
        &self,
        now: Instant,
        idle_ttl: Duration,
    ) -> Vec<(String, Instant, bool)> {
        let entries = self.lock();
        entries
            .iter()
            .filter_map(|(key, e)| {
                let until = match e.view {
                    View::Open { until } | View::ProbeOut { until } => until,
                    View::ProbeFree => e.fetched,
                    View::Closed { .. } => return None,
                };
                (now < until + idle_ttl).then(|| (key.clone(), until, e.probing))
            })
            .collect()
    }

    /// Forgets everything: after an outage of the store the views are stale.
    pub(crate) fn clear(&self) {
        self.lock().clear();
    }
}

impl Entry {
    fn asking(now: Instant) -> Self {
        Entry {
            view: View::Closed { fails: 0 },
            fetched: now,
            asking: true,
            probing: false,
            refreshing: false,
        }
    }

    /// A key never read: closed, as the store says of a key it has nothing about, and already
    /// stale, so the first decision asks.
    fn unknown(now: Instant, ttl: Duration) -> Self {
        Entry {
            view: View::Closed { fails: 0 },
            fetched: now.checked_sub(ttl).unwrap_or(now),
            asking: false,
            probing: false,
            refreshing: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_millis(250);

    #[tokio::test(start_paused = true)]
    async fn a_fresh_view_decides_and_a_stale_one_is_asked_for_once() {
        let cache = ViewCache::new(TTL);
        let now = Instant::now();
        assert_eq!(cache.decide("api", now), Cached::Ask);
        // While one call asks, the others go by the view they have.
        assert_eq!(
            cache.decide("api", now),
            Cached::Decided(Admission::Allowed)
        );
        cache.asked("api", Some((View::Closed { fails: 0 }, false)), now);
        assert_eq!(
            cache.decide("api", now),
            Cached::Decided(Admission::Allowed)
        );
        tokio::time::advance(TTL).await;
        assert_eq!(cache.decide("api", Instant::now()), Cached::Ask);
    }

    #[tokio::test(start_paused = true)]
    async fn an_open_view_rejects_until_its_end_then_asks_for_the_probe() {
        let cache = ViewCache::new(Duration::from_secs(60));
        let now = Instant::now();
        cache.decide("api", now);
        let open = View::Open {
            until: now + Duration::from_secs(1),
        };
        cache.asked("api", Some((open, false)), now);
        assert_eq!(
            cache.decide("api", now),
            Cached::Decided(Admission::Rejected)
        );
        assert_eq!(cache.read("api", now).0, BreakerState::Open);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(cache.decide("api", Instant::now()), Cached::Ask);
        assert_eq!(
            cache.decide("api", Instant::now()),
            Cached::Decided(Admission::Rejected)
        );
        let granted = View::ProbeOut {
            until: Instant::now() + Duration::from_secs(5),
        };
        cache.asked("api", Some((granted, true)), Instant::now());
        assert!(cache.success_matters("api"));
        assert!(cache.take_probe("api"));
        assert!(!cache.take_probe("api"));
    }

    #[test]
    fn replies_of_the_wrong_shape_are_not_views() {
        let now = Instant::now();
        assert_eq!(View::from_reply(&[0, 1], now), None);
        assert_eq!(View::from_reply(&[9, 0, 0], now), None);
        assert_eq!(
            View::from_reply(&[0, 2, 0], now),
            Some((View::Closed { fails: 2 }, false))
        );
    }
}
