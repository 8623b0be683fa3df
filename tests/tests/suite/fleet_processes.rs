//! Several OS processes of an agent (`fleet_agent`) against one real Redis, calling a loopback
//! upstream that is down. Every assertion is on what the upstream recorded or on what the
//! processes answered; real time is used only where processes and sockets need it, and every
//! wait is bounded.

use crate::support;

use std::collections::HashSet;
use std::process::Stdio;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_errors::{breaker::BreakerState, redis::RedisStore};
use support::{RedisServer, eventually};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::TcpListener;
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

const CACHE_TTL: Duration = Duration::from_millis(50);

/// A loopback HTTP upstream answering every request with one status, recording each request's
/// path (`/<process>/<call>`).
struct FaultServer {
    addr: String,
    status: Arc<AtomicU16>,
    seen: Arc<Mutex<Vec<String>>>,
}

impl FaultServer {
    async fn start(status: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let addr = listener.local_addr().expect("bound").to_string();
        let (status, seen) = (Arc::new(AtomicU16::new(status)), Arc::default());
        let server = FaultServer {
            addr,
            status: Arc::clone(&status),
            seen: Arc::clone(&seen),
        };
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let (status, seen) = (Arc::clone(&status), Arc::clone(&seen));
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buf = [0u8; 512];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buf[..n]),
                        }
                    }
                    let text = String::from_utf8_lossy(&request);
                    let path = text.split_whitespace().nth(1).unwrap_or("?").to_owned();
                    seen.lock().expect("not poisoned").push(path);
                    let code = status.load(Ordering::SeqCst);
                    let response = format!(
                        "HTTP/1.1 {code} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    );
                    let _ = stream.write_all(response.as_bytes()).await;
                });
            }
        });
        server
    }

    fn requests(&self) -> Vec<String> {
        self.seen.lock().expect("not poisoned").clone()
    }

    fn set_status(&self, status: u16) {
        self.status.store(status, Ordering::SeqCst);
    }
}

/// One `fleet_agent` process, killed when dropped.
struct Agent {
    name: &'static str,
    _child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
}

struct FleetSettings<'a> {
    redis: &'a RedisServer,
    upstream: &'a FaultServer,
    prefix: &'a str,
    threshold: u32,
    cooldown: Duration,
    attempts: u32,
}

impl Agent {
    async fn spawn(name: &'static str, s: &FleetSettings<'_>) -> Agent {
        let mut child = Command::new(env!("CARGO_BIN_EXE_fleet_agent"))
            .env("FLEET_REDIS_URL", s.redis.url())
            .env("FLEET_UPSTREAM", &s.upstream.addr)
            .env("FLEET_NAME", name)
            .env("FLEET_PREFIX", s.prefix)
            .env("FLEET_THRESHOLD", s.threshold.to_string())
            .env("FLEET_COOLDOWN_MS", s.cooldown.as_millis().to_string())
            .env("FLEET_CACHE_TTL_MS", CACHE_TTL.as_millis().to_string())
            .env("FLEET_ATTEMPTS", s.attempts.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the fleet_agent binary starts");
        let stdin = child.stdin.take().expect("piped");
        let stdout = BufReader::new(child.stdout.take().expect("piped")).lines();
        let mut agent = Agent {
            name,
            _child: child,
            stdin,
            stdout,
        };
        assert_eq!(agent.read().await, "ready", "{name} did not start");
        agent
    }

    async fn read(&mut self) -> String {
        let line = tokio::time::timeout(Duration::from_secs(20), self.stdout.next_line()).await;
        match line {
            Ok(Ok(Some(line))) => line,
            other => panic!("{} gave no answer: {other:?}", self.name),
        }
    }

    async fn send(&mut self, id: u64) {
        let line = format!("call {id}\n");
        self.stdin
            .write_all(line.as_bytes())
            .await
            .expect("the agent reads its stdin");
    }

    async fn call(&mut self, id: u64) -> String {
        self.send(id).await;
        self.read().await
    }
}

/// Every agent calls at once; their answers in order.
async fn round(fleet: &mut [Agent], id: u64) -> Vec<String> {
    for agent in fleet.iter_mut() {
        agent.send(id).await;
    }
    let mut answers = Vec::new();
    for agent in fleet.iter_mut() {
        answers.push(agent.read().await);
    }
    answers
}

async fn observer(redis: &RedisServer, prefix: &str) -> RedisStore {
    RedisStore::builder(redis.url())
        .prefix(prefix)
        .command_timeout(Duration::from_millis(500))
        .connect()
        .await
        .expect("valid settings")
}

async fn shared_state_is(store: &RedisStore, want: BreakerState) {
    let what = format!("the upstream's circuit is {want:?} on Redis");
    eventually(Duration::from_secs(10), &what, async || {
        store.shared_state("upstream").await.ok() == Some(want)
    })
    .await;
}

fn count(requests: &[String], process: &str) -> usize {
    let prefix = format!("/{process}/");
    requests.iter().filter(|r| r.starts_with(&prefix)).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_opens_together_and_probes_once_after_the_cooldown() {
    let redis = RedisServer::start();
    let upstream = FaultServer::start(503).await;
    let settings = FleetSettings {
        redis: &redis,
        upstream: &upstream,
        prefix: "breaker",
        threshold: 4,
        cooldown: Duration::from_millis(1500),
        attempts: 1,
    };
    let mut fleet = Vec::new();
    for name in ["a", "b", "c"] {
        fleet.push(Agent::spawn(name, &settings).await);
    }
    let observer = observer(&redis, "breaker").await;

    // a, b, c, a: four failures cross the threshold, and no process made four on its own.
    for (id, i) in [0, 1, 2, 0].into_iter().enumerate() {
        assert_eq!(fleet[i].call(id as u64).await, "failed 1");
    }
    shared_state_is(&observer, BreakerState::Open).await;
    let seen = upstream.requests();
    assert_eq!(seen.len(), 4);
    assert_eq!(
        [count(&seen, "a"), count(&seen, "b"), count(&seen, "c")],
        [2, 1, 1]
    );

    // Past the staleness bound every process rejects, and the upstream hears nothing.
    tokio::time::sleep(CACHE_TTL * 2).await;
    for id in 10..13 {
        assert_eq!(round(&mut fleet, id).await, ["rejected"; 3]);
    }
    assert_eq!(upstream.requests().len(), 4);

    // After the cooldown all three keep calling at once: exactly one call probes, fleet-wide.
    shared_state_is(&observer, BreakerState::HalfOpen).await;
    let mut answers = Vec::new();
    for id in 20..30 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        answers.extend(round(&mut fleet, id).await);
    }
    let probes: Vec<_> = answers.iter().filter(|a| *a != "rejected").collect();
    assert_eq!(probes, ["failed 1"], "{answers:?}");
    assert_eq!(upstream.requests().len(), 5);

    // The upstream recovers: the next probe succeeds and the circuit closes for everyone.
    upstream.set_status(200);
    shared_state_is(&observer, BreakerState::HalfOpen).await;
    let mut id = 100;
    let what = "a probe closes the circuit";
    eventually(Duration::from_secs(10), what, async || {
        id += 1;
        round(&mut fleet, id).await.contains(&"ok".to_owned())
    })
    .await;
    shared_state_is(&observer, BreakerState::Closed).await;
    tokio::time::sleep(CACHE_TTL * 2).await;
    assert_eq!(round(&mut fleet, 200).await, ["ok"; 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_retry_budget_holds_the_fleets_retries_under_its_share_of_calls() {
    let redis = RedisServer::start();
    let upstream = FaultServer::start(503).await;
    let settings = FleetSettings {
        redis: &redis,
        upstream: &upstream,
        prefix: "budget",
        // The breaker never opens here: only the budget limits the retries.
        threshold: 100_000,
        cooldown: Duration::from_secs(60),
        attempts: 3,
    };
    let mut fleet = Vec::new();
    for name in ["a", "b", "c"] {
        fleet.push(Agent::spawn(name, &settings).await);
    }
    const CALLS: u64 = 20;
    for id in 0..CALLS {
        for answer in round(&mut fleet, id).await {
            assert!(answer.starts_with("failed"), "{answer}");
        }
    }

    let seen = upstream.requests();
    let calls = seen.iter().collect::<HashSet<_>>().len();
    let retries = seen.len() - calls;
    assert_eq!(calls, 3 * CALLS as usize);
    // 20% of the fleet's 60 calls is 12 retries; without the budget there would be 120.
    let allowed = (calls / 5).max(3);
    eprintln!("the fleet made {calls} calls and {retries} retries (at most {allowed} allowed)");
    assert!(retries <= allowed, "{retries} retries for {calls} calls");
    assert!(
        retries >= 3,
        "the floor lets some retries through: {retries}"
    );
}
