//! A durable run killed in the middle of its tool calls and resumed by another process.
//!
//! The example runs itself three times: as the parent, which starts a child running a
//! three-tool agent with its checkpoints in a SQLite file, kills it (SIGKILL) while two tool
//! calls are running, then starts a second child that resumes the run; and as those children.
//! Each tool writes a line to a file when it runs: the side effects the parent counts.
//!
//! ```sh
//! cargo run -p agent-errors-examples --bin resume_after_crash
//! ```

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agent_errors::checkpoint::SqliteCheckpoints;
use agent_errors::prelude::*;
use agent_errors::testing::{Reply, ScriptedModel};
use agent_errors::{ChatResponse, Ctx, Message, RunOptions, ToolCall, call::IdempotencyKey};

const RUN_ID: &str = "trip-42";

/// What the tools of one process share: where side effects are written, and whether this is
/// the process that gets killed (its tools never finish).
struct Scene {
    dir: PathBuf,
    doomed: bool,
    started: AtomicUsize,
}

impl Scene {
    /// Records that `tool` ran for the call `key` names, then, in the doomed process, waits to
    /// be killed once both calls of the turn have begun.
    async fn act(&self, tool: &str, key: &IdempotencyKey) -> std::io::Result<()> {
        let path = self.dir.join(format!("{tool}.log"));
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        writeln!(log, "{key}")?;
        log.sync_all()?;
        if self.doomed {
            if self.started.fetch_add(1, Ordering::SeqCst) == 1 {
                println!("IN_TOOL");
                std::io::stdout().flush()?;
            }
            std::future::pending::<()>().await;
        }
        Ok(())
    }
}

/// Books a seat and charges the card: running it twice books twice.
#[tool]
async fn book_flight(
    scene: Ctx<Arc<Scene>>,
    key: Ctx<IdempotencyKey>,
    flight: String,
) -> std::io::Result<String> {
    scene.act("book_flight", &key).await?;
    Ok(format!("booked {flight}"))
}

/// The weather forecast at the destination: asking twice does no harm.
#[tool(idempotent)]
async fn check_weather(
    scene: Ctx<Arc<Scene>>,
    key: Ctx<IdempotencyKey>,
    city: String,
) -> std::io::Result<String> {
    scene.act("check_weather", &key).await?;
    Ok(format!("sunny in {city}"))
}

/// Emails the itinerary to the traveller.
#[tool]
async fn send_itinerary(
    scene: Ctx<Arc<Scene>>,
    key: Ctx<IdempotencyKey>,
    to: String,
) -> std::io::Result<String> {
    scene.act("send_itinerary", &key).await?;
    Ok(format!("sent to {to}"))
}

async fn child(role: &str, db: &Path, dir: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let doomed = role == "first";
    let model = if doomed {
        ScriptedModel::new().tool_calls([
            ("book_flight", r#"{"flight": "LH 454"}"#),
            ("check_weather", r#"{"city": "San Francisco"}"#),
        ])
    } else {
        // The model carries on from the transcript it is sent.
        let itinerary = ToolCall::new("call_3", "send_itinerary", r#"{"to": "ada@example.com"}"#);
        ScriptedModel::new()
            .reply(Reply::response(ChatResponse::tool_calls(vec![itinerary])))
            .text(
                "Your trip is arranged; please check your bookings, the first one was interrupted.",
            )
    };
    let agent = Agent::builder("travel")
        .model(model)
        .tools(tools![book_flight, check_weather, send_itinerary])
        .checkpoints(SqliteCheckpoints::open(db)?)
        .build()?;
    let scene = Arc::new(Scene {
        dir: dir.to_path_buf(),
        doomed,
        started: AtomicUsize::new(0),
    });
    let options = RunOptions::new().context(scene);
    let outcome = if doomed {
        agent
            .run_with("Book LH 454 to San Francisco", options.run_id(RUN_ID))
            .await
    } else {
        agent.resume(RUN_ID, options).await
    };
    println!("RESULT {:?}", outcome.result.map_err(|e| e.to_string()));
    println!("TRANSCRIPT {}", serde_json::to_string(&outcome.transcript)?);
    Ok(())
}

fn spawn(role: &str, db: &Path, dir: &Path) -> std::io::Result<std::process::Child> {
    Command::new(std::env::current_exe()?)
        .arg(role)
        .arg(db)
        .arg(dir)
        .stdout(Stdio::piped())
        .spawn()
}

fn side_effects(dir: &Path, tool: &str) -> usize {
    std::fs::read_to_string(dir.join(format!("{tool}.log")))
        .map(|text| text.lines().count())
        .unwrap_or(0)
}

fn parent() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("resume-after-crash-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let db = dir.join("runs.db");

    let mut first = spawn("first", &db, &dir)?;
    let stdout = first.stdout.take().ok_or("no stdout")?;
    let started = BufReader::new(stdout)
        .lines()
        .any(|line| line.is_ok_and(|l| l == "IN_TOOL"));
    if !started {
        return Err("the first process ended before its tools began".into());
    }
    first.kill()?; // SIGKILL: no destructor, no last checkpoint
    first.wait()?;
    println!("killed the first process while `book_flight` and `check_weather` were running");

    let second = spawn("second", &db, &dir)?.wait_with_output()?;
    let stdout = String::from_utf8(second.stdout)?;
    let line = |prefix: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(prefix).map(str::to_owned))
    };
    let transcript: Vec<Message> =
        serde_json::from_str(&line("TRANSCRIPT ").ok_or("no transcript")?)?;
    println!("the second process resumed run `{RUN_ID}`:");
    for message in &transcript {
        if let Message::Tool(result) = message {
            let runs = side_effects(&dir, &result.name);
            let verdict = if result.is_error { "error" } else { "ok" };
            println!(
                "  {:<15} ran {runs}x  {verdict}: {}",
                result.name, result.content
            );
        }
    }
    println!("result: {}", line("RESULT ").ok_or("no result")?);
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [role, db, dir] => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(child(role, Path::new(db), Path::new(dir))),
        _ => parent(),
    }
}
