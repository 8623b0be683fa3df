//! What durable runs cost, every store side by side in one run: a scripted two-turn run (a
//! tool call, then an answer) without checkpoints, with `MemoryCheckpoints`, with
//! `SqliteCheckpoints` on disk, with `PostgresCheckpoints` on loopback, and on Restate (a
//! `restate-server` on loopback, the run one invocation of three journaled steps); and one save of a
//! realistic state (a 20-message transcript of about 8 KB) in each store, PostgreSQL both with
//! its durable defaults and with `synchronous_commit=off`. A run with one tool call saves four
//! checkpoints: at its start, after the turn that asks for the tool, after the tool's result,
//! and at its end. Starts its own PostgreSQL and Restate server the way the tests do.
//!
//! ```text
//! bash scripts/install-test-deps.sh
//! cargo bench -p agent-errors --features sqlite,postgres,restate --bench checkpoints
//! ```

mod on_restate;

#[path = "../../tests/tests/support/postgres.rs"]
#[allow(dead_code)] // the tests' helper: the bench uses only its start
mod postgres_server;

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use agent_errors::checkpoint::{
    Checkpoint, CheckpointStore, MemoryCheckpoints, PostgresCheckpoints, SqliteCheckpoints,
};
use agent_errors::{
    Agent, BoxError, ChatModel, ChatRequest, ChatResponse, Message, RunOptions, ToolCall, ToolDef,
};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use futures_util::future::BoxFuture;
use postgres_server::{PostgresOptions, PostgresServer};

/// Turn 1 calls `fetch`, turn 2 answers with what it returned.
#[derive(Debug)]
struct TwoTurnScript;

impl ChatModel for TwoTurnScript {
    fn chat<'a>(
        &'a self,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChatResponse, BoxError>> {
        let reply = match request.messages.last() {
            Some(Message::Tool(result)) => {
                ChatResponse::text(format!("the page says {}", result.content))
            }
            _ => ChatResponse::tool_calls(vec![ToolCall::new(
                "call_1",
                "fetch",
                r#"{"url": "https://example.invalid/page"}"#,
            )]),
        };
        Box::pin(async move { Ok(reply) })
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct FetchArgs {
    url: String,
}

fn agent(store: Option<Arc<dyn CheckpointStore>>) -> Agent {
    let fetch = ToolDef::new("fetch", "Fetches a page.", |args: FetchArgs| async move {
        Ok::<_, std::io::Error>(format!("<p>{}</p>", args.url.len()))
    });
    let builder = Agent::builder("bench")
        .model(TwoTurnScript)
        .system_prompt("You fetch pages and say what they say.")
        .tool(fetch);
    match store {
        Some(store) => builder.shared_checkpoints(store),
        None => builder,
    }
    .build()
    .expect("a valid agent")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

/// A directory for the SQLite files.
fn scratch() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("agent-errors-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

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

/// The stores under test, opened once for the whole bench.
struct Stores {
    memory: Arc<dyn CheckpointStore>,
    sqlite: Arc<dyn CheckpointStore>,
    postgres: Arc<dyn CheckpointStore>,
    postgres_async_commit: Arc<dyn CheckpointStore>,
}

fn open_stores(rt: &tokio::runtime::Runtime, dir: &std::path::Path, pg: &PostgresServer) -> Stores {
    let config = pg.connection_string();
    let (postgres, postgres_async_commit) = rt.block_on(async {
        let durable = PostgresCheckpoints::connect(&config).await;
        let lax = format!("{config} options='-c synchronous_commit=off'");
        let async_commit = PostgresCheckpoints::connect(&lax).await;
        (durable.expect("connects"), async_commit.expect("connects"))
    });
    Stores {
        memory: Arc::new(MemoryCheckpoints::new()),
        sqlite: Arc::new(SqliteCheckpoints::open(dir.join("runs.db")).expect("a SQLite file")),
        postgres: Arc::new(postgres),
        postgres_async_commit: Arc::new(postgres_async_commit),
    }
}

fn bench(c: &mut Criterion) {
    let server = PostgresServer::start_with(PostgresOptions {
        password: None,
        durable: true,
    });
    let rt = runtime();
    let dir = scratch();
    let stores = open_stores(&rt, &dir, &server);

    let runs: [(&str, Option<&Arc<dyn CheckpointStore>>); 4] = [
        ("none", None),
        ("memory", Some(&stores.memory)),
        ("sqlite", Some(&stores.sqlite)),
        ("postgres", Some(&stores.postgres)),
    ];
    let mut group = c.benchmark_group("durable_run");
    group.throughput(Throughput::Elements(1));
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(5));
    for (name, store) in runs {
        let agent = agent(store.cloned());
        group.bench_function(name, |b| {
            b.iter(|| {
                let outcome = rt.block_on(agent.run_with("fetch it", RunOptions::new()));
                black_box(outcome.result.expect("the run answers"));
            });
        });
    }
    // The same run on Restate: each model request and the tool attempt a journaled step, the
    // run one invocation through the ingress.
    let on_restate = on_restate::OnRestate::start(&rt, agent(None));
    group.bench_function("restate", |b| {
        b.iter(|| black_box(rt.block_on(on_restate.run("fetch it"))));
    });
    drop(on_restate);
    group.finish();

    let state = transcript_state();
    assert!(
        (7_000..10_000).contains(&state.len()),
        "{} bytes",
        state.len()
    );
    let saves: [(&str, &Arc<dyn CheckpointStore>); 4] = [
        ("MemoryCheckpoints", &stores.memory),
        ("SqliteCheckpoints", &stores.sqlite),
        ("PostgresCheckpoints, durable commit", &stores.postgres),
        (
            "PostgresCheckpoints, synchronous_commit=off",
            &stores.postgres_async_commit,
        ),
    ];
    let mut group = c.benchmark_group("checkpoint_save_8KB");
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(5));
    for (name, store) in saves {
        group.bench_function(name, |b| {
            b.to_async(&rt)
                .iter_custom(|iters| time_saves(&**store, &state, iters))
        });
    }
    group.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, bench);
criterion_main!(benches);
