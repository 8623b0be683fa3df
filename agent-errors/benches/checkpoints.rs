//! What durable runs cost: a scripted two-turn run (a tool call, then an answer) without
//! checkpoints, with `MemoryCheckpoints` and with `SqliteCheckpoints` on disk, side by side in
//! one run; and one checkpoint save of such a run's state in each store. A run with one tool
//! call saves four checkpoints: at its start, after the turn that asks for the tool, after the
//! tool's result, and at its end.
//!
//! ```text
//! cargo bench -p agent-errors --features sqlite --bench checkpoints
//! ```

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use agent_errors::checkpoint::{Checkpoint, CheckpointStore, MemoryCheckpoints, SqliteCheckpoints};
use agent_errors::{
    Agent, BoxError, ChatModel, ChatRequest, ChatResponse, Message, RunOptions, ToolCall, ToolDef,
};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use futures_util::future::BoxFuture;

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

/// A directory for the SQLite file, beside the build's other outputs.
fn scratch() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("agent-errors-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

fn runs(c: &mut Criterion) {
    let rt = runtime();
    let dir = scratch();
    let sqlite: Arc<dyn CheckpointStore> =
        Arc::new(SqliteCheckpoints::open(dir.join("runs.db")).expect("a SQLite file"));
    let stores: [(&str, Option<Arc<dyn CheckpointStore>>); 3] = [
        ("none", None),
        ("memory", Some(Arc::new(MemoryCheckpoints::new()))),
        ("sqlite", Some(sqlite)),
    ];
    let mut group = c.benchmark_group("durable_run");
    group.throughput(Throughput::Elements(1));
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(5));
    for (name, store) in stores {
        let agent = agent(store);
        group.bench_function(name, |b| {
            b.iter(|| {
                let outcome = rt.block_on(agent.run_with("fetch it", RunOptions::new()));
                black_box(outcome.result.expect("the run answers"));
            });
        });
    }
    group.finish();

    // One save of the state a run holds after its tool's result (about 1 KB of JSON).
    let state = rt.block_on(async {
        let store = Arc::new(MemoryCheckpoints::new());
        let agent = agent(Some(store.clone()));
        let outcome = agent.run_with("fetch it", RunOptions::new()).await;
        store
            .load(&outcome.run_id)
            .await
            .expect("loaded")
            .expect("saved")
            .state
    });
    let mut group = c.benchmark_group("checkpoint_save");
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(5));
    let sqlite = SqliteCheckpoints::open(dir.join("saves.db")).expect("a SQLite file");
    let memory = MemoryCheckpoints::new();
    for (name, store) in [
        ("memory", &memory as &dyn CheckpointStore),
        ("sqlite", &sqlite as &dyn CheckpointStore),
    ] {
        let mut sequence = 0;
        group.bench_function(format!("{name}/{}B", state.len()), |b| {
            b.iter(|| {
                let checkpoint = Checkpoint {
                    run_id: "bench".into(),
                    sequence,
                    state: state.clone(),
                };
                rt.block_on(store.save(&checkpoint)).expect("saved");
                sequence += 1;
            });
        });
    }
    group.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, runs);
criterion_main!(benches);
