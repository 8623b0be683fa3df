//! Durable runs in one process: a run is "killed" by aborting its task at a chosen point (a tool
//! that waits forever, a retry asleep under paused time), then resumed from the same store on a
//! fresh agent.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_errors::checkpoint::{Checkpoint, CheckpointStore, MemoryCheckpoints};
use agent_errors::testing::ScriptedModel;
use agent_errors::{
    Agent, ErrorKind, Fix, FixRequest, FixerError, HttpError, Message, RunError, RunOptions,
    ToolDef, ToolError, ToolResult,
    build::FixerDef,
    call::{Extensions, IdempotencyKey, ToolFuture, ToolHandler},
    policy::{Action, Policy, PolicyKey},
    run::ResumeError,
};
use tokio::sync::mpsc;

/// What a probe tool does when called.
#[derive(Clone, Copy)]
enum Behaviour {
    /// Never returns: the run is killed while it runs.
    Hang,
    /// Answers "ok".
    Answer,
    /// Fails with this HTTP status.
    Fail(u16),
}

/// A tool that records the idempotency key of every call and tells the test it started.
struct Probe {
    behaviour: Behaviour,
    keys: Arc<Mutex<Vec<String>>>,
    started: mpsc::UnboundedSender<()>,
}

impl ToolHandler for Probe {
    fn call(&self, raw_args: &str) -> Result<ToolFuture, ToolError> {
        self.call_with(raw_args, &Extensions::new())
    }

    fn call_with(&self, _: &str, extensions: &Extensions) -> Result<ToolFuture, ToolError> {
        let key = extensions
            .get::<IdempotencyKey>()
            .map(ToString::to_string)
            .unwrap_or_default();
        let keys = Arc::clone(&self.keys);
        let started = self.started.clone();
        let behaviour = self.behaviour;
        Ok(Box::pin(async move {
            keys.lock().unwrap().push(key);
            let _ = started.send(());
            match behaviour {
                Behaviour::Hang => std::future::pending().await,
                Behaviour::Answer => Ok("ok".to_owned()),
                Behaviour::Fail(status) => Err(HttpError::new(status, "upstream said no").into()),
            }
        }))
    }
}

struct Tool {
    def: ToolDef,
    keys: Arc<Mutex<Vec<String>>>,
    started: mpsc::UnboundedReceiver<()>,
}

fn probe(name: &'static str, behaviour: Behaviour) -> Tool {
    let keys = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = mpsc::unbounded_channel();
    let handler = Probe {
        behaviour,
        keys: Arc::clone(&keys),
        started: tx,
    };
    let schema = serde_json::json!({"type": "object", "properties": {}});
    Tool {
        def: ToolDef::from_handler(name, "A probe.", schema, handler),
        keys,
        started: rx,
    }
}

fn agent(model: ScriptedModel, store: &Arc<MemoryCheckpoints>, tools: Vec<ToolDef>) -> Agent {
    Agent::builder("durable")
        .model(model)
        .tools(tools)
        .shared_checkpoints(Arc::clone(store) as Arc<dyn CheckpointStore>)
        .build()
        .expect("a valid agent")
}

/// Starts a run of `agent` on its own task and kills it once a tool has started `starts`
/// times.
async fn run_until_killed(agent: Agent, run_id: &str, started: &mut mpsc::UnboundedReceiver<()>) {
    let options = RunOptions::new().run_id(run_id);
    let task = tokio::spawn(async move { agent.run_with("go", options).await });
    started.recv().await.expect("the tool started");
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
}

fn tool_results(transcript: &[Message]) -> Vec<&ToolResult> {
    transcript
        .iter()
        .filter_map(|m| match m {
            Message::Tool(result) => Some(result),
            _ => None,
        })
        .collect()
}

/// Every assistant call is answered exactly once, right after it, in order.
fn assert_each_call_answered_once(transcript: &[Message]) {
    let mut i = 0;
    while i < transcript.len() {
        if let Message::Assistant { tool_calls, .. } = &transcript[i] {
            for (n, call) in tool_calls.iter().enumerate() {
                match transcript.get(i + 1 + n) {
                    Some(Message::Tool(result)) => assert_eq!(result.call_id, call.id),
                    other => panic!("call {} answered by {other:?}", call.id),
                }
            }
            i += tool_calls.len();
        }
        i += 1;
    }
    let ids: Vec<&str> = tool_results(transcript)
        .iter()
        .map(|r| &*r.call_id)
        .collect();
    let mut unique = ids.clone();
    unique.dedup();
    assert_eq!(ids, unique, "a call answered twice");
}

#[tokio::test]
async fn an_interrupted_call_with_side_effects_is_not_run_again_and_the_model_is_told() {
    let store = Arc::new(MemoryCheckpoints::new());
    let mut first = probe("send_email", Behaviour::Hang);
    let model = ScriptedModel::new().tool_call("send_email", "{}");
    run_until_killed(
        agent(model, &store, vec![first.def]),
        "run-1",
        &mut first.started,
    )
    .await;

    let second = probe("send_email", Behaviour::Answer);
    let model = ScriptedModel::new().text("I could not tell whether it was sent.");
    let resumed = agent(model.clone(), &store, vec![second.def]);
    let outcome = resumed.resume("run-1", RunOptions::new()).await;

    assert_eq!(
        outcome.result.unwrap(),
        "I could not tell whether it was sent."
    );
    assert_eq!(outcome.run_id, "run-1");
    assert!(second.keys.lock().unwrap().is_empty(), "sent a second time");
    let results = tool_results(&outcome.transcript);
    assert_eq!(results.len(), 1);
    assert!(results[0].is_error);
    assert!(
        results[0].content.contains("outcome_unknown"),
        "{}",
        results[0].content
    );
    assert!(
        results[0].content.contains("interrupted"),
        "{}",
        results[0].content
    );
    assert_each_call_answered_once(&outcome.transcript);
    // What the model saw is what the transcript says.
    let seen = model.last_request().expect("one request");
    assert_eq!(
        seen.messages,
        outcome.transcript[..outcome.transcript.len() - 1]
    );

    // The run is over: resuming it again says so, and runs nothing.
    let again = resumed.resume("run-1", RunOptions::new()).await;
    match again.result {
        Err(RunError::Resume(ResumeError::Finished { outcome, .. })) => {
            assert_eq!(
                outcome,
                agent_errors::run::FinishedRun::Answered {
                    text: Some("I could not tell whether it was sent.".into())
                }
            );
        }
        other => panic!("expected Finished, got {other:?}"),
    }
    assert_eq!(again.transcript, outcome.transcript);
}

#[tokio::test]
async fn an_interrupted_idempotent_call_runs_again_with_the_same_key() {
    let store = Arc::new(MemoryCheckpoints::new());
    let mut first = probe("lookup", Behaviour::Hang);
    first.def = first.def.idempotent(true);
    let model = ScriptedModel::new().tool_call("lookup", "{}");
    run_until_killed(
        agent(model, &store, vec![first.def]),
        "run-2",
        &mut first.started,
    )
    .await;

    let second = probe("lookup", Behaviour::Answer);
    let model = ScriptedModel::new().text("found it");
    let resumed = agent(model, &store, vec![second.def.idempotent(true)]);
    let outcome = resumed.resume("run-2", RunOptions::new()).await;

    assert_eq!(outcome.result.unwrap(), "found it");
    let before = first.keys.lock().unwrap().clone();
    let after = second.keys.lock().unwrap().clone();
    assert_eq!(before, ["run-2:call_1"]);
    assert_eq!(after, before, "the re-run has the same idempotency key");
    let results = tool_results(&outcome.transcript);
    assert_eq!(
        (results[0].content.as_str(), results[0].is_error),
        ("ok", false)
    );
    assert_each_call_answered_once(&outcome.transcript);
    // The re-run is said: the tool may have seen the call twice.
    let reruns: Vec<_> = outcome
        .report
        .events
        .iter()
        .filter_map(|event| match event {
            agent_errors::Event::InterruptedRerun {
                tool,
                call_id,
                attempt,
            } => Some((tool.as_str(), call_id.as_str(), *attempt)),
            _ => None,
        })
        .collect();
    assert_eq!(reruns, [("lookup", "call_1", 1)]);
}

#[tokio::test]
async fn an_outcome_unknown_policy_can_reconcile_with_the_outside_world() {
    let store = Arc::new(MemoryCheckpoints::new());
    let mut first = probe("charge", Behaviour::Hang);
    let model = ScriptedModel::new().tool_call("charge", "{}");
    run_until_killed(
        agent(model, &store, vec![first.def]),
        "run-3",
        &mut first.started,
    )
    .await;

    // The payment service knows which keys it charged.
    let charged = first.keys.lock().unwrap().clone();
    let reconcile = FixerDef::from_fn("reconcile", move |req: FixRequest| {
        assert_eq!(req.kind, ErrorKind::OutcomeUnknown);
        let key = req.context.get::<IdempotencyKey>().expect("the call's key");
        if charged.contains(&key.to_string()) {
            Fix::result("charged (confirmed after an interruption)")
        } else {
            Err(FixerError::escalate(
                "not charged",
                agent_errors::Severity::Low,
            ))
        }
    });
    let second = probe("charge", Behaviour::Answer);
    let policy = Policy::new().on(
        PolicyKey::Kind(ErrorKind::OutcomeUnknown),
        Action::fix("reconcile", 1).unwrap(),
    );
    let model = ScriptedModel::new().text("paid");
    let resumed = Agent::builder("durable")
        .model(model)
        .tool(second.def.with_policy(policy))
        .fixer(reconcile)
        .shared_checkpoints(store.clone() as Arc<dyn CheckpointStore>)
        .build()
        .unwrap();
    let outcome = resumed.resume("run-3", RunOptions::new()).await;

    assert_eq!(outcome.result.unwrap(), "paid");
    assert!(second.keys.lock().unwrap().is_empty());
    let results = tool_results(&outcome.transcript);
    assert_eq!(
        (results[0].content.as_str(), results[0].is_error),
        ("charged (confirmed after an interruption)", false)
    );
}

#[tokio::test]
async fn an_outcome_unknown_policy_can_end_the_run() {
    let store = Arc::new(MemoryCheckpoints::new());
    let mut first = probe("transfer", Behaviour::Hang);
    let model = ScriptedModel::new().tool_call("transfer", "{}");
    run_until_killed(
        agent(model, &store, vec![first.def]),
        "run-4",
        &mut first.started,
    )
    .await;

    let second = probe("transfer", Behaviour::Answer);
    let policy = Policy::new().on(PolicyKey::Kind(ErrorKind::OutcomeUnknown), Action::Throw);
    let resumed = agent(
        ScriptedModel::new(),
        &store,
        vec![second.def.with_policy(policy)],
    );
    let outcome = resumed.resume("run-4", RunOptions::new()).await;

    let stop = outcome.result.unwrap_err();
    assert_eq!(
        stop.terminated().map(|t| t.kind),
        Some(ErrorKind::OutcomeUnknown)
    );
    assert!(second.keys.lock().unwrap().is_empty());
    assert_each_call_answered_once(&outcome.transcript);
}

#[tokio::test(start_paused = true)]
async fn a_backoff_in_progress_resumes_from_its_next_delay_with_its_spent_retries_spent() {
    let store = Arc::new(MemoryCheckpoints::new());
    let retry = Action::Retry(agent_errors::policy::RetryAction {
        max_attempts: std::num::NonZeroU32::new(4).unwrap(),
        initial: Some(Duration::from_secs(10)),
        max: None,
        when_safe: false,
    });
    let policy = || Policy::new().on(PolicyKey::Execution, retry.clone());
    let mut first = probe("flaky", Behaviour::Fail(503));
    let model = ScriptedModel::new().tool_call("flaky", "{}");
    let agent1 = agent(model, &store, vec![first.def.with_policy(policy())]);
    let task = tokio::spawn(async move {
        agent1
            .run_with("go", RunOptions::new().run_id("run-5"))
            .await
    });
    // Two calls failed: the run is asleep before the second retry (20 s to 25 s).
    first.started.recv().await.unwrap();
    first.started.recv().await.unwrap();
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());

    let mut second = probe("flaky", Behaviour::Fail(503));
    let resumed = agent(
        ScriptedModel::new(),
        &store,
        vec![second.def.with_policy(policy())],
    );
    let began = tokio::time::Instant::now();
    let outcome = tokio::spawn(async move { resumed.resume("run-5", RunOptions::new()).await });
    second.started.recv().await.unwrap();
    let waited = began.elapsed();
    assert!(
        (Duration::from_secs(20)..=Duration::from_secs(25)).contains(&waited),
        "waited {waited:?}: the second retry's delay, not the first's (10 s) nor none"
    );
    let outcome = outcome.await.unwrap();

    // retry(4) makes 4 calls in all: 2 before the crash, 2 after.
    assert_eq!(second.keys.lock().unwrap().len(), 2);
    let stop = outcome.result.unwrap_err();
    assert_eq!(
        stop.terminated().map(|t| t.reason.clone()),
        Some(agent_errors::run::TerminationReason::RetriesExhausted { attempts: 4 })
    );
    let keys = [first.keys, second.keys]
        .map(|k| k.lock().unwrap().clone())
        .concat();
    assert!(keys.iter().all(|k| k == "run-5:call_1"), "{keys:?}");
}

#[tokio::test]
async fn the_per_run_breaker_keeps_its_count_across_a_resume() {
    let store = Arc::new(MemoryCheckpoints::new());
    let broken = || probe("broken", Behaviour::Fail(400));
    let mut hang = probe("hang", Behaviour::Hang);
    let model = ScriptedModel::new()
        .tool_call("broken", "{}")
        .tool_call("hang", "{}");
    let agent1 = Agent::builder("durable")
        .model(model)
        .tools([broken().def, hang.def])
        .breaker_threshold(2)
        .shared_checkpoints(store.clone() as Arc<dyn CheckpointStore>)
        .build()
        .unwrap();
    run_until_killed(agent1, "run-6", &mut hang.started).await;

    // One more failure of `broken` trips the breaker only if the first one was kept.
    let model = ScriptedModel::new()
        .reply(agent_errors::testing::Reply::response(
            agent_errors::ChatResponse::tool_calls(vec![agent_errors::ToolCall::new(
                "call_3", "broken", "{}",
            )]),
        ))
        .text("unreachable");
    let resumed = Agent::builder("durable")
        .model(model)
        .tools([broken().def, probe("hang", Behaviour::Answer).def])
        .breaker_threshold(2)
        .shared_checkpoints(store.clone() as Arc<dyn CheckpointStore>)
        .build()
        .unwrap();
    let outcome = resumed.resume("run-6", RunOptions::new()).await;
    match outcome.result {
        Err(RunError::BreakerTripped { tool, failures }) => {
            assert_eq!((tool.as_str(), failures), ("broken", 2));
        }
        other => panic!("expected the breaker to trip, got {other:?}"),
    }
    assert_each_call_answered_once(&outcome.transcript);
}

#[tokio::test]
async fn a_run_id_already_in_the_store_is_refused_as_an_existing_run() {
    let store = Arc::new(MemoryCheckpoints::new());
    let first = agent(ScriptedModel::new().text("a"), &store, Vec::new());
    let done = first.run_with("go", RunOptions::new().run_id("same")).await;
    assert_eq!(done.result.unwrap(), "a");

    let second = agent(ScriptedModel::new().text("b"), &store, Vec::new());
    let outcome = second
        .run_with("go", RunOptions::new().run_id("same"))
        .await;
    let error = outcome.result.unwrap_err();
    // Not a sequence conflict between processes: the id was used before, and the error says
    // to resume it.
    assert!(
        matches!(&error, RunError::RunExists { run_id } if run_id == "same"),
        "{error:?}"
    );
    assert!(!error.is_checkpoint_conflict(), "{error:?}");
    assert_eq!(error.http_status(), 409);
    // The first run is untouched: it still holds its answer.
    let again = first.resume("same", RunOptions::new()).await;
    assert!(
        matches!(
            again.result,
            Err(RunError::Resume(ResumeError::Finished { .. }))
        ),
        "{:?}",
        again.result
    );
}

#[tokio::test]
async fn resuming_what_cannot_be_resumed_says_why() {
    let store = Arc::new(MemoryCheckpoints::new());
    let nothing = agent(ScriptedModel::new(), &store, Vec::new());
    let outcome = nothing.resume("never-ran", RunOptions::new()).await;
    assert!(matches!(
        outcome.result,
        Err(RunError::Resume(ResumeError::NotFound { .. }))
    ));

    let mut hang = probe("hang", Behaviour::Hang);
    let model = ScriptedModel::new().tool_call("hang", "{}");
    run_until_killed(
        agent(model, &store, vec![hang.def]),
        "run-7",
        &mut hang.started,
    )
    .await;
    let other_tools = agent(ScriptedModel::new(), &store, Vec::new());
    let outcome = other_tools.resume("run-7", RunOptions::new()).await;
    match outcome.result {
        Err(RunError::Resume(ResumeError::UnknownTool { tool, .. })) => assert_eq!(tool, "hang"),
        other => panic!("expected UnknownTool, got {other:?}"),
    }
    // The transcript handed back still gives the call its one result.
    assert_each_call_answered_once(&outcome.transcript);
    let results = tool_results(&outcome.transcript);
    assert_eq!(results.len(), 1);
    assert!(results[0].is_error && results[0].content.contains("not resumed"));

    let no_store = Agent::builder("plain")
        .model(ScriptedModel::new())
        .build()
        .unwrap();
    let outcome = no_store.resume("run-7", RunOptions::new()).await;
    assert!(matches!(
        outcome.result,
        Err(RunError::Resume(ResumeError::NoStore))
    ));
}

#[tokio::test]
async fn every_call_carries_a_stable_key_across_its_retries() {
    let store = Arc::new(MemoryCheckpoints::new());
    let tool = probe("flaky", Behaviour::Fail(503));
    let policy = Policy::new().on(PolicyKey::Execution, Action::retry(2).unwrap());
    let model = ScriptedModel::new()
        .tool_call("flaky", "{}")
        .text("gave up");
    let agent = agent(model, &store, vec![tool.def.with_policy(policy)]);
    tokio::time::pause();
    let outcome = agent.run_with("go", RunOptions::new().run_id("k")).await;
    assert!(outcome.result.is_err());
    assert_eq!(tool.keys.lock().unwrap().clone(), ["k:call_1", "k:call_1"]);
}

/// A tool that fails with a 400 for every argument but, in the process about to be killed,
/// hangs on arguments a fixer wrote (they start with `fixed`).
fn picky(
    hang_on_fixed: bool,
    calls: Arc<Mutex<u32>>,
    started: mpsc::UnboundedSender<()>,
) -> ToolDef {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Args {
        v: String,
    }
    let policy = Policy::new().on(PolicyKey::Execution, Action::fix("repair", 5).unwrap());
    ToolDef::new("picky", "Picky.", move |args: Args| {
        *calls.lock().unwrap() += 1;
        let hang = hang_on_fixed && args.v.starts_with("fixed");
        let started = started.clone();
        async move {
            if hang {
                let _ = started.send(());
                std::future::pending::<()>().await;
            }
            Err::<String, _>(HttpError::new(400, "no"))
        }
    })
    .with_policy(policy)
    .idempotent(true)
}

fn repair(asked: Arc<Mutex<u32>>) -> FixerDef {
    FixerDef::from_fn("repair", move |_req: FixRequest| {
        let mut asked = asked.lock().unwrap();
        *asked += 1;
        Ok(Fix::args(format!(r#"{{"v": "fixed{asked}"}}"#)))
    })
}

#[tokio::test]
async fn repairs_spent_before_a_crash_stay_spent() {
    let store = Arc::new(MemoryCheckpoints::new());
    let limits = agent_errors::Limits::default().with_max_repair_steps(3);
    let (tx, mut started) = mpsc::unbounded_channel();
    let (calls, asked) = (Arc::new(Mutex::new(0)), Arc::new(Mutex::new(0)));
    let first = Agent::builder("durable")
        .model(ScriptedModel::new().tool_call("picky", r#"{"v": "raw"}"#))
        .tool(picky(true, calls.clone(), tx.clone()))
        .fixer(repair(asked.clone()))
        .limits(limits)
        .shared_checkpoints(store.clone() as Arc<dyn CheckpointStore>)
        .build()
        .unwrap();
    run_until_killed(first, "run-8", &mut started).await;
    assert_eq!((*calls.lock().unwrap(), *asked.lock().unwrap()), (2, 1));

    let (calls, asked) = (Arc::new(Mutex::new(0)), Arc::new(Mutex::new(0)));
    let second = Agent::builder("durable")
        .model(ScriptedModel::new().text("gave up"))
        .tool(picky(false, calls.clone(), tx))
        .fixer(repair(asked.clone()))
        .limits(limits)
        .shared_checkpoints(store.clone() as Arc<dyn CheckpointStore>)
        .build()
        .unwrap();
    let outcome = second.resume("run-8", RunOptions::new()).await;
    assert_eq!(outcome.result.unwrap(), "gave up");
    // Three repairs in all: one before the crash, two after; the repaired call ran again first.
    assert_eq!(*asked.lock().unwrap(), 2);
    assert_eq!(*calls.lock().unwrap(), 3);
    let results = tool_results(&outcome.transcript);
    assert!(results[0].is_error && results[0].content.contains("validation"));
}

/// A checkpoint saved by the previous state format (version 1), byte for byte as that build
/// wrote it: turn 1 called `broken` (a 400, counted by the per-run breaker); turn 2 called
/// `lookup` (answered) and `hang` (running when the process died).
const CHECKPOINT_V1: &[u8] = include_bytes!("fixtures/checkpoint_v1.json");

#[tokio::test]
async fn a_checkpoint_saved_in_the_previous_format_is_resumed() {
    let store = Arc::new(MemoryCheckpoints::new());
    // A store holds what an older build saved: sequence 4 is where that run stopped.
    for sequence in 0..=4 {
        let state = if sequence == 4 { CHECKPOINT_V1 } else { b"{}" };
        let checkpoint = Checkpoint {
            run_id: "run-v1".into(),
            sequence,
            state: state.to_vec(),
        };
        store.save(&checkpoint).await.unwrap();
    }
    let (lookup, hang) = (
        probe("lookup", Behaviour::Answer),
        probe("hang", Behaviour::Answer),
    );
    // One more failure of `broken` trips the breaker only if the saved count was read.
    let model = ScriptedModel::new().reply(agent_errors::testing::Reply::response(
        agent_errors::ChatResponse::tool_calls(vec![agent_errors::ToolCall::new(
            "call_4", "broken", "{}",
        )]),
    ));
    let resumed = Agent::builder("durable")
        .model(model)
        .tools([
            probe("broken", Behaviour::Fail(400)).def,
            lookup.def,
            hang.def.idempotent(true),
        ])
        .breaker_threshold(2)
        .shared_checkpoints(store.clone() as Arc<dyn CheckpointStore>)
        .build()
        .unwrap();
    let outcome = resumed.resume("run-v1", RunOptions::new()).await;

    match outcome.result {
        Err(RunError::BreakerTripped { tool, failures }) => {
            assert_eq!((tool.as_str(), failures), ("broken", 2));
        }
        other => panic!("expected the breaker to trip, got {other:?}"),
    }
    assert!(
        lookup.keys.lock().unwrap().is_empty(),
        "an answered call ran again"
    );
    assert_eq!(hang.keys.lock().unwrap().clone(), ["run-v1:call_3"]);
    assert_eq!(outcome.report.tool_calls, 4, "the saved counts carry over");
    let results = tool_results(&outcome.transcript);
    let ids: Vec<&str> = results.iter().map(|r| &*r.call_id).collect();
    assert_eq!(ids, ["call_1", "call_2", "call_3", "call_4"]);
    assert_each_call_answered_once(&outcome.transcript);
}

/// A tool that counts its calls and, in the process about to be killed, hangs on arguments a
/// fixer wrote; the model's arguments fail with a 400 that the fixer repairs.
fn guarded(
    hang_on_fixed: bool,
    calls: Arc<Mutex<Vec<String>>>,
    started: mpsc::UnboundedSender<()>,
) -> ToolDef {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Args {
        path: String,
    }
    let policy = Policy::new().on(PolicyKey::Execution, Action::fix("rewrite", 1).unwrap());
    ToolDef::new("read_file", "Reads a file.", move |args: Args| {
        calls.lock().unwrap().push(args.path.clone());
        let hang = hang_on_fixed && args.path == "/etc/shadow";
        let started = started.clone();
        async move {
            if hang {
                let _ = started.send(());
                std::future::pending::<()>().await;
            }
            Err::<String, _>(HttpError::new(400, "no such file"))
        }
    })
    .with_policy(policy)
    .idempotent(true)
}

#[tokio::test]
async fn a_resumed_call_sends_its_repaired_arguments_through_the_permission_hook() {
    let store = Arc::new(MemoryCheckpoints::new());
    let rewrite = || {
        FixerDef::from_fn("rewrite", |_: FixRequest| {
            Ok(Fix::args(r#"{"path": "/etc/shadow"}"#))
        })
    };
    let (tx, mut started) = mpsc::unbounded_channel();
    let before = Arc::new(Mutex::new(Vec::new()));
    let first = Agent::builder("durable")
        .model(ScriptedModel::new().tool_call("read_file", r#"{"path": "notes.txt"}"#))
        .tool(guarded(true, before.clone(), tx.clone()))
        .fixer(rewrite())
        .shared_checkpoints(store.clone() as Arc<dyn CheckpointStore>)
        .build()
        .unwrap();
    run_until_killed(first, "run-gate", &mut started).await;
    assert_eq!(*before.lock().unwrap(), ["notes.txt", "/etc/shadow"]);

    // The process that resumes the run denies what the fixer wrote.
    let after = Arc::new(Mutex::new(Vec::new()));
    let hook = |call: &agent_errors::ToolCall| {
        if call.arguments.contains("/etc/shadow") {
            agent_errors::permission::Permission::Deny("secrets stay secret".into())
        } else {
            agent_errors::permission::Permission::Allow
        }
    };
    let second = Agent::builder("durable")
        .model(ScriptedModel::new().text("denied"))
        .tool(guarded(false, after.clone(), tx))
        .fixer(rewrite())
        .permission(hook)
        .shared_checkpoints(store.clone() as Arc<dyn CheckpointStore>)
        .build()
        .unwrap();
    let outcome = second.resume("run-gate", RunOptions::new()).await;

    assert_eq!(outcome.result.unwrap(), "denied");
    assert!(
        after.lock().unwrap().is_empty(),
        "the tool ran: {:?}",
        after.lock().unwrap()
    );
    let results = tool_results(&outcome.transcript);
    assert!(results[0].is_error);
    assert!(
        results[0].content.contains("permission denied"),
        "{}",
        results[0].content
    );
    assert_each_call_answered_once(&outcome.transcript);
}

#[tokio::test(start_paused = true)]
async fn a_crash_looping_run_cannot_retry_past_its_allowance_across_restarts() {
    const MAX_RETRIES: u32 = 3;
    let store = Arc::new(MemoryCheckpoints::new());
    let policy = Policy::new().on(PolicyKey::Execution, Action::retry(100).unwrap());
    let mut calls = 0;
    let mut processes = 0;
    // Each process dies asleep before the retry it paid for, and the next one resumes the run.
    let outcome = loop {
        processes += 1;
        assert!(processes <= 20, "still retrying after {calls} calls");
        let mut tool = probe("flaky", Behaviour::Fail(503));
        let agent = Agent::builder("durable")
            .model(
                ScriptedModel::new()
                    .tool_call("flaky", "{}")
                    .text("gave up"),
            )
            .tool(tool.def.with_policy(policy.clone()))
            .limits(agent_errors::Limits::default().with_max_retries(MAX_RETRIES))
            .shared_checkpoints(store.clone() as Arc<dyn CheckpointStore>)
            .build()
            .unwrap();
        let task = tokio::spawn(async move {
            if processes == 1 {
                let options = RunOptions::new().run_id("crash-loop");
                agent.run_with("go", options).await
            } else {
                agent.resume("crash-loop", RunOptions::new()).await
            }
        });
        let started = tool.started.recv().await;
        task.abort();
        calls += tool.keys.lock().unwrap().len();
        match task.await {
            Ok(outcome) => break outcome,
            Err(error) => assert!(error.is_cancelled() && started.is_some()),
        }
    };

    assert_eq!(
        calls,
        MAX_RETRIES as usize + 1,
        "the first call and {MAX_RETRIES} retries in all, over {processes} processes"
    );
    // The process that found the allowance spent says so, and the run goes on without a retry.
    let refused =
        |e: &agent_errors::Event| matches!(e, agent_errors::Event::RetryBudgetExhausted { .. });
    assert!(
        outcome.report.events.iter().any(refused),
        "{:?}",
        outcome.report.events
    );
    assert_each_call_answered_once(&outcome.transcript);
}

#[tokio::test(start_paused = true)]
async fn a_resumed_run_gets_the_deadline_it_had_left_not_a_fresh_one() {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct NoArgs {}
    let store = Arc::new(MemoryCheckpoints::new());
    let limits = agent_errors::Limits::default().with_run_deadline(Duration::from_secs(60));
    let slow = ToolDef::new("slow", "Takes 40 s.", |_: NoArgs| async {
        tokio::time::sleep(Duration::from_secs(40)).await;
        Ok::<_, HttpError>("done".to_owned())
    });
    let mut hang = probe("hang", Behaviour::Hang);
    let first = Agent::builder("durable")
        .model(
            ScriptedModel::new()
                .tool_call("slow", "{}")
                .tool_call("hang", "{}"),
        )
        .tools([slow, hang.def])
        .limits(limits)
        .shared_checkpoints(store.clone() as Arc<dyn CheckpointStore>)
        .build()
        .unwrap();
    run_until_killed(first, "run-deadline", &mut hang.started).await;

    let resumed = Agent::builder("durable")
        .model(ScriptedModel::new())
        // Idempotent: the call runs again, and hangs again, until the deadline.
        .tool(probe("hang", Behaviour::Hang).def.idempotent(true))
        .limits(limits)
        .shared_checkpoints(store.clone() as Arc<dyn CheckpointStore>)
        .build()
        .unwrap();
    let began = tokio::time::Instant::now();
    let outcome = resumed.resume("run-deadline", RunOptions::new()).await;
    let waited = began.elapsed();

    match outcome.result {
        Err(RunError::DeadlineExceeded { limit }) => {
            assert_eq!(limit, Duration::from_secs(20), "the 20 s the run had left");
        }
        other => panic!("expected the deadline, got {other:?}"),
    }
    assert_eq!(waited, Duration::from_secs(20));
    assert_each_call_answered_once(&outcome.transcript);
}

/// The previous-format checkpoint, edited by `damage`, as the only checkpoint of `run_id`.
async fn damaged(
    run_id: &str,
    damage: impl FnOnce(&mut serde_json::Value),
) -> Arc<MemoryCheckpoints> {
    let mut state: serde_json::Value = serde_json::from_slice(CHECKPOINT_V1).unwrap();
    damage(&mut state);
    let store = Arc::new(MemoryCheckpoints::new());
    let checkpoint = Checkpoint {
        run_id: run_id.into(),
        sequence: 0,
        state: serde_json::to_vec(&state).unwrap(),
    };
    store.save(&checkpoint).await.unwrap();
    store
}

#[tokio::test]
async fn a_checkpoint_that_breaks_the_one_result_rule_is_refused_naming_the_call() {
    use agent_errors::run::BrokenTranscript;
    use serde_json::json;

    type Damage = fn(&mut serde_json::Value);
    let cases: [(Damage, &str, BrokenTranscript); 6] = [
        (
            |s| {
                s["transcript"][3]["tool_calls"][1]["id"] = json!("call_2");
                s["pending"][1]["call"]["id"] = json!("call_2");
            },
            "call_2",
            BrokenTranscript::DuplicateCallId,
        ),
        (
            |s| {
                let answer = s["transcript"][2].clone();
                s["transcript"].as_array_mut().unwrap().insert(2, answer);
            },
            "call_1",
            BrokenTranscript::AnsweredTwice,
        ),
        (
            |s| s["transcript"][2]["call_id"] = json!("call_9"),
            "call_9",
            BrokenTranscript::OrphanResult,
        ),
        (
            |s| s["pending"][0]["result"]["call_id"] = json!("call_3"),
            "call_3",
            BrokenTranscript::OrphanResult,
        ),
        (
            |s| {
                s["transcript"].as_array_mut().unwrap().remove(2);
            },
            "call_1",
            BrokenTranscript::Unanswered,
        ),
        (
            |s| {
                s["pending"].as_array_mut().unwrap().remove(0);
            },
            "call_3",
            BrokenTranscript::PendingMismatch,
        ),
    ];
    for (damage, call, problem) in cases {
        let store = damaged("run-broken", damage).await;
        let (lookup, hang) = (
            probe("lookup", Behaviour::Answer),
            probe("hang", Behaviour::Answer),
        );
        let model = ScriptedModel::new();
        let resumed = Agent::builder("durable")
            .model(model.clone())
            .tools([probe("broken", Behaviour::Answer).def, lookup.def, hang.def])
            .shared_checkpoints(store.clone() as Arc<dyn CheckpointStore>)
            .build()
            .unwrap();
        let outcome = resumed.resume("run-broken", RunOptions::new()).await;
        match outcome.result {
            Err(RunError::Resume(ResumeError::BrokenTranscript {
                call_id,
                problem: found,
                ..
            })) => {
                assert_eq!((call_id.as_str(), found), (call, problem));
            }
            other => panic!("expected {problem:?} at {call}, got {other:?}"),
        }
        assert!(lookup.keys.lock().unwrap().is_empty() && hang.keys.lock().unwrap().is_empty());
        assert_eq!(model.calls(), 0);
    }
}

#[tokio::test]
async fn a_checkpoint_of_another_format_version_is_refused_naming_both() {
    for version in [0, 5] {
        let store = damaged("run-old", |s| s["version"] = serde_json::json!(version)).await;
        let resumed = agent(ScriptedModel::new(), &store, Vec::new());
        let outcome = resumed.resume("run-old", RunOptions::new()).await;
        match outcome.result {
            Err(RunError::Checkpoint(agent_errors::checkpoint::CheckpointError::Corrupt {
                reason,
                ..
            })) => {
                assert!(reason.contains(&format!("version {version}")), "{reason}");
                assert!(reason.contains("1 to 4"), "{reason}");
            }
            other => panic!("expected version {version} to be refused, got {other:?}"),
        }
    }
}
