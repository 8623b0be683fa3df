//! What one checkpoint save costs, per store, side by side: in memory, and PostgreSQL on
//! loopback with its durable defaults (each save waits for its WAL flush) and with
//! `synchronous_commit=off`. The state is a realistic one: a 20-message transcript of about
//! 8 KB. Starts its own PostgreSQL the way the tests do.

#[path = "../../tests/tests/support/postgres.rs"]
#[allow(dead_code)] // the tests' helper: the bench uses only its start
mod postgres_server;

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use agent_errors::checkpoint::{
    Checkpoint, CheckpointStore, MemoryCheckpoints, PostgresCheckpoints,
};
use criterion::{Criterion, criterion_group, criterion_main};
use postgres_server::{PostgresOptions, PostgresServer};

/// A transcript of 20 messages, serialized as the run's state would be: about 8 KB of JSON.
fn transcript_state() -> Vec<u8> {
    let messages: Vec<serde_json::Value> = (0..20)
        .map(|n| {
            let role = ["user", "assistant", "tool"][n % 3];
            let content = format!(
                "Message {n}: the order 48213 was shipped on 2026-11-02 from the Lyon warehouse; \
                 the carrier reports a delay at the sorting centre, the customer asked twice \
                 for a refund of the shipping fee and for a new delivery date, and the tool \
                 answered with the tracking history of the parcel and its current status. {}",
                "x".repeat(60)
            );
            serde_json::json!({ "role": role, "content": content, "tool_call_id": format!("call-{n}") })
        })
        .collect();
    let state = serde_json::json!({ "run_id": "bench", "turn": 10, "messages": messages });
    serde_json::to_vec(&state).expect("JSON serializes")
}

/// Times `iters` saves of one fresh run, after its first save (an insert, not timed): each
/// timed save is the update that follows the one before.
async fn time_saves(store: &dyn CheckpointStore, state: &[u8], iters: u64) -> Duration {
    static RUN: AtomicU64 = AtomicU64::new(0);
    let mut checkpoint = Checkpoint {
        run_id: format!("bench-{}", RUN.fetch_add(1, Ordering::Relaxed)),
        sequence: 0,
        state: state.to_vec(),
    };
    store.save(&checkpoint).await.expect("the first save");
    let start = Instant::now();
    for _ in 0..iters {
        checkpoint.sequence += 1;
        black_box(store.save(black_box(&checkpoint)).await).expect("the next save follows");
    }
    start.elapsed()
}

fn bench(c: &mut Criterion) {
    let server = PostgresServer::start_with(PostgresOptions {
        password: None,
        durable: true,
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime");
    let config = server.connection_string();
    let (durable, async_commit) = rt.block_on(async {
        let durable = PostgresCheckpoints::connect(&config).await;
        let lax = format!("{config} options='-c synchronous_commit=off'");
        let async_commit = PostgresCheckpoints::connect(&lax).await;
        (durable.expect("connects"), async_commit.expect("connects"))
    });
    let memory = MemoryCheckpoints::new();
    let state = transcript_state();
    assert!(
        (7_000..10_000).contains(&state.len()),
        "{} bytes",
        state.len()
    );

    let stores: [(&str, &dyn CheckpointStore); 3] = [
        ("MemoryCheckpoints", &memory),
        ("PostgresCheckpoints, durable commit", &durable),
        ("PostgresCheckpoints, synchronous_commit=off", &async_commit),
    ];
    let mut group = c.benchmark_group("checkpoint_save_8KB");
    for (name, store) in stores {
        group.bench_function(name, |b| {
            b.to_async(&rt)
                .iter_custom(|iters| time_saves(store, &state, iters))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
