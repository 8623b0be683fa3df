//! 1,000 replicas of an agent against an upstream that is down for a minute: how much load does
//! the upstream take while it is down, with no breaker, with a breaker per replica, with one
//! breaker shared by the fleet, and with a shared breaker and a shared retry budget?
//!
//! Time is paused (a two-minute simulation runs in seconds) and the shared state is an
//! in-memory store standing in for Redis: each replica sees it through a view cached for
//! 250 ms, as the Redis store does, and the half-open probe is taken from the shared store
//! itself. Every call uses `retry(3)` with the default backoff.
//!
//! ```sh
//! cargo run --release -p agent-errors-examples --bin fleet_simulation
//! ```

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_errors::{
    HttpError, Registry, RunContext, ToolCall, ToolDef,
    breaker::{Admission, Admit, BreakerState, BreakerStore, MemoryStore, ServiceBreaker},
    policy::{Action, Policy, PolicyKey},
    retry::RetryBudget,
};
use tokio::time::Instant;

const REPLICAS: u64 = 1_000;
const CALL_EVERY: Duration = Duration::from_secs(1);
const OUTAGE: (Duration, Duration) = (Duration::from_secs(10), Duration::from_secs(70));
const END: Duration = Duration::from_secs(120);
const STALENESS: Duration = Duration::from_millis(250);

/// What goes wrong with the upstream during the trouble window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Trouble {
    /// Every request fails.
    Outage,
    /// Every other request fails: too few failures in a row for a breaker to open.
    Brownout,
}

/// The upstream, counting what reaches it during the trouble window.
struct Upstream {
    start: Instant,
    trouble: Trouble,
    during_trouble: AtomicU64,
}

impl Upstream {
    fn call(&self) -> Result<&'static str, HttpError> {
        if !(OUTAGE.0..OUTAGE.1).contains(&self.start.elapsed()) {
            return Ok("fine");
        }
        let n = self.during_trouble.fetch_add(1, Ordering::Relaxed);
        if self.trouble == Trouble::Outage || n % 2 == 0 {
            return Err(HttpError::new(503, "upstream down"));
        }
        Ok("fine")
    }
}

/// One replica's view of the shared breaker, behaving as the Redis store does: decisions from
/// a state read at most 250 ms ago, a round trip to read it again (or take the probe), and
/// outcomes reported in the background, arriving a network hop later.
#[derive(Debug)]
struct CachedView {
    shared: Arc<MemoryStore>,
    seen: Mutex<Option<(Instant, BreakerState)>>,
}

/// One way, replica to store.
const HOP: Duration = Duration::from_millis(1);

impl CachedView {
    fn seen(&self) -> std::sync::MutexGuard<'_, Option<(Instant, BreakerState)>> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl BreakerStore for CachedView {
    fn admit<'a>(&'a self, key: &'a str) -> Admit<'a> {
        match *self.seen() {
            Some((at, BreakerState::Closed)) if at.elapsed() < STALENESS => {
                return Admit::Ready(Admission::Allowed);
            }
            Some((at, BreakerState::Open)) if at.elapsed() < STALENESS => {
                return Admit::Ready(Admission::Rejected);
            }
            _ => {}
        }
        Admit::Asking(Box::pin(async move {
            tokio::time::sleep(HOP).await;
            let admission = match self.shared.admit(key) {
                Admit::Ready(admission) => admission,
                Admit::Asking(asking) => asking.await,
            };
            let state = self.shared.state(key);
            tokio::time::sleep(HOP).await;
            *self.seen() = Some((Instant::now(), state));
            admission
        }))
    }

    fn record(&self, key: &str, ok: bool) {
        let (shared, key) = (Arc::clone(&self.shared), key.to_owned());
        tokio::spawn(async move {
            tokio::time::sleep(HOP).await;
            shared.record(&key, ok);
        });
    }

    fn release_probe(&self, key: &str) {
        self.shared.release_probe(key);
    }

    fn state(&self, key: &str) -> BreakerState {
        self.shared.state(key)
    }
}

#[derive(Clone, Copy, Debug)]
enum Fleet {
    NoBreaker,
    LocalBreakers,
    SharedBreaker,
    SharedBreakerAndBudget,
}

fn breaker_settings() -> (NonZeroU32, Duration) {
    (
        NonZeroU32::new(5).expect("5 is not zero"),
        Duration::from_secs(30),
    )
}

struct Outcome {
    during_trouble: u64,
    failed_during_trouble: u64,
    failed_after_recovery: u64,
}

async fn simulate(fleet: Fleet, trouble: Trouble) -> Outcome {
    let upstream = Arc::new(Upstream {
        start: Instant::now(),
        trouble,
        during_trouble: AtomicU64::new(0),
    });
    let tool_upstream = Arc::clone(&upstream);
    let retry = Action::retry(3).expect("3 > 0");
    let tool = ToolDef::new(
        "fetch",
        "Calls the upstream.",
        move |_: serde_json::Value| {
            let upstream = Arc::clone(&tool_upstream);
            async move { upstream.call() }
        },
    )
    .with_breaker_key("upstream")
    .with_policy(Policy::new().on(PolicyKey::Execution, [retry]));
    let registry = Arc::new(Registry::builder().tool(tool).build().expect("one tool"));
    let (threshold, cooldown) = breaker_settings();
    let shared = Arc::new(MemoryStore::new(threshold, cooldown));
    let budget = Arc::new(RetryBudget::default());
    let failed_after_recovery = Arc::new(AtomicU64::new(0));
    let failed_during_trouble = Arc::new(AtomicU64::new(0));

    let mut replicas = tokio::task::JoinSet::new();
    for i in 0..REPLICAS {
        let breaker = match fleet {
            Fleet::NoBreaker => None,
            Fleet::LocalBreakers => Some(Arc::new(
                ServiceBreaker::new(threshold.get(), cooldown).expect("valid settings"),
            )),
            Fleet::SharedBreaker | Fleet::SharedBreakerAndBudget => {
                Some(Arc::new(ServiceBreaker::with_store(CachedView {
                    shared: Arc::clone(&shared),
                    seen: Mutex::new(None),
                })))
            }
        };
        let budget = matches!(fleet, Fleet::SharedBreakerAndBudget).then(|| Arc::clone(&budget));
        let (registry, upstream) = (Arc::clone(&registry), Arc::clone(&upstream));
        let failed = Arc::clone(&failed_after_recovery);
        let failed_early = Arc::clone(&failed_during_trouble);
        replicas.spawn(async move {
            // Replicas call once a second each, spread evenly over the second.
            let mut next = upstream.start + CALL_EVERY * (i as u32) / (REPLICAS as u32);
            while next.duration_since(upstream.start) < END {
                tokio::time::sleep_until(next).await;
                let mut ctx = RunContext::new();
                if let Some(breaker) = &breaker {
                    ctx = ctx.with_service_breaker(Arc::clone(breaker));
                }
                if let Some(budget) = &budget {
                    ctx = ctx.with_retry_budget(Arc::clone(budget));
                }
                let called = upstream.start.elapsed();
                let outcome = registry
                    .execute(&ctx, &ToolCall::new("c", "fetch", "{}"))
                    .await;
                let ok = outcome.result().is_some_and(|r| !r.is_error);
                if !ok && called >= OUTAGE.1 {
                    failed.fetch_add(1, Ordering::Relaxed);
                } else if !ok && called >= OUTAGE.0 {
                    failed_early.fetch_add(1, Ordering::Relaxed);
                }
                next += CALL_EVERY;
            }
        });
    }
    while replicas.join_next().await.is_some() {}
    Outcome {
        during_trouble: upstream.during_trouble.load(Ordering::Relaxed),
        failed_during_trouble: failed_during_trouble.load(Ordering::Relaxed),
        failed_after_recovery: failed_after_recovery.load(Ordering::Relaxed),
    }
}

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() {
    let window = (OUTAGE.1 - OUTAGE.0).as_secs();
    println!(
        "{REPLICAS} replicas, one call per second each, retry(3); trouble for {window} s \
         (outage: every request fails; brownout: every other one does); breaker: 5 failures, \
         30 s cooldown; budget: 20% of calls over 10 s, at least 3; shared state read at most \
         250 ms stale, 1 ms per network hop\n"
    );
    println!(
        "| fleet | outage: requests while down | vs no breaker | calls failed after recovery \
         | brownout: requests | vs no breaker | brownout: calls failed |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    let fleets = [
        Fleet::NoBreaker,
        Fleet::LocalBreakers,
        Fleet::SharedBreaker,
        Fleet::SharedBreakerAndBudget,
    ];
    let (mut outage_base, mut brownout_base) = (None, None);
    for fleet in fleets {
        let outage = simulate(fleet, Trouble::Outage).await;
        let brownout = simulate(fleet, Trouble::Brownout).await;
        let percent =
            |n: u64, base: &mut Option<u64>| 100.0 * n as f64 / *base.get_or_insert(n) as f64;
        println!(
            "| {fleet:?} | {} | {:.2}% | {} | {} | {:.1}% | {} |",
            outage.during_trouble,
            percent(outage.during_trouble, &mut outage_base),
            outage.failed_after_recovery,
            brownout.during_trouble,
            percent(brownout.during_trouble, &mut brownout_base),
            brownout.failed_during_trouble,
        );
    }
}
