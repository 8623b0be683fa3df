//! A plain `fn` tool, marked `#[tool(blocking)]` or not, runs on tokio's blocking pool: a body
//! that blocks its thread holds up none of the run's other work, the tool's timeout fires, and
//! the thread finishes in the background.

use std::sync::Mutex;
use std::sync::mpsc;
use std::time::Duration;

use agent_errors::prelude::*;
use agent_errors::testing::{ScriptedModel, echo_tool};
use agent_errors::{Message, RunOptions};
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};

/// What the blocking tool waits on, and how it says where it is.
struct Gate {
    started: UnboundedSender<()>,
    release: Mutex<mpsc::Receiver<()>>,
    finished: UnboundedSender<()>,
}

/// Waits until the test lets it go, blocking its thread as a synchronous client would.
#[tool(blocking, timeout = "2s", on_error(timeout = escalate))]
fn wait_for_release(gate: Ctx<Gate>) -> &'static str {
    let _ = gate.started.send(());
    let _ = gate.release.lock().unwrap().recv();
    let _ = gate.finished.send(());
    "released"
}

/// The same body, not marked `blocking`: a plain `fn` is run on the blocking pool all the same.
#[tool(timeout = "2s", on_error(timeout = escalate))]
fn wait_unmarked(gate: Ctx<Gate>) -> &'static str {
    wait_for_release(gate)
}

/// Which thread the body ran on.
#[tool]
fn where_am_i() -> String {
    format!("{:?}", std::thread::current().id())
}

/// Fails the way a bug does.
#[tool(blocking)]
fn explode(at: u32) -> u32 {
    panic!("blew up at {at}")
}

/// The tool results the model was sent last, in order.
fn results(model: &ScriptedModel) -> Vec<(bool, String)> {
    let request = model.last_request().expect("the model was asked");
    request
        .messages
        .iter()
        .filter_map(|message| match message {
            Message::Tool(result) => Some((result.is_error, result.content.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_blocked_tool_times_out_while_the_run_goes_on_and_its_thread_finishes_later() {
    blocked_tool_times_out("wait_for_release", tools![wait_for_release]).await;
}

#[tokio::test(start_paused = true)]
async fn a_plain_fn_not_marked_blocking_times_out_all_the_same() {
    blocked_tool_times_out("wait_unmarked", tools![wait_unmarked]).await;
}

#[tokio::test]
async fn a_plain_fn_runs_off_the_runtimes_thread() {
    let model = ScriptedModel::new()
        .tool_call("where_am_i", "{}")
        .text("done");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tools(tools![where_am_i])
        .build()
        .unwrap();
    assert_eq!(agent.run("go").await.unwrap(), "done");
    let runtime_thread = format!("{:?}", std::thread::current().id());
    let results = results(&model);
    assert!(!results[0].0, "{results:?}");
    assert!(results[0].1.contains("ThreadId("), "{results:?}");
    assert!(
        !results[0].1.contains(&runtime_thread),
        "ran on the runtime's thread {runtime_thread}: {results:?}"
    );
}

/// Runs `name` (a tool that blocks until released, with a 2 s timeout) next to an echo in one
/// turn, on a single-threaded runtime.
async fn blocked_tool_times_out(name: &str, blocking: Vec<ToolDef>) {
    let (started_tx, mut started) = unbounded_channel();
    let (finished_tx, mut finished) = unbounded_channel();
    let (release, release_rx) = mpsc::channel();
    let gate = Gate {
        started: started_tx,
        release: Mutex::new(release_rx),
        finished: finished_tx,
    };
    // Both calls in one turn, on a single-threaded runtime: the echo can only answer if the
    // blocked body is off the runtime's thread.
    let model = ScriptedModel::new()
        .tool_calls([(name, "{}"), ("echo", r#"{"text": "meanwhile"}"#)])
        .text("done");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tools(blocking)
        .tool(echo_tool("echo"))
        .build()
        .unwrap();
    let run = tokio::spawn(async move {
        agent
            .run_with("go", RunOptions::new().context(gate))
            .await
            .into_result()
    });

    started.recv().await.expect("the body started");
    // A blocking task keeps paused time from moving by itself: move it past the timeout.
    tokio::time::advance(Duration::from_secs(2)).await;
    assert_eq!(run.await.unwrap().unwrap(), "done");

    let results = results(&model);
    assert_eq!(results.len(), 2, "{results:?}");
    let (is_error, timed_out) = &results[0];
    assert!(is_error);
    let timed_out: serde_json::Value = serde_json::from_str(timed_out).unwrap();
    assert_eq!(timed_out["tool"], name);
    assert_eq!(timed_out["kind"], "timeout");
    assert_eq!(results[1], (false, "meanwhile".to_owned()));

    // The run is over; the thread is still in the body until it is let go.
    assert!(finished.try_recv().is_err());
    release.send(()).unwrap();
    finished.recv().await.expect("the body ran to its end");
}

#[tokio::test]
async fn a_panic_on_the_blocking_pool_is_the_tools_panic() {
    let model = ScriptedModel::new()
        .tool_call("explode", r#"{"at": 3}"#)
        .text("done");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tools(tools![explode])
        .build()
        .unwrap();
    assert_eq!(agent.run("go").await.unwrap(), "done");
    let results = results(&model);
    let shown: serde_json::Value = serde_json::from_str(&results[0].1).unwrap();
    assert_eq!(shown["kind"], "bug");
    assert_eq!(shown["message"], "the tool panicked: blew up at 3");
}

#[tokio::test]
async fn a_blocking_tool_that_returns_in_time_answers_like_any_other() {
    let (started, _started) = unbounded_channel();
    let (finished, _finished) = unbounded_channel();
    let (release, release_rx) = mpsc::channel();
    release.send(()).unwrap();
    let gate = Gate {
        started,
        release: Mutex::new(release_rx),
        finished,
    };
    let model = ScriptedModel::new()
        .tool_call("wait_for_release", "{}")
        .text("done");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tools(tools![wait_for_release])
        .build()
        .unwrap();
    let outcome = agent.run_with("go", RunOptions::new().context(gate)).await;
    assert_eq!(outcome.into_result().unwrap(), "done");
    assert_eq!(results(&model), [(false, "released".to_owned())]);
}
