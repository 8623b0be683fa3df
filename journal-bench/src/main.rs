//! What checkpoints cost a durable run, per call, as the run grows. Two measurements:
//!
//! - `journal-bench sequential <none|memory|sqlite> <N> [dir]`: one run of `N` sequential tool
//!   calls, each answering ~4 KB, against a model that keeps nothing of what it is sent. Prints
//!   microseconds per call (wall time, and the time the process's threads spent on a CPU) and
//!   the bytes this process wrote to disk per call
//!   (`/proc/self/io`'s `write_bytes`; the SQLite file is under `dir`, default the temp dir):
//!   during the run, and with what SQLite's write-ahead log still held copied into the file
//!   after it (`with_checkpoint`), which the file pays later in any case.
//! - `journal-bench concurrent <runs> <calls> [dir]`: `runs` runs of `calls` calls each at once,
//!   all saving to one SQLite file. Prints runs per second.
//!
//! `scripts/bench-journal.sh` runs the table of BENCHMARKS.md with it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use agent_errors::call::BoxFuture;
use agent_errors::checkpoint::{CheckpointStore, MemoryCheckpoints, SqliteCheckpoints};
use agent_errors::{
    Agent, BoxError, ChatModel, ChatRequest, ChatResponse, Message, ToolCall, ToolDef,
};

/// The size of each tool answer.
const ANSWER_BYTES: usize = 4096;

/// A model that asks for `calls` tool calls, one per turn, then answers: it reads only how many
/// messages it was sent, and keeps nothing.
struct Caller {
    calls: usize,
}

impl ChatModel for Caller {
    fn chat<'a>(
        &'a self,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChatResponse, BoxError>> {
        let made = (request.messages.iter())
            .filter(|message| matches!(message, Message::Tool(_)))
            .count();
        let response = if made < self.calls {
            let call = ToolCall::new(
                format!("call_{made}"),
                "fetch",
                format!(r#"{{"page":{made}}}"#),
            );
            ChatResponse::tool_calls(vec![call])
        } else {
            ChatResponse::text("done")
        };
        Box::pin(async move { Ok(response) })
    }
}

fn fetch_tool() -> ToolDef {
    ToolDef::new(
        "fetch",
        "Fetches a page.",
        |args: serde_json::Value| async move {
            let page = args
                .get("page")
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0);
            let mut text = format!("page {page}: ");
            while text.len() < ANSWER_BYTES {
                text.push_str("lorem ipsum dolor sit amet, consectetur adipiscing elit. ");
            }
            text.truncate(ANSWER_BYTES);
            Ok::<_, std::convert::Infallible>(text)
        },
    )
}

fn agent(calls: usize, store: Option<Arc<dyn CheckpointStore>>) -> Agent {
    let builder = Agent::builder("bench")
        .model(Caller { calls })
        .tool(fetch_tool())
        .max_turns(u32::try_from(calls).unwrap_or(u32::MAX).saturating_add(1));
    let builder = match store {
        Some(store) => builder.shared_checkpoints(store),
        None => builder,
    };
    builder.build().expect("the bench's agent builds")
}

/// Bytes this process has caused to be written to disk so far.
fn write_bytes() -> u64 {
    let io = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    io.lines()
        .find_map(|line| line.strip_prefix("write_bytes: "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// Nanoseconds the process's threads have spent on a CPU so far (`/proc/self/task/*/schedstat`):
/// a run's time without its waits for the disk or for a CPU another process holds.
fn cpu_nanos() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    (tasks.flatten())
        .filter_map(|task| std::fs::read_to_string(task.path().join("schedstat")).ok())
        .filter_map(|stat| stat.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

fn sqlite_file(dir: &Option<PathBuf>, name: &str) -> PathBuf {
    let dir = dir.clone().unwrap_or_else(std::env::temp_dir);
    let path = dir.join(format!("journal-bench-{}-{name}.db", std::process::id()));
    remove_sqlite(&path);
    path
}

fn remove_sqlite(path: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
}

/// Copies every page of `path`'s write-ahead log into the database file, and empties the log.
fn checkpoint_wal(path: &Path) {
    let connection = rusqlite::Connection::open(path).expect("the bench's file opens");
    connection
        .busy_timeout(std::time::Duration::from_secs(5))
        .expect("a busy timeout");
    connection
        .execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
        .expect("the log is checkpointed");
}

async fn sequential(store_name: &str, calls: usize, dir: Option<PathBuf>) {
    let path = sqlite_file(&dir, "sequential");
    let store: Option<Arc<dyn CheckpointStore>> = match store_name {
        "none" => None,
        "memory" => Some(Arc::new(MemoryCheckpoints::new())),
        "sqlite" => Some(Arc::new(SqliteCheckpoints::open(&path).expect("opens"))),
        other => panic!("unknown store {other}: none, memory or sqlite"),
    };
    // A short run first, so that the measured one does not pay for what the process sets up once.
    agent(3, None)
        .run("warm up")
        .await
        .expect("the warm-up run answers");
    let agent = agent(calls, store);
    let (written, cpu) = (write_bytes(), cpu_nanos());
    let started = Instant::now();
    let answer = agent.run("go").await.expect("the run answers");
    let elapsed = started.elapsed();
    let cpu = cpu_nanos().saturating_sub(cpu);
    let during = write_bytes() - written;
    // What is left in SQLite's write-ahead log is copied into the database file later (at the
    // next automatic checkpoint, or when the file is closed): the rest of what the run costs.
    if store_name == "sqlite" {
        checkpoint_wal(&path);
    }
    let checkpointed = write_bytes() - written;
    assert_eq!(answer, "done");
    let per_call = elapsed.as_secs_f64() * 1e6 / calls as f64;
    let cpu_per_call = cpu as f64 / 1e3 / calls as f64;
    let kb_per_call = |bytes: u64| bytes as f64 / 1024.0 / calls as f64;
    println!(
        "calls={calls} us_per_call={per_call:.1} cpu_us_per_call={cpu_per_call:.1} kb_written_per_call={:.1} with_checkpoint={:.1}",
        kb_per_call(during),
        kb_per_call(checkpointed)
    );
    remove_sqlite(&path);
}

async fn concurrent(runs: usize, calls: usize, dir: Option<PathBuf>) {
    let path = sqlite_file(&dir, "concurrent");
    let store: Arc<dyn CheckpointStore> = Arc::new(SqliteCheckpoints::open(&path).expect("opens"));
    let agent = Arc::new(agent(calls, Some(store)));
    let done = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..runs)
        .map(|_| {
            let agent = Arc::clone(&agent);
            let done = Arc::clone(&done);
            tokio::spawn(async move {
                if agent.run("go").await.is_ok() {
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a run does not panic");
    }
    let elapsed = started.elapsed().as_secs_f64();
    let done = done.load(Ordering::Relaxed);
    assert_eq!(done, runs, "every run answers");
    println!(
        "runs={runs} calls={calls} seconds={elapsed:.2} runs_per_second={:.1}",
        runs as f64 / elapsed
    );
    remove_sqlite(&path);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let number =
        |i: usize| -> usize { args.get(i).and_then(|n| n.parse().ok()).expect("a number") };
    let dir = |i: usize| args.get(i).map(PathBuf::from);
    match args.first().map(String::as_str) {
        Some("sequential") => {
            runtime.block_on(sequential(&args[1], number(2), dir(3)));
        }
        Some("concurrent") => runtime.block_on(concurrent(number(1), number(2), dir(3))),
        _ => eprintln!(
            "usage: journal-bench sequential <none|memory|sqlite> <calls> [dir] | concurrent <runs> <calls> [dir]"
        ),
    }
}
