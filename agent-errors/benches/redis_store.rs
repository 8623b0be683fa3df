//! What the Redis store costs a call: on the happy path (decided from the cached view, nothing
//! sent) and when something fails (a script round trip to a local `redis-server`), next to the
//! in-memory store. Starts its own `redis-server` on a free loopback port.

use std::hint::black_box;
use std::net::{TcpListener, TcpStream};
use std::num::NonZeroU32;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use agent_errors::{
    Registry, RunContext, ToolCall, ToolDef,
    breaker::{BreakerStore, ServiceBreaker},
    redis::RedisStore,
    retry::RetryBudget,
};
use criterion::{Criterion, criterion_group, criterion_main};

/// Kills the server when the bench ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn redis_server() -> (Server, String) {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port");
    let program = agent_errors_test_support::redis_server()
        .unwrap_or_else(|e| panic!("the bench needs a real `redis-server`: {e}"));
    let child = Command::new(program)
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server starts");
    let server = Server(child);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        std::thread::sleep(Duration::from_millis(10));
    }
    (server, format!("redis://127.0.0.1:{port}/"))
}

async fn forecast(_: serde_json::Value) -> Result<&'static str, std::io::Error> {
    Ok("sunny")
}

fn bench(c: &mut Criterion) {
    let (_server, url) = redis_server();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime");
    let store = rt.block_on(async {
        RedisStore::builder(url)
            .threshold(NonZeroU32::new(u32::MAX).expect("not zero"))
            .connect()
            .await
            .expect("valid settings")
    });
    let budget = RetryBudget::new(1.0, Duration::from_secs(10))
        .expect("in range")
        .with_min_retries(u32::MAX)
        .shared_on(&store);
    let registry = Registry::builder()
        .tool(ToolDef::new("forecast", "Tomorrow's weather.", forecast))
        .build()
        .expect("one tool");
    let call = ToolCall::new("call-1", "forecast", "{}");
    let memory = RunContext::new().with_service_breaker(Arc::new(ServiceBreaker::default()));
    let shared =
        RunContext::new().with_service_breaker(Arc::new(ServiceBreaker::with_store(store.clone())));

    let mut group = c.benchmark_group("redis_store");
    group.bench_function("executor, in-memory breaker", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(registry.execute(&memory, black_box(&call)).await) })
    });
    group.bench_function("executor, Redis breaker (cached)", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(registry.execute(&shared, black_box(&call)).await) })
    });
    group.bench_function("admit + record success (cached)", |b| {
        b.to_async(&rt).iter(|| async {
            black_box(store.admit(black_box("happy")).await);
            store.record("happy", true);
        })
    });
    group.bench_function("record a failure (caller's cost)", |b| {
        b.iter(|| store.record(black_box("failing"), false))
    });
    group.bench_function("breaker script round trip", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(store.shared_state(black_box("failing")).await) })
    });
    group.bench_function("retry budget spend (round trip)", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(budget.try_spend_retry(black_box("failing")).await) })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
