//! Outcomes that are never guessed: a call whose outcome is unknown (a crash mid-call, a timeout
//! once the request was sent) is reconciled first when its tool has a reconciler, and without
//! one a repeat of it is answered, never run: the effect cannot happen twice. Within a run under
//! a paused clock, and across a resume from a checkpoint store.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_errors::build::ReconcilerDef;
use agent_errors::call::{
    Extensions, IdempotencyKey, ReconcileRequest, Reconciled, ToolFuture, ToolHandler,
};
use agent_errors::checkpoint::{CheckpointStore, MemoryCheckpoints};
use agent_errors::testing::ScriptedModel;
use agent_errors::{
    Agent, Event, Message, RunOptions, RunOutcome, ToolDef, ToolError, ToolResult, policy,
};
use tokio::sync::mpsc;

/// What the refund tool does on its calls, in order; past the list it answers.
#[derive(Clone, Copy, Debug)]
enum Step {
    /// Never answers: its timeout fires, or the process is killed while it waits.
    Hang,
    /// The connection was refused: the request never left.
    Refused,
    Answer,
}

/// The payment service's refund tool: it records every key it was called with (the effects),
/// and tells the test each time it starts.
struct Refund {
    def: ToolDef,
    keys: Arc<Mutex<Vec<String>>>,
    started: mpsc::UnboundedReceiver<()>,
}

/// The handler: the call's key recorded as the effect, then the step's answer.
struct RefundHandler {
    steps: Vec<Step>,
    calls: AtomicU32,
    keys: Arc<Mutex<Vec<String>>>,
    started: mpsc::UnboundedSender<()>,
}

impl ToolHandler for RefundHandler {
    fn call(&self, raw_args: &str) -> Result<ToolFuture, ToolError> {
        self.call_with(raw_args, &Extensions::new())
    }

    fn call_with(&self, raw_args: &str, extensions: &Extensions) -> Result<ToolFuture, ToolError> {
        let args: serde_json::Value =
            serde_json::from_str(raw_args).map_err(|e| ToolError::invalid_args(raw_args, e))?;
        let key = extensions
            .get::<IdempotencyKey>()
            .map(ToString::to_string)
            .unwrap_or_default();
        let n = self.calls.fetch_add(1, Ordering::SeqCst) as usize;
        let step = self.steps.get(n).copied().unwrap_or(Step::Answer);
        let (keys, started) = (Arc::clone(&self.keys), self.started.clone());
        Ok(Box::pin(async move {
            if matches!(step, Step::Refused) {
                return Err(std::io::Error::from(std::io::ErrorKind::ConnectionRefused).into());
            }
            keys.lock().unwrap().push(key);
            let _ = started.send(());
            if matches!(step, Step::Hang) {
                std::future::pending::<()>().await;
            }
            Ok(format!(
                "refunded {} cents of {}",
                args["cents"],
                args["order"].as_str().unwrap_or("?")
            ))
        }))
    }
}

fn refund(steps: &[Step]) -> Refund {
    let keys = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = mpsc::unbounded_channel();
    let handler = RefundHandler {
        steps: steps.to_vec(),
        calls: AtomicU32::new(0),
        keys: Arc::clone(&keys),
        started: tx,
    };
    let schema = serde_json::json!({"type": "object", "properties": {
        "order": {"type": "string"}, "cents": {"type": "integer"}
    }});
    let def = ToolDef::from_handler("refund", "Refunds an order.", schema, handler)
        .with_timeout(Duration::from_secs(5));
    Refund {
        def,
        keys,
        started: rx,
    }
}

/// A reconciler that answers `answer` and keeps what it was asked.
fn reconciler(answer: Reconciled) -> (ReconcilerDef, Arc<Mutex<Vec<ReconcileRequest>>>) {
    let asked = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&asked);
    let def = ReconcilerDef::from_fn("check_refund", move |request: ReconcileRequest| {
        log.lock().unwrap().push(request);
        Ok::<_, std::io::Error>(answer.clone())
    });
    (def, asked)
}

const ARGS: &str = r#"{"order": "A-7", "cents": 500}"#;
/// The same refund as the model may write it again: keys reordered, other whitespace.
const SAME_ARGS_REORDERED: &str = "{ \"cents\":500,\n  \"order\" : \"A-7\" }";

fn results(outcome: &RunOutcome) -> Vec<&ToolResult> {
    outcome
        .transcript
        .iter()
        .filter_map(|m| match m {
            Message::Tool(result) => Some(result),
            _ => None,
        })
        .collect()
}

fn keys(refund: &Refund) -> Vec<String> {
    refund.keys.lock().unwrap().clone()
}

fn builder(model: ScriptedModel, tool: ToolDef) -> agent_errors::AgentBuilder {
    Agent::builder("desk").model(model).tool(tool)
}

/// A refund whose answer never comes is escalated to the model, which asks for the same refund
/// again: the policy a user writes when a timeout should reach the model.
fn escalating(tool: ToolDef) -> ToolDef {
    tool.with_policy(policy!(timeout = escalate))
}

#[tokio::test(start_paused = true)]
async fn a_repeat_of_a_call_whose_outcome_is_unknown_is_answered_not_run() {
    let refund = refund(&[Step::Hang]);
    let model = ScriptedModel::new()
        .tool_call("refund", ARGS)
        .tool_call("refund", SAME_ARGS_REORDERED)
        .text("I told the user to check");
    let agent = builder(model, escalating(refund.def.clone()))
        .build()
        .unwrap();
    let outcome = agent
        .run_with("refund A-7", RunOptions::new().run_id("t45"))
        .await;

    assert_eq!(
        outcome.result.as_deref().unwrap(),
        "I told the user to check"
    );
    assert_eq!(keys(&refund), ["t45:call_1"], "one refund, never a second");
    let results = results(&outcome);
    assert!(results[0].is_error && results[0].content.contains("timeout"));
    let repeat = results[1];
    assert!(repeat.is_error, "{}", repeat.content);
    assert!(
        repeat.content.contains("outcome_unknown"),
        "{}",
        repeat.content
    );
    assert!(repeat.content.contains("not run") && repeat.content.contains("call_1"));
    assert!(repeat.content.contains("only reads"), "{}", repeat.content);
    assert!(outcome.report.events.contains(&Event::RepeatNotRun {
        tool: "refund".into(),
        earlier_call: "call_1".into(),
    }));
}

#[tokio::test(start_paused = true)]
async fn a_keyed_tools_repeat_runs_under_the_earlier_calls_key() {
    let refund = refund(&[Step::Hang]);
    let model = ScriptedModel::new()
        .tool_call("refund", ARGS)
        .tool_call("refund", SAME_ARGS_REORDERED)
        .text("refunded");
    let tool = escalating(refund.def.clone().keyed(true));
    let outcome = builder(model, tool)
        .build()
        .unwrap()
        .run_with("refund A-7", RunOptions::new().run_id("t60"))
        .await;

    assert_eq!(outcome.result.as_deref().unwrap(), "refunded");
    // The service saw one key twice, which it applies once: one refund.
    assert_eq!(keys(&refund), ["t60:call_1", "t60:call_1"]);
    let results = results(&outcome);
    assert!(
        results[0].content.contains("timeout"),
        "{}",
        results[0].content
    );
    assert_eq!(results[1].content, "refunded 500 cents of A-7");
    assert!(
        outcome
            .report
            .events
            .contains(&Event::RepeatUnderEarlierKey {
                tool: "refund".into(),
                earlier_call: "call_1".into(),
            })
    );
    assert_eq!(outcome.report.count("repeat_not_run"), 0);
}

#[tokio::test(start_paused = true)]
async fn a_keyed_repeat_resumed_after_a_crash_keeps_the_earlier_key() {
    let store = Arc::new(MemoryCheckpoints::new());
    let mut first = refund(&[Step::Hang, Step::Hang]);
    let model = ScriptedModel::new()
        .tool_call("refund", ARGS)
        .tool_call("refund", SAME_ARGS_REORDERED);
    let agent = builder(model, escalating(first.def.clone().keyed(true)))
        .shared_checkpoints(Arc::clone(&store) as Arc<dyn CheckpointStore>)
        .build()
        .unwrap();
    let options = RunOptions::new().run_id("t61");
    let task = tokio::spawn(async move { agent.run_with("refund A-7", options).await });
    first.started.recv().await.expect("the refund started"); // and timed out
    first.started.recv().await.expect("its repeat started"); // and the process died
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    assert_eq!(keys(&first), ["t61:call_1", "t61:call_1"]);

    let second = refund(&[]);
    let tool = escalating(second.def.clone().keyed(true));
    let outcome = resuming(
        &store,
        ScriptedModel::new().text("refunded"),
        vec![tool],
        None,
    )
    .resume("t61", RunOptions::new())
    .await;

    assert_eq!(outcome.result.as_deref().unwrap(), "refunded");
    assert_eq!(
        keys(&second),
        ["t61:call_1"],
        "the resumed repeat kept the key"
    );
}

#[tokio::test(start_paused = true)]
async fn other_arguments_or_a_failure_that_never_reached_the_service_run_as_usual() {
    // The first call was refused before it was sent: nothing can have happened.
    let refund = refund(&[Step::Refused, Step::Hang]);
    let model = ScriptedModel::new()
        .tool_call("refund", ARGS)
        .tool_call("refund", SAME_ARGS_REORDERED)
        .tool_call("refund", r#"{"order": "B-2", "cents": 500}"#)
        .text("done");
    let tool = refund
        .def
        .clone()
        .with_policy(policy!(transient = escalate, timeout = escalate));
    let outcome = builder(model, tool)
        .build()
        .unwrap()
        .run_with("refund", RunOptions::new().run_id("t46"))
        .await;

    assert_eq!(outcome.result.as_deref().unwrap(), "done");
    // The refused call sent nothing; its repeat ran (and timed out); another order runs.
    assert_eq!(keys(&refund), ["t46:call_2", "t46:call_3"]);
    assert_eq!(outcome.report.count("repeat_not_run"), 0);
}

#[tokio::test(start_paused = true)]
async fn an_idempotent_tool_is_run_again_when_asked_again() {
    let refund = refund(&[Step::Hang]);
    let model = ScriptedModel::new()
        .tool_call("refund", ARGS)
        .tool_call("refund", ARGS)
        .text("done");
    let tool = escalating(refund.def.clone()).idempotent(true);
    let outcome = builder(model, tool)
        .build()
        .unwrap()
        .run_with("refund", RunOptions::new().run_id("t47"))
        .await;

    assert_eq!(outcome.result.as_deref().unwrap(), "done");
    assert_eq!(keys(&refund), ["t47:call_1", "t47:call_2"]);
    let results = results(&outcome);
    assert_eq!(results[1].content, "refunded 500 cents of A-7");
}

#[tokio::test(start_paused = true)]
async fn within_a_run_a_reconciler_that_says_happened_answers_the_timed_out_call() {
    let refund = refund(&[Step::Hang]);
    let (check, asked) = reconciler(Reconciled::happened("refund re_1 of A-7 (found)"));
    let model = ScriptedModel::new()
        .tool_call("refund", ARGS)
        .text("refunded");
    let tool = refund.def.clone().with_reconcile("check_refund");
    let outcome = builder(model, tool)
        .reconciler(check)
        .build()
        .unwrap()
        .run_with("refund", RunOptions::new().run_id("t48"))
        .await;

    assert_eq!(outcome.result.as_deref().unwrap(), "refunded");
    assert_eq!(keys(&refund), ["t48:call_1"]);
    let results = results(&outcome);
    assert_eq!(
        (results[0].content.as_str(), results[0].is_error),
        ("refund re_1 of A-7 (found)", false)
    );
    let asked = asked.lock().unwrap();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].key.to_string(), "t48:call_1");
    assert_eq!(
        asked[0].args,
        Some(serde_json::json!({"order": "A-7", "cents": 500}))
    );
    assert!(asked[0].reason.contains("elapsed"), "{}", asked[0].reason);
}

#[tokio::test(start_paused = true)]
async fn within_a_run_did_not_happen_lets_the_retry_run_with_the_same_key() {
    let refund = refund(&[Step::Hang]);
    let (check, _) = reconciler(Reconciled::DidNotHappen);
    let model = ScriptedModel::new()
        .tool_call("refund", ARGS)
        .text("refunded");
    let tool = refund
        .def
        .clone()
        .with_reconcile("check_refund")
        .with_policy(policy!(timeout = [retry(3), escalate]));
    let outcome = builder(model, tool)
        .reconciler(check)
        .build()
        .unwrap()
        .run_with("refund", RunOptions::new().run_id("t49"))
        .await;

    assert_eq!(outcome.result.as_deref().unwrap(), "refunded");
    assert_eq!(keys(&refund), ["t49:call_1", "t49:call_1"]);
    assert_eq!(results(&outcome)[0].content, "refunded 500 cents of A-7");
    assert_eq!(outcome.report.count("reconciled"), 1);
}

#[tokio::test(start_paused = true)]
async fn within_a_run_still_unknown_is_never_retried_and_its_repeat_is_not_run() {
    let refund = refund(&[Step::Hang]);
    let (check, asked) = reconciler(Reconciled::StillUnknown);
    let model = ScriptedModel::new()
        .tool_call("refund", ARGS)
        .tool_call("refund", SAME_ARGS_REORDERED)
        .text("asked the user");
    // A retry was asked for timeouts, but the reconciler cannot tell: the outcome_unknown
    // policy (built in: shown to the model) answers instead.
    let tool = refund
        .def
        .clone()
        .with_reconcile("check_refund")
        .with_policy(policy!(timeout = retry(3)));
    let outcome = builder(model, tool)
        .reconciler(check)
        .build()
        .unwrap()
        .run_with("refund", RunOptions::new().run_id("t50"))
        .await;

    assert_eq!(outcome.result.as_deref().unwrap(), "asked the user");
    assert_eq!(keys(&refund), ["t50:call_1"]);
    let results = results(&outcome);
    assert!(
        results[0].content.contains("outcome_unknown"),
        "{}",
        results[0].content
    );
    assert!(
        results[1].content.contains("not run"),
        "{}",
        results[1].content
    );
    // The repeat had the earlier call reconciled again, by the earlier call's key.
    let asked = asked.lock().unwrap();
    let keys: Vec<String> = asked.iter().map(|r| r.key.to_string()).collect();
    assert_eq!(keys, ["t50:call_1", "t50:call_1"]);
}

/// Starts a run of `agent` and kills it (drops its task) once the refund has started.
async fn run_until_killed(agent: Agent, run_id: &str, started: &mut mpsc::UnboundedReceiver<()>) {
    let options = RunOptions::new().run_id(run_id);
    let task = tokio::spawn(async move { agent.run_with("refund A-7", options).await });
    started.recv().await.expect("the refund started");
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
}

/// A run killed in the middle of its refund, and the store that holds it.
async fn killed_mid_refund(run_id: &str) -> (Arc<MemoryCheckpoints>, Vec<String>) {
    let store = Arc::new(MemoryCheckpoints::new());
    let mut first = refund(&[Step::Hang]);
    let model = ScriptedModel::new().tool_call("refund", ARGS);
    let agent = builder(model, first.def.clone())
        .shared_checkpoints(Arc::clone(&store) as Arc<dyn CheckpointStore>)
        .build()
        .unwrap();
    run_until_killed(agent, run_id, &mut first.started).await;
    (store, keys(&first))
}

/// The agent that resumes the run: a fresh refund tool (answering at once), the reconciler if
/// any, on `model`.
fn resuming(
    store: &Arc<MemoryCheckpoints>,
    model: ScriptedModel,
    tools: Vec<ToolDef>,
    check: Option<ReconcilerDef>,
) -> Agent {
    let builder = Agent::builder("desk")
        .model(model)
        .tools(tools)
        .shared_checkpoints(Arc::clone(store) as Arc<dyn CheckpointStore>);
    match check {
        Some(check) => builder.reconciler(check),
        None => builder,
    }
    .build()
    .unwrap()
}

#[tokio::test]
async fn on_resume_a_reconciler_that_says_happened_answers_the_interrupted_call() {
    let (store, before) = killed_mid_refund("t51").await;
    let second = refund(&[]);
    let (check, asked) = reconciler(Reconciled::happened("refund re_1 of A-7 (found)"));
    let tool = second.def.clone().with_reconcile("check_refund");
    let model = ScriptedModel::new().text("refunded");
    let outcome = resuming(&store, model, vec![tool], Some(check))
        .resume("t51", RunOptions::new())
        .await;

    assert_eq!(outcome.result.as_deref().unwrap(), "refunded");
    assert_eq!(before, ["t51:call_1"]);
    assert!(keys(&second).is_empty(), "refunded a second time");
    let results = results(&outcome);
    assert_eq!(
        (results[0].content.as_str(), results[0].is_error),
        ("refund re_1 of A-7 (found)", false)
    );
    let asked = asked.lock().unwrap();
    assert_eq!(asked[0].key.to_string(), "t51:call_1");
    assert!(
        asked[0].reason.contains("interrupted"),
        "{}",
        asked[0].reason
    );
}

#[tokio::test]
async fn on_resume_did_not_happen_runs_the_call_once_with_its_key() {
    let (store, _) = killed_mid_refund("t52").await;
    let second = refund(&[]);
    let (check, _) = reconciler(Reconciled::DidNotHappen);
    let tool = second.def.clone().with_reconcile("check_refund");
    let model = ScriptedModel::new().text("refunded");
    let outcome = resuming(&store, model, vec![tool], Some(check))
        .resume("t52", RunOptions::new())
        .await;

    assert_eq!(outcome.result.as_deref().unwrap(), "refunded");
    assert_eq!(keys(&second), ["t52:call_1"]);
    assert_eq!(results(&outcome)[0].content, "refunded 500 cents of A-7");
}

#[tokio::test]
async fn on_resume_still_unknown_is_told_to_the_model_and_its_repeat_is_not_run() {
    let (store, _) = killed_mid_refund("t53").await;
    let second = refund(&[]);
    let (check, _) = reconciler(Reconciled::StillUnknown);
    let tool = second.def.clone().with_reconcile("check_refund");
    let model = ScriptedModel::new()
        .tool_call("refund", SAME_ARGS_REORDERED)
        .text("asked the user");
    let outcome = resuming(&store, model, vec![tool], Some(check))
        .resume("t53", RunOptions::new())
        .await;

    assert_eq!(outcome.result.as_deref().unwrap(), "asked the user");
    assert!(keys(&second).is_empty(), "refunded a second time");
    let results = results(&outcome);
    assert!(
        results[0].content.contains("outcome_unknown"),
        "{}",
        results[0].content
    );
    assert!(
        results[1].content.contains("not run"),
        "{}",
        results[1].content
    );
}

#[tokio::test]
async fn without_a_reconciler_the_model_asking_again_after_a_resume_refunds_once() {
    let (store, before) = killed_mid_refund("t54").await;
    let second = refund(&[]);
    let model = ScriptedModel::new()
        .tool_call("refund", SAME_ARGS_REORDERED)
        .text("asked the user");
    let outcome = resuming(&store, model, vec![second.def.clone()], None)
        .resume("t54", RunOptions::new())
        .await;

    assert_eq!(outcome.result.as_deref().unwrap(), "asked the user");
    assert_eq!(before, ["t54:call_1"]);
    assert!(keys(&second).is_empty(), "refunded a second time");
    assert_eq!(outcome.report.count("repeat_not_run"), 1);
}

/// A lookup that only reads: it hangs once (`hang`), or answers.
fn lookup(hang: bool) -> (ToolDef, mpsc::UnboundedReceiver<()>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let def = ToolDef::new(
        "lookup",
        "Looks an order up.",
        move |_: serde_json::Value| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(());
                if hang {
                    std::future::pending::<()>().await;
                }
                Ok::<_, std::io::Error>("no refund found yet")
            }
        },
    )
    .idempotent(true);
    (def, rx)
}

#[tokio::test]
async fn the_record_of_an_unknown_outcome_outlives_another_crash() {
    let (store, _) = killed_mid_refund("t55").await;
    // Resumed, the run tells the model the refund's outcome is unknown, then dies in a lookup.
    let second = refund(&[]);
    let (hanging, mut in_lookup) = lookup(true);
    let model = ScriptedModel::new().tool_call("lookup", "{}");
    let agent = resuming(&store, model, vec![second.def.clone(), hanging], None);
    let task = tokio::spawn(async move { agent.resume("t55", RunOptions::new()).await });
    in_lookup.recv().await.expect("the lookup started");
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());

    // Resumed again, the model asks for the refund once more: the record was saved.
    let third = refund(&[]);
    let (answering, _) = lookup(false);
    let model = ScriptedModel::new()
        .tool_call("refund", SAME_ARGS_REORDERED)
        .text("asked the user");
    let outcome = resuming(&store, model, vec![third.def.clone(), answering], None)
        .resume("t55", RunOptions::new())
        .await;

    assert_eq!(outcome.result.as_deref().unwrap(), "asked the user");
    assert!(
        keys(&second).is_empty() && keys(&third).is_empty(),
        "refunded twice"
    );
    assert_eq!(outcome.report.count("repeat_not_run"), 1);
    let results = results(&outcome);
    assert!(results[0].content.contains("outcome_unknown"));
    assert_eq!(results[1].content, "no refund found yet");
    assert!(
        results[2].content.contains("not run"),
        "{}",
        results[2].content
    );
}
