//! The Redis store against a real `redis-server`: several stores on one Redis stand for several
//! processes. Redis keeps real time, so these tests use short real cooldowns and bounded waits.

mod support;

use std::num::NonZeroU32;
use std::time::Duration;

use agent_errors::{Admission, BreakerState, BreakerStore, RedisStore, RetryBudget, StoreHealth};
use support::{RedisServer, eventually};

const COOLDOWN: Duration = Duration::from_millis(300);
const CACHE_TTL: Duration = Duration::from_millis(50);

async fn store(server: &RedisServer, prefix: &str) -> RedisStore {
    RedisStore::builder(server.url())
        .prefix(prefix)
        .threshold(NonZeroU32::new(3).expect("3 is not zero"))
        .cooldown(COOLDOWN)
        .cache_ttl(CACHE_TTL)
        .command_timeout(Duration::from_millis(50))
        .reconnect_every(Duration::from_millis(50))
        .connect()
        .await
        .expect("valid settings")
}

async fn shared_state_is(store: &RedisStore, key: &str, want: BreakerState) {
    let what = format!("`{key}` is {want:?} on Redis");
    eventually(Duration::from_secs(5), &what, async || {
        store.shared_state(key).await.ok() == Some(want)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_from_several_processes_open_one_circuit_and_one_probe_runs() {
    let server = RedisServer::start();
    let (a, b, c) = (
        store(&server, "open").await,
        store(&server, "open").await,
        store(&server, "open").await,
    );
    for s in [&a, &b, &c] {
        assert_eq!(s.admit("api").await, Admission::Allowed);
    }
    // One failure each: no process alone reached the threshold of 3, the fleet did.
    a.record("api", false);
    b.record("api", false);
    c.record("api", false);
    shared_state_is(&a, "api", BreakerState::Open).await;

    // Once its view is older than the cache ttl, every process rejects.
    tokio::time::sleep(CACHE_TTL).await;
    for s in [&a, &b, &c] {
        assert_eq!(s.admit("api").await, Admission::Rejected);
    }

    // After the cooldown, all ask at once: exactly one gets the probe.
    shared_state_is(&a, "api", BreakerState::HalfOpen).await;
    tokio::time::sleep(CACHE_TTL).await;
    let (x, y, z) = tokio::join!(a.admit("api"), b.admit("api"), c.admit("api"));
    let answers = [x, y, z];
    let probes = answers.iter().filter(|&&x| x == Admission::Probe).count();
    assert_eq!(probes, 1, "{answers:?}");
    let prober = [&a, &b, &c][answers
        .iter()
        .position(|&x| x == Admission::Probe)
        .unwrap_or(0)];

    // The probe succeeds: the circuit closes for everyone.
    prober.record("api", true);
    shared_state_is(&a, "api", BreakerState::Closed).await;
    tokio::time::sleep(CACHE_TTL).await;
    for s in [&a, &b, &c] {
        assert_eq!(s.admit("api").await, Admission::Allowed);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_given_back_can_be_taken_by_another_process() {
    let server = RedisServer::start();
    let (a, b) = (
        store(&server, "release").await,
        store(&server, "release").await,
    );
    for _ in 0..3 {
        a.admit("api").await;
        a.record("api", false);
    }
    shared_state_is(&a, "api", BreakerState::Open).await;
    tokio::time::sleep(COOLDOWN + CACHE_TTL).await;
    assert_eq!(a.admit("api").await, Admission::Probe);
    assert_eq!(b.admit("api").await, Admission::Rejected);
    a.release_probe("api");
    let what = "the released probe is taken by the other process";
    eventually(Duration::from_secs(5), what, async || {
        tokio::time::sleep(CACHE_TTL).await;
        b.admit("api").await == Admission::Probe
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_redis_falls_back_to_local_state_and_sharing_resumes_when_it_returns() {
    let mut server = RedisServer::start();
    let a = store(&server, "outage").await;
    assert_eq!(a.health(), StoreHealth::Shared);
    assert_eq!(a.admit("api").await, Admission::Allowed);

    server.kill();
    // The first call that needs Redis finds it gone within one command timeout...
    let what = "the store notices Redis is gone";
    eventually(Duration::from_secs(5), what, async || {
        tokio::time::sleep(CACHE_TTL).await;
        a.admit("api").await;
        a.health() == StoreHealth::Local
    })
    .await;
    // ...and the breaker goes on, locally: three failures open it in this process.
    for _ in 0..3 {
        assert_eq!(a.admit("api").await, Admission::Allowed);
        a.record("api", false);
    }
    assert_eq!(a.admit("api").await, Admission::Rejected);
    assert_eq!(a.state("api"), BreakerState::Open);

    server.restart();
    let mut health = a.watch_health();
    let what = "the store shares state again";
    eventually(Duration::from_secs(10), what, async || {
        *health.borrow_and_update() == StoreHealth::Shared
    })
    .await;
    // The restarted Redis is empty: the shared circuit is closed, and failures count there.
    assert_eq!(a.admit("other").await, Admission::Allowed);
    for _ in 0..3 {
        a.record("other", false);
    }
    shared_state_is(&a, "other", BreakerState::Open).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_redis_costs_one_command_timeout_then_decisions_are_local() {
    let server = RedisServer::start();
    let a = store(&server, "hung").await;
    assert_eq!(a.admit("api").await, Admission::Allowed);

    server.freeze();
    tokio::time::sleep(CACHE_TTL).await;
    let started = std::time::Instant::now();
    assert_eq!(a.admit("api").await, Admission::Allowed);
    // Bounded by the 50 ms command timeout (generous margin for a loaded machine).
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(a.health(), StoreHealth::Local);
    // Later calls do not wait at all: they never ask Redis while it is away.
    assert_eq!(a.admit("api").await, Admission::Allowed);

    server.thaw();
    let mut health = a.watch_health();
    let what = "the store shares state again";
    eventually(Duration::from_secs(10), what, async || {
        *health.borrow_and_update() == StoreHealth::Shared
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_retry_budget_spends_from_one_window_for_the_fleet() {
    let server = RedisServer::start();
    let (a, b) = (
        store(&server, "budget").await,
        store(&server, "budget").await,
    );
    let budget = |s: &RedisStore| {
        RetryBudget::new(0.1, Duration::from_secs(60))
            .expect("in range")
            .with_min_retries(1)
            .shared_on(s)
    };
    let (ba, bb) = (budget(&a), budget(&b));
    for _ in 0..20 {
        ba.record_call("api");
    }
    // The calls of one process pay for the retries of the other: 10% of 20 is 2.
    assert!(ba.try_spend_retry("api").await);
    assert!(bb.try_spend_retry("api").await);
    assert!(!bb.try_spend_retry("api").await);
    assert!(!ba.try_spend_retry("api").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cancelled_while_asking_redis_does_not_freeze_the_view() {
    let server = RedisServer::start();
    let (a, b) = (
        store(&server, "cancel").await,
        store(&server, "cancel").await,
    );
    assert_eq!(a.admit("api").await, Admission::Allowed);

    server.freeze();
    tokio::time::sleep(CACHE_TTL).await;
    let cancelled = tokio::time::timeout(Duration::from_millis(5), a.admit("api")).await;
    assert!(
        cancelled.is_err(),
        "the ask was still waiting on the frozen server"
    );
    server.thaw();
    assert_eq!(a.health(), StoreHealth::Shared);

    for _ in 0..3 {
        b.record("api", false);
    }
    shared_state_is(&b, "api", BreakerState::Open).await;
    // The cancelled ask did not leave `a` deciding from its old view for good.
    tokio::time::sleep(CACHE_TTL).await;
    assert_eq!(a.admit("api").await, Admission::Rejected);
}
