//! One process of a durable run, for the crash tests: a three-tool agent on a scripted model
//! whose checkpoints go to the store named on the command line.
//!
//! `durable_child <store> <run_id> <start|resume> <call|backoff> <dir>`
//!
//! - `<store>`: `sqlite:<path>`.
//! - `start` runs the scenario from its first turn, `resume` resumes `<run_id>`.
//! - `call`: one turn calls `send_email` (not idempotent) and `lookup` (idempotent) at once;
//!   in `start` both hang once they began, and the process prints `IN_TOOL` when both have.
//! - `backoff`: `flaky` fails once with a 503 under `retry(3)` from 2 s; in `start` the process
//!   prints `IN_BACKOFF` once the checkpoint of the sleeping retry is saved.
//! - `refund`: one turn calls `refund` (not idempotent); in `start` it hangs once begun
//!   (`IN_TOOL`). Resumed, the model is told the outcome is unknown and asks for the same
//!   refund again, its keys reordered: the repeat must not refund twice.
//! - `refund_reconciled`: the same, the resumed agent giving `refund` a reconciler that looks
//!   the call's key up in `<dir>/refund.log` (the payment service's own record).
//!
//! Each tool appends a line (its call's idempotency key) to `<dir>/<tool>.log` when it starts:
//! the side effects the tests count. At the end the process prints `RESULT <text or error>`
//! and `TRANSCRIPT <json>`.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agent_errors::build::ReconcilerDef;
use agent_errors::call::{ReconcileRequest, Reconciled};
use agent_errors::checkpoint::{
    Checkpoint, CheckpointError, CheckpointStore, PostgresCheckpoints, SqliteCheckpoints,
};
use agent_errors::testing::ScriptedModel;
use agent_errors::{
    Agent, BoxError, HttpError, RunOptions, ToolDef, ToolError,
    call::{Extensions, IdempotencyKey, ToolFuture, ToolHandler},
    policy::{Action, Policy, PolicyKey, RetryAction},
};

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// What a tool does once it has recorded its call.
#[derive(Clone, Copy)]
enum Then {
    Hang,
    Answer,
    Fail503,
}

struct Logged {
    log: PathBuf,
    then: Then,
    /// Calls begun in this process (shared by the tools of one turn), and how many must begin
    /// before `IN_TOOL` is printed.
    started: Arc<AtomicUsize>,
    announce_at: usize,
}

impl ToolHandler for Logged {
    fn call(&self, raw_args: &str) -> Result<ToolFuture, ToolError> {
        self.call_with(raw_args, &Extensions::new())
    }

    fn call_with(&self, _: &str, extensions: &Extensions) -> Result<ToolFuture, ToolError> {
        let key = extensions
            .get::<IdempotencyKey>()
            .map(ToString::to_string)
            .unwrap_or_default();
        let (log, then) = (self.log.clone(), self.then);
        let (started, announce_at) = (Arc::clone(&self.started), self.announce_at);
        Ok(Box::pin(async move {
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log)?;
            writeln!(file, "{key}")?;
            file.sync_all()?;
            if started.fetch_add(1, Ordering::SeqCst) + 1 == announce_at {
                say("IN_TOOL");
            }
            match then {
                Then::Hang => std::future::pending().await,
                Then::Answer => Ok(format!("done for {key}")),
                Then::Fail503 => Err(BoxError::from(HttpError::new(503, "busy"))),
            }
        }))
    }
}

/// The store, telling the test when a checkpoint of a sleeping retry is on disk.
#[derive(Debug)]
struct Announcing<S>(S);

impl<S: CheckpointStore> CheckpointStore for Announcing<S> {
    fn save<'a>(
        &'a self,
        checkpoint: &'a Checkpoint,
    ) -> agent_errors::call::BoxFuture<'a, Result<(), CheckpointError>> {
        Box::pin(async move {
            self.0.save(checkpoint).await?;
            let state = String::from_utf8_lossy(&checkpoint.state);
            if state.contains("\"backoff_ms\":") && !state.contains("\"backoff_ms\":null") {
                say("IN_BACKOFF");
            }
            Ok(())
        })
    }

    fn load<'a>(
        &'a self,
        run_id: &'a str,
    ) -> agent_errors::call::BoxFuture<'a, Result<Option<Checkpoint>, CheckpointError>> {
        self.0.load(run_id)
    }

    fn delete<'a>(
        &'a self,
        run_id: &'a str,
    ) -> agent_errors::call::BoxFuture<'a, Result<(), CheckpointError>> {
        self.0.delete(run_id)
    }
}

async fn store(spec: &str) -> Result<Arc<dyn CheckpointStore>, Box<dyn std::error::Error>> {
    match spec.split_once(':') {
        Some(("sqlite", path)) => Ok(Arc::new(Announcing(SqliteCheckpoints::open(path)?))),
        Some(("postgres", config)) => Ok(Arc::new(Announcing(
            PostgresCheckpoints::connect(config).await?,
        ))),
        _ => Err(format!(
            "unknown store {spec:?}: expected sqlite:<path> or postgres:<connection string>"
        )
        .into()),
    }
}

fn tool(dir: &str, name: &'static str, then: Then, started: &Arc<AtomicUsize>) -> ToolDef {
    let schema = serde_json::json!({"type": "object", "properties": {}});
    let handler = Logged {
        log: PathBuf::from(dir).join(format!("{name}.log")),
        then,
        started: Arc::clone(started),
        announce_at: if name == "refund" { 1 } else { 2 },
    };
    ToolDef::from_handler(name, format!("The {name} tool."), schema, handler)
}

/// The refund as the model first asks for it, and as it asks again after the resume.
const REFUND: &str = r#"{"order": "A-7", "cents": 500}"#;
const REFUND_AGAIN: &str = "{ \"cents\": 500, \"order\":\"A-7\" }";

/// Looks the call's key up in the payment service's record (`<dir>/refund.log`): there, the
/// refund happened; absent, it did not.
fn check_refund(dir: &str) -> ReconcilerDef {
    let log = PathBuf::from(dir).join("refund.log");
    ReconcilerDef::from_fn("check_refund", move |request: ReconcileRequest| {
        let record = std::fs::read_to_string(&log).unwrap_or_default();
        let key = request.key.to_string();
        Ok::<_, std::io::Error>(if record.lines().any(|line| line == key) {
            Reconciled::happened(format!("refunded (found by its key {key})"))
        } else {
            Reconciled::DidNotHappen
        })
    })
}

fn model(starting: bool, scenario: &str) -> ScriptedModel {
    match (starting, scenario) {
        (true, "call") => ScriptedModel::new()
            .tool_calls([("send_email", "{}"), ("lookup", "{}")])
            .text("sent, maybe"),
        (true, "refund" | "refund_reconciled") => ScriptedModel::new()
            .tool_call("refund", REFUND)
            .text("refunded"),
        (true, _) => ScriptedModel::new().tool_call("flaky", "{}").text("flaked"),
        (false, "refund") => ScriptedModel::new()
            .tool_call("refund", REFUND_AGAIN)
            .text("finished after the crash"),
        (false, _) => ScriptedModel::new().text("finished after the crash"),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [store_spec, run_id, mode, scenario, dir] = args.as_slice() else {
        return Err(
            "usage: durable_child <store> <run_id> <start|resume> <call|backoff> <dir>".into(),
        );
    };
    let starting = mode == "start";
    let model = model(starting, scenario);
    // Every tool hangs in the first process; a resumed one answers.
    let (calls_then, flaky_then) = if starting {
        (Then::Hang, Then::Fail503)
    } else {
        (Then::Answer, Then::Answer)
    };
    let retry = Action::Retry(RetryAction {
        max_attempts: std::num::NonZeroU32::new(3).expect("3 is not zero"),
        initial: Some(std::time::Duration::from_secs(2)),
        max: None,
        when_safe: false,
    });
    // `IN_TOOL` once the turn's two calls have both begun.
    let started = Arc::new(AtomicUsize::new(0));
    let refund = tool(dir, "refund", calls_then, &started);
    let (refund, reconciler) = match (starting, scenario.as_str()) {
        (false, "refund_reconciled") => (
            refund.with_reconcile("check_refund"),
            Some(check_refund(dir)),
        ),
        _ => (refund, None),
    };
    let agent = Agent::builder("durable-child")
        .model(model)
        .tool(tool(dir, "send_email", calls_then, &started))
        .tool(tool(dir, "lookup", calls_then, &started).idempotent(true))
        .tool(
            tool(dir, "flaky", flaky_then, &Arc::new(AtomicUsize::new(0)))
                .with_policy(Policy::new().on(PolicyKey::Execution, retry)),
        )
        .tool(refund)
        .shared_checkpoints(store(store_spec).await?);
    let agent = match reconciler {
        Some(reconciler) => agent.reconciler(reconciler),
        None => agent,
    }
    .build()?;
    let outcome = if starting {
        agent
            .run_with("go", RunOptions::new().run_id(run_id.clone()))
            .await
    } else {
        agent.resume(run_id.clone(), RunOptions::new()).await
    };
    match &outcome.result {
        Ok(text) => say(&format!("RESULT ok {text}")),
        Err(error) => say(&format!("RESULT error {error}")),
    }
    say(&format!(
        "TRANSCRIPT {}",
        serde_json::to_string(&outcome.transcript)?
    ));
    Ok(())
}
