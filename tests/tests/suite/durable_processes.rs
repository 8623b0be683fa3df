//! Durable runs across real processes: `durable_child` runs an agent until it is inside a tool
//! call (or inside a retry's backoff), the test kills it with SIGKILL, and a fresh process
//! resumes the run from the store: a SQLite file, and a real PostgreSQL server started on a free
//! loopback port for the test.

use crate::support::postgres as postgres_server;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use agent_errors::{Message, ToolResult};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Where the child processes keep their checkpoints.
enum StoreUnderTest {
    Sqlite(PathBuf),
    /// A connection string to a server the test started.
    Postgres(String),
}

impl StoreUnderTest {
    /// The store as `durable_child` reads it from its command line.
    fn arg(&self) -> String {
        match self {
            StoreUnderTest::Sqlite(path) => format!("sqlite:{}", path.display()),
            StoreUnderTest::Postgres(config) => format!("postgres:{config}"),
        }
    }
}

/// A directory of its own for one test, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "agent-errors-durable-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn child(store: &StoreUnderTest, mode: &str, scenario: &str, dir: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_durable_child"))
        .args([&store.arg(), "run-crash", mode, scenario])
        .arg(dir)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("durable_child starts")
}

/// Starts the scenario and kills the process (SIGKILL) once it prints `signal`.
async fn run_until_killed(store: &StoreUnderTest, scenario: &str, dir: &Path, signal: &str) {
    let mut process = child(store, "start", scenario, dir);
    let stdout = process.stdout.take().expect("piped");
    let mut lines = BufReader::new(stdout).lines();
    let waited = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await.expect("readable stdout") {
            if line == signal {
                return;
            }
        }
        panic!("the child ended without printing {signal}");
    });
    waited.await.expect("the child got there within a minute");
    process.kill().await.expect("the child is killed");
}

/// Resumes the run in a fresh process; its result line and transcript.
async fn resume(store: &StoreUnderTest, scenario: &str, dir: &Path) -> (String, Vec<Message>) {
    let process = child(store, "resume", scenario, dir);
    let output = tokio::time::timeout(Duration::from_secs(60), process.wait_with_output())
        .await
        .expect("the resumed child finishes within a minute")
        .expect("its output");
    assert!(output.status.success(), "resumed child failed: {output:?}");
    let stdout = String::from_utf8(output.stdout).expect("utf-8");
    let result = stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .expect("a RESULT line")
        .to_owned();
    let transcript = stdout
        .lines()
        .find_map(|l| l.strip_prefix("TRANSCRIPT "))
        .expect("a TRANSCRIPT line");
    (
        result,
        serde_json::from_str(transcript).expect("a transcript"),
    )
}

fn log(dir: &Path, tool: &str) -> Vec<String> {
    std::fs::read_to_string(dir.join(format!("{tool}.log")))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn result_of<'a>(transcript: &'a [Message], tool: &str) -> &'a ToolResult {
    let mut results = transcript.iter().filter_map(|m| match m {
        Message::Tool(result) if &*result.name == tool => Some(result),
        _ => None,
    });
    let result = results.next().expect("the call was answered");
    assert!(results.next().is_none(), "`{tool}` answered twice");
    result
}

/// The whole conversation, once: the user's message, the turn with its answers in order, the
/// final text.
fn assert_nothing_lost_or_doubled(transcript: &[Message], calls: &[&str]) {
    assert!(matches!(&transcript[0], Message::User { content } if content == "go"));
    let Message::Assistant { tool_calls, .. } = &transcript[1] else {
        panic!("the model's turn is second: {transcript:?}");
    };
    let names: Vec<&str> = tool_calls.iter().map(|c| &*c.name).collect();
    assert_eq!(names, calls);
    for (n, call) in tool_calls.iter().enumerate() {
        match &transcript[2 + n] {
            Message::Tool(result) => assert_eq!(result.call_id, call.id),
            other => panic!("call {} answered by {other:?}", call.id),
        }
    }
    assert_eq!(transcript.len(), 2 + calls.len() + 1, "{transcript:?}");
    assert!(matches!(
        transcript.last(),
        Some(Message::Assistant { content: Some(text), tool_calls }) if text == "finished after the crash" && tool_calls.is_empty()
    ));
}

async fn killed_in_the_middle_of_a_tool_call(store: StoreUnderTest, dir: &Path) {
    run_until_killed(&store, "call", dir, "IN_TOOL").await;
    let (result, transcript) = resume(&store, "call", dir).await;

    assert_eq!(result, "ok finished after the crash");
    assert_nothing_lost_or_doubled(&transcript, &["send_email", "lookup"]);
    // The email may have gone out once; it was not sent again.
    assert_eq!(log(dir, "send_email"), ["run-crash:call_1"]);
    let email = result_of(&transcript, "send_email");
    assert!(email.is_error);
    assert!(
        email.content.contains("outcome_unknown") && email.content.contains("interrupted"),
        "{}",
        email.content
    );
    // The lookup is idempotent: run again, with the key it had.
    assert_eq!(log(dir, "lookup"), ["run-crash:call_2", "run-crash:call_2"]);
    let lookup = result_of(&transcript, "lookup");
    assert_eq!(
        (lookup.content.as_str(), lookup.is_error),
        ("done for run-crash:call_2", false)
    );
}

async fn killed_in_the_middle_of_a_backoff(store: StoreUnderTest, dir: &Path) {
    run_until_killed(&store, "backoff", dir, "IN_BACKOFF").await;
    let (result, transcript) = resume(&store, "backoff", dir).await;

    assert_eq!(result, "ok finished after the crash");
    assert_nothing_lost_or_doubled(&transcript, &["flaky"]);
    // One failed call before the crash, the retry after it: never a third.
    assert_eq!(log(dir, "flaky"), ["run-crash:call_1", "run-crash:call_1"]);
    let flaky = result_of(&transcript, "flaky");
    assert_eq!(
        (flaky.content.as_str(), flaky.is_error),
        ("done for run-crash:call_1", false)
    );
}

#[tokio::test]
async fn sqlite_a_run_killed_in_the_middle_of_a_tool_call_resumes_in_a_new_process() {
    let scratch = Scratch::new("sqlite-call");
    let store = StoreUnderTest::Sqlite(scratch.0.join("runs.db"));
    killed_in_the_middle_of_a_tool_call(store, &scratch.0).await;
}

#[tokio::test]
async fn sqlite_a_run_killed_in_the_middle_of_a_backoff_resumes_in_a_new_process() {
    let scratch = Scratch::new("sqlite-backoff");
    let store = StoreUnderTest::Sqlite(scratch.0.join("runs.db"));
    killed_in_the_middle_of_a_backoff(store, &scratch.0).await;
}

#[tokio::test]
async fn postgres_a_run_killed_in_the_middle_of_a_tool_call_resumes_in_a_new_process() {
    let scratch = Scratch::new("postgres-call");
    let server = postgres_server::PostgresServer::start();
    let store = StoreUnderTest::Postgres(server.connection_string());
    killed_in_the_middle_of_a_tool_call(store, &scratch.0).await;
}

#[tokio::test]
async fn postgres_a_run_killed_in_the_middle_of_a_backoff_resumes_in_a_new_process() {
    let scratch = Scratch::new("postgres-backoff");
    let server = postgres_server::PostgresServer::start();
    let store = StoreUnderTest::Postgres(server.connection_string());
    killed_in_the_middle_of_a_backoff(store, &scratch.0).await;
}

/// The process is killed (SIGKILL) in the middle of a refund; resumed, the model is told the
/// outcome is unknown and asks for the same refund again (its keys reordered).
async fn killed_in_the_middle_of_a_refund(store: StoreUnderTest, dir: &Path) -> Vec<Message> {
    run_until_killed(&store, "refund", dir, "IN_TOOL").await;
    let (result, transcript) = resume(&store, "refund", dir).await;
    assert_eq!(result, "ok finished after the crash");
    transcript
}

fn refund_results(transcript: &[Message]) -> Vec<&ToolResult> {
    transcript
        .iter()
        .filter_map(|m| match m {
            Message::Tool(result) if &*result.name == "refund" => Some(result),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn sqlite_a_refund_killed_mid_call_and_asked_for_again_is_made_once() {
    let scratch = Scratch::new("sqlite-refund");
    let store = StoreUnderTest::Sqlite(scratch.0.join("runs.db"));
    let transcript = killed_in_the_middle_of_a_refund(store, &scratch.0).await;

    // One refund: the first call's, made before the kill; the repeat was answered, not run.
    assert_eq!(log(&scratch.0, "refund"), ["run-crash:call_1"]);
    let results = refund_results(&transcript);
    assert_eq!(results.len(), 2, "{transcript:?}");
    assert!(results[0].is_error && results[0].content.contains("outcome_unknown"));
    assert!(
        results[1].is_error && results[1].content.contains("not run"),
        "{}",
        results[1].content
    );
}

#[tokio::test]
async fn sqlite_a_refund_killed_mid_call_is_reconciled_by_its_key_on_resume() {
    let scratch = Scratch::new("sqlite-refund-reconciled");
    let store = StoreUnderTest::Sqlite(scratch.0.join("runs.db"));
    run_until_killed(&store, "refund_reconciled", &scratch.0, "IN_TOOL").await;
    let (result, transcript) = resume(&store, "refund_reconciled", &scratch.0).await;

    assert_eq!(result, "ok finished after the crash");
    assert_eq!(log(&scratch.0, "refund"), ["run-crash:call_1"]);
    let refund = result_of(&transcript, "refund");
    assert_eq!(
        (refund.content.as_str(), refund.is_error),
        ("refunded (found by its key run-crash:call_1)", false)
    );
}
