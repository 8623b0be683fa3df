//! The Redis store against a real `redis-server`: several stores on one Redis stand for several
//! processes. Redis keeps real time, so these tests use short real cooldowns and bounded waits.

use crate::support;

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::time::Duration;

use agent_errors::{
    breaker::{Admission, BreakerState, BreakerStore, ServiceBreaker},
    redis::{RedisStore, StoreHealth},
    retry::RetryBudget,
};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use support::{RedisServer, eventually};

const COOLDOWN: Duration = Duration::from_millis(300);
const CACHE_TTL: Duration = Duration::from_millis(50);

/// A store that waits for Redis's answers as long as a loaded machine needs: a test about the
/// fleet's shared state must not see a slow answer turn into a local decision.
async fn store(server: &RedisServer, prefix: &str) -> RedisStore {
    store_with_timeout(server, prefix, PATIENT).await
}

/// A store that gives up on Redis after 50 ms: for the tests about a Redis that hangs.
async fn quick_store(server: &RedisServer, prefix: &str) -> RedisStore {
    store_with_timeout(server, prefix, Duration::from_millis(50)).await
}

/// A store whose commands wait up to `command_timeout`: long, where a test is about a Redis
/// that is gone (refused at once), so that a slow answer on a loaded machine is not an outage.
async fn store_with_timeout(
    server: &RedisServer,
    prefix: &str,
    command_timeout: Duration,
) -> RedisStore {
    RedisStore::builder(server.url())
        .prefix(prefix)
        .threshold(NonZeroU32::new(3).expect("3 is not zero"))
        .cooldown(COOLDOWN)
        .cache_ttl(CACHE_TTL)
        .command_timeout(command_timeout)
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
    // No outcome here may hang on how fast the machine is: a killed Redis refuses at once, so
    // commands get all the time a loaded machine needs (a 50 ms timeout read a slow answer as an
    // outage), and each wait is for the store's own health signal, bounded only as a backstop.
    let a = store_with_timeout(&server, "outage", PATIENT).await;
    let mut health = a.watch_health();
    until_health(&mut health, StoreHealth::Shared).await;
    assert_eq!(a.admit("api").await, Admission::Allowed);

    server.kill();
    // The first call that needs Redis finds it gone...
    tokio::time::sleep(CACHE_TTL).await;
    a.admit("api").await;
    until_health(&mut health, StoreHealth::Local).await;
    // ...and the breaker goes on, locally: three failures open it in this process.
    for _ in 0..3 {
        assert_eq!(a.admit("api").await, Admission::Allowed);
        a.record("api", false);
    }
    assert_eq!(a.admit("api").await, Admission::Rejected);
    assert_eq!(a.state("api"), BreakerState::Open);

    server.restart();
    until_health(&mut health, StoreHealth::Shared).await;
    // The restarted Redis is empty: the shared circuit is closed, and failures count there.
    assert_eq!(a.admit("other").await, Admission::Allowed);
    for _ in 0..3 {
        a.record("other", false);
    }
    shared_state_is(&a, "other", BreakerState::Open).await;
}

/// A command timeout no answer of a live Redis reaches, however loaded the machine.
const PATIENT: Duration = Duration::from_secs(30);

/// Waits for the store's health to become `want`, as the store reports it; the bound is only a
/// backstop against a hung test, far past anything a slow machine needs.
async fn until_health(health: &mut tokio::sync::watch::Receiver<StoreHealth>, want: StoreHealth) {
    let reached = health.wait_for(|now| *now == want);
    tokio::time::timeout(Duration::from_secs(120), reached)
        .await
        .unwrap_or_else(|_| panic!("the store's health never became {want:?}"))
        .expect("the store is alive");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_redis_costs_one_command_timeout_then_decisions_are_local() {
    let server = RedisServer::start();
    let a = quick_store(&server, "hung").await;
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
        quick_store(&server, "cancel").await,
        quick_store(&server, "cancel").await,
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

/// A store whose circuits stay open for a minute: long enough that no assertion races the
/// cooldown on a loaded machine.
async fn slow_cooldown_store(server: &RedisServer, prefix: &str) -> RedisStore {
    RedisStore::builder(server.url())
        .prefix(prefix)
        .threshold(NonZeroU32::new(3).expect("3 is not zero"))
        .cooldown(Duration::from_secs(60))
        .cache_ttl(CACHE_TTL)
        .command_timeout(Duration::from_millis(200))
        .reconnect_every(Duration::from_secs(60))
        .connect()
        .await
        .expect("valid settings")
}

/// Opens `key`'s shared circuit from `store`, and waits until Redis has it open.
async fn open_shared(store: &RedisStore, key: &str) {
    for _ in 0..3 {
        store.record(key, false);
    }
    shared_state_is(store, key, BreakerState::Open).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_process_does_not_call_through_a_shared_circuit_opened_while_redis_restarted() {
    let mut server = RedisServer::start();
    let idle = slow_cooldown_store(&server, "restart").await;
    assert_eq!(idle.admit("api").await, Admission::Allowed);

    // Redis restarts (stopped by PID, started on the same port) while this process is idle;
    // the fleet then opens the circuit on the new server.
    server.restart();
    let other = slow_cooldown_store(&server, "restart").await;
    open_shared(&other, "api").await;

    // The idle process's connection died with the old server: its next call must find the
    // open circuit through a fresh connection, not fall back to its own closed breaker.
    tokio::time::sleep(CACHE_TTL).await;
    assert_eq!(idle.admit("api").await, Admission::Rejected);
    assert_eq!(idle.health(), StoreHealth::Shared);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_redis_is_away_a_call_the_last_shared_state_refused_is_still_refused() {
    let mut server = RedisServer::start();
    let (a, b) = (
        slow_cooldown_store(&server, "away").await,
        slow_cooldown_store(&server, "away").await,
    );
    // `a` never failed itself: only the shared state knows the circuit is open.
    open_shared(&b, "api").await;
    tokio::time::sleep(CACHE_TTL).await;
    assert_eq!(a.admit("api").await, Admission::Rejected);

    server.kill();
    tokio::time::sleep(CACHE_TTL).await;
    assert_eq!(a.admit("api").await, Admission::Rejected);
    assert_eq!(a.health(), StoreHealth::Local);
    assert_eq!(a.admit("api").await, Admission::Rejected);
    assert_eq!(a.state("api"), BreakerState::Open);
    // A key the shared state never refused goes by this process's own breaker.
    assert_eq!(a.admit("other").await, Admission::Allowed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_read_sees_a_circuit_another_process_opened_at_once() {
    let server = RedisServer::start();
    let (a, b) = (
        slow_cooldown_store(&server, "read").await,
        slow_cooldown_store(&server, "read").await,
    );
    assert_eq!(a.admit("api").await, Admission::Allowed);
    let breaker = ServiceBreaker::with_store(a.clone());
    assert_eq!(breaker.current_state("api").await, BreakerState::Closed);

    open_shared(&b, "api").await;
    assert_eq!(a.current_state("api").await, BreakerState::Open);
    assert_eq!(breaker.current_state("api").await, BreakerState::Open);
    // The read is kept: the cached state, what `state` answers without a round trip, is
    // the fresh one.
    assert_eq!(a.state("api"), BreakerState::Open);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cached_state_of_a_key_nobody_calls_is_read_again_after_the_cache_ttl() {
    let server = RedisServer::start();
    let (a, b) = (
        slow_cooldown_store(&server, "cached").await,
        slow_cooldown_store(&server, "cached").await,
    );
    assert_eq!(a.admit("api").await, Admission::Allowed);
    open_shared(&b, "api").await;
    // No call of `api` in `a`: polling its cached state alone catches up within the cache
    // ttl and one round trip.
    eventually(
        Duration::from_secs(5),
        "`a` sees the circuit open",
        async || a.state("api") == BreakerState::Open,
    )
    .await;
}

/// The value of each `agent_errors.service_breaker.transitions` counter, by its labels.
fn transitions(recorder: &DebuggingRecorder) -> BTreeMap<String, u64> {
    recorder
        .snapshotter()
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| key.key().name() == "agent_errors.service_breaker.transitions")
        .map(|(key, _, _, value)| {
            let labels: Vec<String> = key
                .key()
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            let DebugValue::Counter(n) = value else {
                panic!("a counter")
            };
            (labels.join(","), n)
        })
        .collect()
}

// One thread, so the background task counts on the recorder this test installs.
#[tokio::test(flavor = "current_thread")]
async fn the_fleet_counts_each_change_of_a_shared_circuit_once_in_the_process_that_made_it() {
    let recorder = DebuggingRecorder::new();
    let _guard = metrics::set_default_local_recorder(&recorder);
    let server = RedisServer::start();
    let (a, b) = (
        store(&server, "metered").await,
        store(&server, "metered").await,
    );
    a.record("api", false);
    b.record("api", false);
    a.record("api", false);
    shared_state_is(&a, "api", BreakerState::Open).await;
    tokio::time::sleep(COOLDOWN + CACHE_TTL).await;
    assert_eq!(b.admit("api").await, Admission::Probe);
    assert_eq!(a.admit("api").await, Admission::Rejected);
    b.record("api", true);
    shared_state_is(&a, "api", BreakerState::Closed).await;

    let counted = transitions(&recorder);
    let expected: BTreeMap<String, u64> = ["open", "half_open", "closed"]
        .into_iter()
        .map(|to| (format!("breaker=api,store=shared,to={to}"), 1))
        .collect();
    assert_eq!(counted, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alone_after_redis_left_a_shared_open_circuit_ends_in_one_probe_not_a_flood() {
    // The circuit must still be open after Redis is killed and stopped answering, which takes
    // longer than the usual 300 ms cooldown on a loaded machine: this one waits 2 s.
    const COOLDOWN: Duration = Duration::from_secs(2);
    let mut server = RedisServer::start();
    let alone = async || {
        RedisStore::builder(server.url())
            .prefix("alone")
            .threshold(NonZeroU32::new(3).expect("3 is not zero"))
            .cooldown(COOLDOWN)
            .cache_ttl(CACHE_TTL)
            .command_timeout(PATIENT)
            .reconnect_every(Duration::from_millis(50))
            .connect()
            .await
            .expect("valid settings")
    };
    let (a, b) = (alone().await, alone().await);
    open_shared(&b, "api").await;
    tokio::time::sleep(CACHE_TTL).await;
    assert_eq!(a.admit("api").await, Admission::Rejected);

    server.kill();
    tokio::time::sleep(CACHE_TTL).await;
    assert_eq!(a.admit("api").await, Admission::Rejected);
    assert_eq!(a.health(), StoreHealth::Local);
    // Past the cooldown Redis gave the circuit, the fleet would let one probe through: so
    // does this process, alone.
    tokio::time::sleep(COOLDOWN).await;
    assert_eq!(a.state("api"), BreakerState::HalfOpen);
    assert_eq!(a.admit("api").await, Admission::Probe);
    assert_eq!(a.admit("api").await, Admission::Rejected);
    a.record("api", true);
    assert_eq!(a.admit("api").await, Admission::Allowed);
}
