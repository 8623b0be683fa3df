//! A person in the loop: a call that needs a person runs only once one approves it (with the
//! arguments they approved, through the same checks as any other), a denial tells the model and
//! never runs the tool, a policy can hand a failure to a person, and a checkpointed run nobody
//! answers ends waiting and goes on when resumed with the answer, on a new agent and store
//! handle (SQLite, and PostgreSQL on a server the test starts).

use crate::support;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use agent_errors::approval::{Decision, PendingApproval, WaitReason};
use agent_errors::checkpoint::{CheckpointStore, PostgresCheckpoints, SqliteCheckpoints};
use agent_errors::permission::Permission;
use agent_errors::policy::{Action, Policy, PolicyKey};
use agent_errors::run::{ResumeError, TerminationReason};
use agent_errors::testing::{FaultyTool, ScriptedModel};
use support::postgres::PostgresServer;
use support::tools::transfer;

use agent_errors::{
    Agent, AgentBuilder, ErrorKind, Event, HttpError, Limits, Message, RunError, RunOptions,
    ToolCall, ToolDef, ToolResult,
};

/// An approver that answers `decision` and remembers what it was asked.
fn answering(
    decision: Decision,
    asked: &Arc<Mutex<Vec<PendingApproval>>>,
) -> impl Fn(&PendingApproval) -> Decision + Send + Sync + 'static {
    let asked = Arc::clone(asked);
    move |pending: &PendingApproval| {
        asked.lock().unwrap().push(pending.clone());
        decision.clone()
    }
}

fn builder(model: &ScriptedModel, sent: &Arc<Mutex<Vec<u32>>>) -> AgentBuilder {
    Agent::builder("clerk")
        .model(model.clone())
        .tool(transfer(sent).requires_approval(true))
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

/// The tool results the model was shown in its last request.
fn shown_to_model(model: &ScriptedModel) -> Vec<ToolResult> {
    let request = model.last_request().expect("the model was asked");
    tool_results(&request.messages)
        .into_iter()
        .cloned()
        .collect()
}

#[tokio::test]
async fn an_approved_call_runs_once_and_the_run_finishes() {
    let sent = Arc::new(Mutex::new(Vec::new()));
    let asked = Arc::new(Mutex::new(Vec::new()));
    let model = ScriptedModel::new()
        .tool_call("transfer", r#"{"amount": 900}"#)
        .text("sent it");
    let agent = builder(&model, &sent)
        .approver(answering(Decision::Approve, &asked))
        .build()
        .unwrap();

    let outcome = agent
        .run_with("pay the rent", RunOptions::new().run_id("rent"))
        .await;
    assert_eq!(outcome.result.unwrap(), "sent it");
    assert_eq!(*sent.lock().unwrap(), [900]);
    let answered = Event::PersonAsked {
        tool: "transfer".into(),
        answer: "approved",
    };
    assert_eq!(outcome.report.events, [answered]);
    let asked = asked.lock().unwrap();
    assert_eq!(
        *asked,
        [PendingApproval::new(
            "call_1",
            "transfer",
            r#"{"amount": 900}"#,
            WaitReason::ApprovalRequired
        )
        .in_run("rent")]
    );
    assert_eq!(shown_to_model(&model)[0].content, "sent 900");
}

#[tokio::test]
async fn a_denied_call_never_runs_and_the_model_is_told_why() {
    let sent = Arc::new(Mutex::new(Vec::new()));
    let asked = Arc::new(Mutex::new(Vec::new()));
    let model = ScriptedModel::new()
        .tool_call("transfer", r#"{"amount": 900}"#)
        .text("could not");
    let agent = builder(&model, &sent)
        .approver(answering(
            Decision::Deny("too much this month".into()),
            &asked,
        ))
        .build()
        .unwrap();

    assert_eq!(agent.run("pay the rent").await.unwrap(), "could not");
    assert!(sent.lock().unwrap().is_empty(), "a denied call never runs");
    let shown = shown_to_model(&model);
    assert!(shown[0].is_error);
    assert!(
        shown[0].content.contains("too much this month"),
        "{}",
        shown[0].content
    );
}

#[tokio::test]
async fn a_persons_denials_count_against_the_runs_budget_of_denials() {
    let sent = Arc::new(Mutex::new(Vec::new()));
    let asked = Arc::new(Mutex::new(Vec::new()));
    let model = ScriptedModel::new()
        .tool_call("transfer", r#"{"amount": 1}"#)
        .tool_call("transfer", r#"{"amount": 2}"#)
        .text("never reached");
    let agent = builder(&model, &sent)
        .approver(answering(Decision::Deny("no".into()), &asked))
        .limits(Limits::default().with_max_permission_denials(2))
        .build()
        .unwrap();

    let error = agent.run("pay").await.unwrap_err();
    let Some(terminated) = error.terminated() else {
        panic!("expected the denial budget to end the run: {error:?}");
    };
    assert_eq!(
        terminated.reason,
        TerminationReason::PermissionDenials { denials: 2 }
    );
    assert!(sent.lock().unwrap().is_empty());
}

#[tokio::test]
async fn edited_arguments_run_in_place_of_the_models() {
    let sent = Arc::new(Mutex::new(Vec::new()));
    let asked = Arc::new(Mutex::new(Vec::new()));
    let model = ScriptedModel::new()
        .tool_call("transfer", r#"{"amount": 900}"#)
        .text("sent less");
    let edited = Decision::ApproveWith(r#"{"amount": 500}"#.into());
    let agent = builder(&model, &sent)
        .approver(answering(edited, &asked))
        .build()
        .unwrap();

    assert_eq!(agent.run("pay").await.unwrap(), "sent less");
    assert_eq!(*sent.lock().unwrap(), [500]);
}

#[tokio::test]
async fn edited_arguments_the_permission_hook_denies_are_denied() {
    let sent = Arc::new(Mutex::new(Vec::new()));
    let asked = Arc::new(Mutex::new(Vec::new()));
    let hooked = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&hooked);
    let model = ScriptedModel::new()
        .tool_call("transfer", r#"{"amount": 900}"#)
        .text("could not");
    let edited = Decision::ApproveWith(r#"{"amount": 5000}"#.into());
    let agent = builder(&model, &sent)
        .approver(answering(edited, &asked))
        .permission(move |call: &ToolCall| {
            seen.lock().unwrap().push(call.arguments.clone());
            if call.arguments.contains("5000") {
                Permission::Deny("over the limit".into())
            } else {
                Permission::Allow
            }
        })
        .build()
        .unwrap();

    assert_eq!(agent.run("pay").await.unwrap(), "could not");
    assert!(sent.lock().unwrap().is_empty(), "the edited call never ran");
    // The hook was asked about what the model wrote, and then about what the person approved.
    assert_eq!(
        *hooked.lock().unwrap(),
        [r#"{"amount": 900}"#, r#"{"amount": 5000}"#]
    );
    assert!(shown_to_model(&model)[0].content.contains("over the limit"));
}

#[tokio::test]
async fn the_agents_rule_makes_any_tool_wait_for_a_person() {
    let asked = Arc::new(Mutex::new(Vec::new()));
    let model = ScriptedModel::new()
        .tool_call("delete_file", r#"{"text": "notes.txt"}"#)
        .text("kept it");
    let agent = Agent::builder("clerk")
        .model(model.clone())
        .tool(agent_errors::testing::echo_tool("delete_file"))
        .require_approval(|call: &ToolCall| call.name.starts_with("delete_"))
        .approver(answering(Decision::Deny("keep it".into()), &asked))
        .build()
        .unwrap();

    assert_eq!(agent.run("clean up").await.unwrap(), "kept it");
    assert_eq!(asked.lock().unwrap()[0].tool, "delete_file");
    assert!(shown_to_model(&model)[0].content.contains("keep it"));
}

#[tokio::test]
async fn a_failure_handed_to_a_person_is_tried_again_once_they_approve() {
    let asked = Arc::new(Mutex::new(Vec::new()));
    let flaky = FaultyTool::new(agent_errors::testing::echo_tool("lookup"))
        .fail_times(1, || HttpError::new(409, "the record is locked"));
    let tool = flaky
        .tool()
        .with_policy(Policy::new().on(PolicyKey::Execution, Action::AskPerson));
    let model = ScriptedModel::new()
        .tool_call("lookup", r#"{"text": "found"}"#)
        .text("done");
    let agent = Agent::builder("clerk")
        .model(model.clone())
        .tool(tool)
        .approver(answering(Decision::Approve, &asked))
        .build()
        .unwrap();

    assert_eq!(agent.run("look").await.unwrap(), "done");
    assert_eq!(flaky.calls(), 2, "the person's approval tried it once more");
    assert_eq!(shown_to_model(&model)[0].content, "found");
    let asked = asked.lock().unwrap();
    let WaitReason::Failure { kind, message } = &asked[0].reason else {
        panic!("expected the failure handed over: {asked:?}");
    };
    assert_eq!(*kind, ErrorKind::Transient);
    assert!(message.contains("the record is locked"), "{message}");
}

#[tokio::test]
async fn a_run_with_nobody_to_answer_ends_waiting_and_its_transcript_stays_whole() {
    let sent = Arc::new(Mutex::new(Vec::new()));
    let model = ScriptedModel::new()
        .tool_call("transfer", r#"{"amount": 900}"#)
        .text("never reached");
    let agent = builder(&model, &sent)
        .checkpoints(agent_errors::checkpoint::MemoryCheckpoints::new())
        .build()
        .unwrap();

    let outcome = agent.run_with("pay", RunOptions::new()).await;
    let Err(RunError::WaitingForPerson { pending }) = outcome.result else {
        panic!("expected the run to wait: {:?}", outcome.result);
    };
    assert_eq!(pending[0].call_id, "call_1");
    assert!(sent.lock().unwrap().is_empty());
    // Every call the model made has exactly one result, so the transcript can be sent again.
    assert_eq!(tool_results(&outcome.transcript).len(), 1);
    assert_eq!(model.calls(), 1);
}

/// An agent whose calls need approval but that has nobody to ask and nowhere to wait from is
/// refused when it is built, naming each thing that needs approval and what to add.
#[test]
fn approval_on_an_agent_that_can_neither_ask_nor_wait_is_a_build_error() {
    use agent_errors::build::ConfigProblem;

    let sent = Arc::new(Mutex::new(Vec::new()));
    let built = builder(&ScriptedModel::new(), &sent)
        .require_approval(|call: &ToolCall| call.name.starts_with("delete_"))
        .build();
    let Err(error) = built else {
        panic!("built an agent nobody can approve for")
    };
    assert_eq!(
        error.problems(),
        [
            ConfigProblem::NobodyToApprove {
                what: "tool `transfer`".to_owned()
            },
            ConfigProblem::NobodyToApprove {
                what: "the agent's `require_approval` rule".to_owned()
            },
        ]
    );
    let message = error.to_string();
    assert!(
        message.contains(".approver(...)") && message.contains(".checkpoints(...)"),
        "{message}"
    );
    // Either one makes the agent whole.
    let asks =
        builder(&ScriptedModel::new(), &sent).approver(|_: &PendingApproval| Decision::Approve);
    assert!(asks.build().is_ok());
    let waits = builder(&ScriptedModel::new(), &sent)
        .checkpoints(agent_errors::checkpoint::MemoryCheckpoints::new());
    assert!(waits.build().is_ok());
}

/// A directory of its own for one test, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "agent-errors-approval-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        Scratch(dir)
    }

    fn store(&self) -> SqliteCheckpoints {
        SqliteCheckpoints::open(self.0.join("runs.db")).expect("the store opens")
    }
}

/// Where a checkpointed run is saved: each handle a new one, as another process would open.
enum Store {
    Sqlite(Scratch),
    Postgres(PostgresServer),
}

impl Store {
    async fn open(&self) -> Arc<dyn CheckpointStore> {
        match self {
            Store::Sqlite(scratch) => Arc::new(scratch.store()),
            Store::Postgres(server) => {
                let address = server.connection_string();
                let connected = PostgresCheckpoints::connect(&address).await;
                Arc::new(connected.expect("the store connects to the test server"))
            }
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Starts a checkpointed run that waits for a person on `transfer`, and checks it waits.
async fn start_waiting(store: &Store, sent: &Arc<Mutex<Vec<u32>>>) -> ScriptedModel {
    let model = ScriptedModel::new().tool_call("transfer", r#"{"amount": 900}"#);
    let agent = builder(&model, sent)
        .shared_checkpoints(store.open().await)
        .build()
        .unwrap();
    let outcome = agent
        .run_with("pay the rent", RunOptions::new().run_id("rent"))
        .await;
    let Err(RunError::WaitingForPerson { pending }) = outcome.result else {
        panic!("expected the run to wait: {:?}", outcome.result);
    };
    let expected = PendingApproval::new(
        "call_1",
        "transfer",
        r#"{"amount": 900}"#,
        WaitReason::ApprovalRequired,
    )
    .in_run("rent");
    assert_eq!(pending, [expected]);
    assert!(sent.lock().unwrap().is_empty());
    assert_eq!(
        saved_version(store).await,
        4,
        "a waiting run is saved in a version builds without approvals refuse (as are all \
         journaled runs: builds before the journal read version 3 at most)"
    );
    model
}

/// The state version of the run "rent" as saved in `store`.
async fn saved_version(store: &Store) -> u64 {
    let checkpoint = store.open().await.load("rent").await.unwrap().unwrap();
    let state: serde_json::Value = serde_json::from_slice(&checkpoint.state).unwrap();
    state["version"].as_u64().unwrap()
}

/// A new agent on a new handle of the same store, as another process would build.
async fn resumer(store: &Store, model: &ScriptedModel, sent: &Arc<Mutex<Vec<u32>>>) -> Agent {
    builder(model, sent)
        .shared_checkpoints(store.open().await)
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_sqlite_run_waits_and_an_approval_resumes_it_on_a_new_agent() {
    approval_resumes(Store::Sqlite(Scratch::new("approve"))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_run_waits_and_an_approval_resumes_it_on_a_new_agent() {
    approval_resumes(Store::Postgres(PostgresServer::start())).await;
}

async fn approval_resumes(store: Store) {
    let sent = Arc::new(Mutex::new(Vec::new()));
    let first = start_waiting(&store, &sent).await;

    let model = ScriptedModel::new().text("sent it");
    let agent = resumer(&store, &model, &sent).await;
    let options = RunOptions::new().answer("call_1", Decision::Approve);
    let outcome = agent.resume("rent", options).await;
    assert_eq!(outcome.result.unwrap(), "sent it");
    assert_eq!(*sent.lock().unwrap(), [900], "the tool ran once");
    // The model was asked for the turn once, before the wait, and once after the answer.
    assert_eq!((first.calls(), model.calls()), (1, 1));
    assert_eq!(shown_to_model(&model)[0].content, "sent 900");
    assert_eq!(saved_version(&store).await, 4, "the journal's version");

    let again = resumer(&store, &model, &sent)
        .await
        .resume("rent", RunOptions::new())
        .await;
    assert!(matches!(
        again.result,
        Err(RunError::Resume(ResumeError::Finished { .. }))
    ));
}

#[tokio::test]
async fn a_sqlite_run_resumed_with_a_denial_never_runs_the_tool() {
    denial_resumes(Store::Sqlite(Scratch::new("deny"))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_run_resumed_with_a_denial_never_runs_the_tool() {
    denial_resumes(Store::Postgres(PostgresServer::start())).await;
}

async fn denial_resumes(store: Store) {
    let sent = Arc::new(Mutex::new(Vec::new()));
    start_waiting(&store, &sent).await;

    let model = ScriptedModel::new().text("could not");
    let agent = resumer(&store, &model, &sent).await;
    let options = RunOptions::new().answer("call_1", Decision::Deny("not this month".into()));
    let outcome = agent.resume("rent", options).await;
    assert_eq!(outcome.result.unwrap(), "could not");
    assert!(sent.lock().unwrap().is_empty());
    let shown = shown_to_model(&model);
    assert!(shown[0].is_error && shown[0].content.contains("not this month"));
}

#[tokio::test]
async fn a_run_resumed_without_an_answer_waits_again() {
    let store = Store::Sqlite(Scratch::new("again"));
    let sent = Arc::new(Mutex::new(Vec::new()));
    start_waiting(&store, &sent).await;

    let model = ScriptedModel::new().text("never reached");
    let outcome = resumer(&store, &model, &sent)
        .await
        .resume("rent", RunOptions::new())
        .await;
    let Err(RunError::WaitingForPerson { pending }) = outcome.result else {
        panic!("expected the run to wait again: {:?}", outcome.result);
    };
    assert_eq!(pending[0].call_id, "call_1");
    assert_eq!(model.calls(), 0);

    let approved = RunOptions::new().answer("call_1", Decision::Approve);
    let model = ScriptedModel::new().text("sent it");
    let outcome = resumer(&store, &model, &sent)
        .await
        .resume("rent", approved)
        .await;
    assert_eq!(outcome.result.unwrap(), "sent it");
    assert_eq!(*sent.lock().unwrap(), [900]);
}

#[tokio::test]
async fn a_failure_handed_to_a_person_waits_in_the_checkpoint_and_is_tried_once_more_on_approval() {
    let scratch = Scratch::new("failure");
    let flaky = FaultyTool::new(agent_errors::testing::echo_tool("lookup"))
        .fail_times(1, || HttpError::new(409, "the record is locked"));
    let tool = flaky
        .tool()
        .with_policy(Policy::new().on(PolicyKey::Execution, Action::AskPerson));
    let build = |model: &ScriptedModel| {
        Agent::builder("clerk")
            .model(model.clone())
            .tool(tool.clone())
            .checkpoints(scratch.store())
            .build()
            .unwrap()
    };
    let model = ScriptedModel::new().tool_call("lookup", r#"{"text": "found"}"#);
    let outcome = build(&model)
        .run_with("look", RunOptions::new().run_id("look"))
        .await;
    let Err(RunError::WaitingForPerson { pending }) = outcome.result else {
        panic!("expected the run to wait: {:?}", outcome.result);
    };
    assert!(matches!(
        pending[0].reason,
        WaitReason::Failure {
            kind: ErrorKind::Transient,
            ..
        }
    ));
    assert_eq!(flaky.calls(), 1);

    let model = ScriptedModel::new().text("done");
    let options = RunOptions::new().answer("call_1", Decision::Approve);
    let outcome = build(&model).resume("look", options).await;
    assert_eq!(outcome.result.unwrap(), "done");
    assert_eq!(flaky.calls(), 2);
    assert_eq!(shown_to_model(&model)[0].content, "found");
}

#[tokio::test]
async fn an_approver_that_panics_has_denied_the_call() {
    let sent = Arc::new(Mutex::new(Vec::new()));
    let runs = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&runs);
    let model = ScriptedModel::new()
        .tool_call("transfer", r#"{"amount": 900}"#)
        .text("could not");
    let agent = builder(&model, &sent)
        .approver(move |_: &PendingApproval| -> Decision {
            counted.fetch_add(1, Ordering::SeqCst);
            panic!("the approval service is down")
        })
        .build()
        .unwrap();

    assert_eq!(agent.run("pay").await.unwrap(), "could not");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert!(sent.lock().unwrap().is_empty());
}

/// Charges a card once a person approves; a failure goes to a person, then to the model.
#[agent_errors::tool(approval = required, on_error(execution = [ask_person, escalate]))]
async fn charge(cents: u64) -> u64 {
    cents
}

#[test]
fn the_dsl_marks_a_tool_for_approval_and_writes_ask_person_as_an_action() {
    let tools = agent_errors::tools![charge];
    assert!(tools[0].is_approval_required());
    let ladder = tools[0].policy().get(PolicyKey::Execution).unwrap();
    assert_eq!(ladder.actions(), [Action::AskPerson, Action::Escalate]);
    assert_eq!(ladder.to_string(), "[ask_person, escalate]");
    assert!(
        transfer(&Arc::default())
            .requires_approval(true)
            .policy()
            .get(PolicyKey::Execution)
            .is_none()
    );
}

#[tokio::test(start_paused = true)]
async fn a_run_that_waits_keeps_the_retries_it_spent_and_spends_none_while_waiting() {
    use agent_errors::checkpoint::{CheckpointStore, MemoryCheckpoints};
    let store: Arc<dyn CheckpointStore> = Arc::new(MemoryCheckpoints::new());
    let unavailable = || HttpError::new(503, "try later");
    let retry_then_person = Policy::new().on(
        PolicyKey::Execution,
        [Action::retry(2).unwrap(), Action::AskPerson],
    );
    let handed_over =
        FaultyTool::new(agent_errors::testing::echo_tool("lookup")).fail_times(2, unavailable);
    let later =
        FaultyTool::new(agent_errors::testing::echo_tool("report")).fail_times(1, unavailable);
    let tools = vec![
        handed_over.tool().with_policy(retry_then_person),
        later
            .tool()
            .with_policy(Policy::new().on(PolicyKey::Execution, Action::retry(2).unwrap())),
    ];
    let build = |model: ScriptedModel| {
        Agent::builder("clerk")
            .model(model)
            .tools(tools.clone())
            .limits(Limits::default().with_max_retries(1))
            .shared_checkpoints(Arc::clone(&store))
            .build()
            .unwrap()
    };

    // One retry spent (the run's whole allowance), then the failure goes to a person.
    let model = ScriptedModel::new().tool_call("lookup", r#"{"text": "found"}"#);
    let outcome = build(model)
        .run_with("look", RunOptions::new().run_id("look"))
        .await;
    assert!(matches!(
        outcome.result,
        Err(RunError::WaitingForPerson { .. })
    ));
    assert_eq!(handed_over.calls(), 2);

    // Approved, the call is tried once more (a person's try, not a retry) and succeeds; the
    // next tool's failure finds the allowance still spent, so it is not retried.
    let model = ScriptedModel::new()
        .tool_call("report", r#"{"text": "sent"}"#)
        .text("never reached");
    let options = RunOptions::new().answer("call_1", Decision::Approve);
    let outcome = build(model).resume("look", options).await;
    assert_eq!(handed_over.calls(), 3);
    assert_eq!(later.calls(), 1, "no retry was left to spend");
    let error = outcome.result.unwrap_err();
    assert!(
        matches!(
            error.terminated().map(|t| &t.reason),
            Some(TerminationReason::RetriesExhausted { .. })
        ),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_loop_of_your_own_asks_the_contexts_approver() {
    use agent_errors::call::CallOutcome;
    use agent_errors::{Registry, RunContext};
    let sent = Arc::new(Mutex::new(Vec::new()));
    let registry = Registry::builder()
        .tool(transfer(&sent).requires_approval(true))
        .build()
        .unwrap();
    let call = ToolCall::new("call_1", "transfer", r#"{"amount": 900}"#);

    let waiting = registry.execute(&RunContext::new(), &call).await;
    let CallOutcome::Stop(stop) = waiting else {
        panic!("expected the call to wait: {waiting:?}");
    };
    assert!(matches!(
        stop.reason,
        TerminationReason::WaitingForPerson(ref pending) if pending.call_id == "call_1"
    ));

    let asked = Arc::new(Mutex::new(Vec::new()));
    let ctx = RunContext::new().with_approver(answering(Decision::Approve, &asked));
    let approved = registry.execute(&ctx, &call).await;
    assert_eq!(
        approved.result().map(|r| r.content.as_str()),
        Some("sent 900")
    );
    assert_eq!(*sent.lock().unwrap(), [900]);
}

#[tokio::test]
async fn a_turns_other_calls_are_answered_while_one_waits_and_never_run_again() {
    let store = Store::Sqlite(Scratch::new("turn"));
    let sent = Arc::new(Mutex::new(Vec::new()));
    let looked_up = FaultyTool::new(agent_errors::testing::echo_tool("balance"));
    let build = |model: &ScriptedModel, store: Arc<dyn CheckpointStore>| {
        builder(model, &sent)
            .tool(looked_up.tool())
            .shared_checkpoints(store)
            .build()
            .unwrap()
    };
    let model = ScriptedModel::new().tool_calls([
        ("transfer", r#"{"amount": 900}"#),
        ("balance", r#"{"text": "1000"}"#),
    ]);
    let outcome = build(&model, store.open().await)
        .run_with("pay if we can", RunOptions::new().run_id("both"))
        .await;
    let Err(RunError::WaitingForPerson { pending }) = outcome.result else {
        panic!("expected the run to wait: {:?}", outcome.result);
    };
    assert_eq!(pending.len(), 1, "only the transfer waits");
    assert_eq!(looked_up.calls(), 1, "the other call ran while it waited");

    let model = ScriptedModel::new().text("paid");
    let options = RunOptions::new().answer(&pending[0].call_id, Decision::Approve);
    let outcome = build(&model, store.open().await)
        .resume("both", options)
        .await;
    assert_eq!(outcome.result.unwrap(), "paid");
    assert_eq!(
        looked_up.calls(),
        1,
        "its saved answer was given back, not run again"
    );
    assert_eq!(*sent.lock().unwrap(), [900]);
    let shown: Vec<String> = shown_to_model(&model)
        .into_iter()
        .map(|r| r.content)
        .collect();
    assert_eq!(shown, ["sent 900", "1000"]);
}

/// A person's answer is bound to the question they were shown: a later call that reuses the
/// answered call's id (ids are the provider's text, numbered per turn by some) is asked about
/// again, whether it sends the same tool other arguments or calls another tool.
#[tokio::test]
async fn an_answer_is_not_replayed_for_a_later_call_that_reuses_its_id() {
    let store = Store::Sqlite(Scratch::new("replay"));
    let sent = Arc::new(Mutex::new(Vec::new()));
    start_waiting(&store, &sent).await;

    // The resumed run's model numbers its calls from `call_1` again.
    let model = ScriptedModel::new()
        .tool_call("transfer", r#"{"amount": 90000}"#)
        .text("sent it");
    let agent = resumer(&store, &model, &sent).await;
    let options =
        RunOptions::new().answer("call_1", Decision::ApproveWith(r#"{"amount": 901}"#.into()));
    let outcome = agent.resume("rent", options).await;
    let Err(RunError::WaitingForPerson { pending }) = outcome.result else {
        panic!("expected the reused id to wait: {:?}", outcome.result);
    };
    assert_eq!(pending[0].arguments, r#"{"amount": 90000}"#);
    assert_eq!(
        *sent.lock().unwrap(),
        [901],
        "only the answered question ran"
    );
}

/// A person approves what they were shown: arguments too long to show whole (here an amount
/// past the cut of what the question shows) do not run on a plain approval of the part shown.
#[tokio::test]
async fn approving_a_question_shown_in_part_does_not_run_the_arguments_past_the_cut() {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct NotedTransfer {
        note: String,
        amount: u32,
    }
    let sent = Arc::new(Mutex::new(Vec::new()));
    let ran = Arc::clone(&sent);
    let transfer = ToolDef::new("transfer", "Sends money.", move |args: NotedTransfer| {
        let ran = Arc::clone(&ran);
        async move {
            ran.lock().unwrap().push(args.amount);
            Ok::<_, std::io::Error>(format!("sent {} ({} chars)", args.amount, args.note.len()))
        }
    })
    .requires_approval(true);
    let arguments = format!(r#"{{"note": "{}", "amount": 90000}}"#, "x".repeat(5_000));
    let model = ScriptedModel::new()
        .tool_call("transfer", &arguments)
        .text("done");
    let asked = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&asked);
    // A person who approves any transfer they can see is not 90000.
    let agent = Agent::builder("clerk")
        .model(model.clone())
        .tool(transfer)
        .approver(move |pending: &PendingApproval| {
            seen.lock().unwrap().push(pending.clone());
            if pending.arguments.contains("90000") {
                Decision::Deny("too much".into())
            } else {
                Decision::Approve
            }
        })
        .build()
        .unwrap();
    let answer = agent.run("pay").await;
    assert!(answer.is_ok(), "{answer:?}");
    assert!(
        sent.lock().unwrap().is_empty(),
        "the amount the person never saw did not run"
    );
    assert_eq!(asked.lock().unwrap().len(), 1);
    assert!(shown_to_model(&model)[0].is_error);
}

/// A tool that records the user name it was given.
fn greeting(ran: &Arc<Mutex<Vec<String>>>) -> ToolDef {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Greet {
        user: String,
    }
    let ran = Arc::clone(ran);
    ToolDef::new("greet", "Greets a user.", move |args: Greet| {
        let ran = Arc::clone(&ran);
        async move {
            ran.lock().unwrap().push(args.user);
            Ok::<_, std::io::Error>("greeted")
        }
    })
    .requires_approval(true)
}

/// A person approves what they read: a character a screen does not show is written as its
/// escape, the question says its text is altered, and a plain approval of it does not run the
/// call; `ApproveUnseen`, the answer that says so, does.
#[tokio::test]
async fn a_hidden_character_is_shown_escaped_and_a_plain_approval_does_not_run_it() {
    let arguments = "{\"user\": \"ali\u{200d}ce\"}";
    for (decision, runs) in [(Decision::Approve, false), (Decision::ApproveUnseen, true)] {
        let ran = Arc::new(Mutex::new(Vec::new()));
        let asked = Arc::new(Mutex::new(Vec::new()));
        let model = ScriptedModel::new()
            .tool_call("greet", arguments)
            .text("done");
        let agent = Agent::builder("clerk")
            .model(model.clone())
            .tool(greeting(&ran))
            .approver(answering(decision.clone(), &asked))
            .build()
            .unwrap();
        assert_eq!(agent.run("greet alice").await.unwrap(), "done");
        let asked = asked.lock().unwrap();
        assert_eq!(asked[0].arguments, r#"{"user": "ali\u{200d}ce"}"#);
        assert!(asked[0].arguments_altered && !asked[0].arguments_cut);
        let ran = ran.lock().unwrap().clone();
        match runs {
            true => assert_eq!(ran, ["ali\u{200d}ce"], "{decision:?}"),
            false => {
                assert!(ran.is_empty(), "a plain approval ran {ran:?}");
                assert!(shown_to_model(&model)[0].is_error);
            }
        }
    }
}

/// A value shown redacted is a value the person did not judge: the question says so and a
/// plain approval does not run it.
#[tokio::test]
async fn a_value_shown_redacted_is_said_and_a_plain_approval_does_not_run_it() {
    let ran = Arc::new(Mutex::new(Vec::new()));
    let asked = Arc::new(Mutex::new(Vec::new()));
    let arguments = r#"{"user": "Bearer sk9f8e7d6c5b4a3928172635445362718"}"#;
    let model = ScriptedModel::new()
        .tool_call("greet", arguments)
        .text("done");
    let agent = Agent::builder("clerk")
        .model(model.clone())
        .tool(greeting(&ran))
        .approver(answering(Decision::Approve, &asked))
        .build()
        .unwrap();
    assert_eq!(agent.run("greet").await.unwrap(), "done");
    let asked = asked.lock().unwrap();
    assert!(asked[0].arguments.contains("[REDACTED]"), "{asked:?}");
    assert!(!asked[0].arguments.contains("sk9f8e7d6c5b4a"), "{asked:?}");
    assert!(asked[0].arguments_altered);
    assert!(
        ran.lock().unwrap().is_empty(),
        "the unseen value did not run"
    );
}

/// Arguments shown exactly as the tool receives them (spacing and line breaks included) are
/// not altered, and a plain approval runs them.
#[tokio::test]
async fn arguments_shown_as_they_are_run_on_a_plain_approval() {
    let ran = Arc::new(Mutex::new(Vec::new()));
    let asked = Arc::new(Mutex::new(Vec::new()));
    let arguments = "{\n  \"user\":   \"alice   smith\"\n}";
    let model = ScriptedModel::new()
        .tool_call("greet", arguments)
        .text("done");
    let agent = Agent::builder("clerk")
        .model(model.clone())
        .tool(greeting(&ran))
        .approver(answering(Decision::Approve, &asked))
        .build()
        .unwrap();
    assert_eq!(agent.run("greet").await.unwrap(), "done");
    let asked = asked.lock().unwrap();
    assert_eq!(asked[0].arguments, arguments);
    assert!(!asked[0].arguments_altered);
    assert_eq!(*ran.lock().unwrap(), ["alice   smith"]);
}

/// A failure handed to a person (`ask_person`) and answered with edited arguments: the edit is
/// a new argument set, and the tool's own approval step asks about it before it runs.
#[tokio::test]
async fn an_edit_answering_a_failure_still_asks_the_tools_approval_for_the_new_arguments() {
    let sent = Arc::new(Mutex::new(Vec::new()));
    let asked = Arc::new(Mutex::new(Vec::<PendingApproval>::new()));
    let seen = Arc::clone(&asked);
    let flaky = FaultyTool::new(transfer(&sent))
        .fail_times(1, || HttpError::new(409, "the account is locked"));
    let tool = flaky
        .tool()
        .requires_approval(true)
        .with_policy(Policy::new().on(PolicyKey::Execution, Action::AskPerson));
    let model = ScriptedModel::new()
        .tool_call("transfer", r#"{"amount": 5}"#)
        .text("done");
    // The person approves a transfer of 5, and answers the failure with an edit to 5000; asked
    // about 5000 as an approval, they deny it.
    let agent = Agent::builder("clerk")
        .model(model.clone())
        .tool(tool)
        .approver(move |pending: &PendingApproval| {
            seen.lock().unwrap().push(pending.clone());
            match (&pending.reason, pending.arguments.contains("5000")) {
                (WaitReason::ApprovalRequired, false) => Decision::Approve,
                (WaitReason::ApprovalRequired, true) => Decision::Deny("not 5000".into()),
                _ => Decision::ApproveWith(r#"{"amount": 5000}"#.into()),
            }
        })
        .build()
        .unwrap();
    assert_eq!(agent.run("pay").await.unwrap(), "done");
    assert!(
        sent.lock().unwrap().is_empty(),
        "the edit ran without its approval"
    );
    let asked = asked.lock().unwrap();
    let reasons: Vec<bool> = (asked.iter())
        .map(|p| p.reason == WaitReason::ApprovalRequired)
        .collect();
    assert_eq!(reasons, [true, false, true], "{asked:?}");
    assert_eq!(asked[2].arguments, r#"{"amount": 5000}"#);
    assert!(shown_to_model(&model)[0].content.contains("not 5000"));
}
