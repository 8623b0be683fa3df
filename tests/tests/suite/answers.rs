//! A person's answer is bound to the question they were shown: the tool, the whole arguments
//! and why it asked. It is used once; a later call reusing the call id with other arguments or
//! another tool is asked again. A person sees the whole argument set, and a question shown cut
//! is not run by a plain approval.

use std::sync::{Arc, Mutex};

use agent_errors::approval::{Decision, MAX_SHOWN_CHARS, PendingApproval, WaitReason};
use agent_errors::checkpoint::{CheckpointStore, MemoryCheckpoints};
use agent_errors::testing::ScriptedModel;
use agent_errors::{Agent, AgentBuilder, Event, RunError, RunOptions, ToolDef};

use crate::support::tools::transfer;

/// A tool that requires approval; counts its runs in `wiped`.
fn wipe(wiped: &Arc<Mutex<u32>>) -> ToolDef {
    let wiped = Arc::clone(wiped);
    ToolDef::new(
        "wipe",
        "Deletes everything.",
        move |_: serde_json::Value| {
            let wiped = Arc::clone(&wiped);
            async move {
                *wiped.lock().unwrap() += 1;
                Ok::<_, std::io::Error>("wiped".to_owned())
            }
        },
    )
    .requires_approval(true)
}

/// A store and two tools that require approval, shared by the processes of a test.
pub(crate) struct Bank {
    store: Arc<dyn CheckpointStore>,
    pub(crate) sent: Arc<Mutex<Vec<u32>>>,
    wiped: Arc<Mutex<u32>>,
}

impl Bank {
    pub(crate) fn new() -> Self {
        Bank {
            store: Arc::new(MemoryCheckpoints::new()),
            sent: Arc::default(),
            wiped: Arc::default(),
        }
    }

    /// A new agent on the bank's store, as another process would build; `model` numbers its
    /// calls from `call_1` again, as some providers do per turn.
    pub(crate) fn agent(&self, model: &ScriptedModel) -> Agent {
        self.builder(model).build().unwrap()
    }

    /// The builder of [`agent`](Self::agent), for a test to add to.
    pub(crate) fn builder(&self, model: &ScriptedModel) -> AgentBuilder {
        Agent::builder("clerk")
            .model(model.clone())
            .tool(transfer(&self.sent).requires_approval(true))
            .tool(wipe(&self.wiped))
            .shared_checkpoints(Arc::clone(&self.store))
    }

    /// Starts the run "rent", which waits on `transfer {"amount": 1}` as `call_1`.
    pub(crate) async fn waiting(&self) -> PendingApproval {
        let model = ScriptedModel::new().tool_call("transfer", r#"{"amount": 1}"#);
        let outcome = self
            .agent(&model)
            .run_with("pay the rent", RunOptions::new().run_id("rent"))
            .await;
        let mut pending = waiting_on(outcome.result);
        assert_eq!(pending.len(), 1);
        let pending = pending.remove(0);
        assert_eq!((&*pending.call_id, &*pending.tool), ("call_1", "transfer"));
        pending
    }
}

pub(crate) fn waiting_on<O: std::fmt::Debug>(result: Result<O, RunError>) -> Vec<PendingApproval> {
    match result {
        Err(RunError::WaitingForPerson { pending }) => pending,
        other => panic!("expected the run to wait for a person: {other:?}"),
    }
}

/// The answers `outcome`'s events say a person gave.
pub(crate) fn answers(events: &[Event]) -> Vec<&'static str> {
    events
        .iter()
        .filter_map(|event| match event {
            Event::PersonAsked { answer, .. } => Some(*answer),
            _ => None,
        })
        .collect()
}

/// Resumes "rent" with `options`; the model then calls `tool` with `arguments` under the reused
/// id `call_1`, which the run gives an id of its own (`call_1_2`). The run must wait again for
/// that call: the answer was for another question.
async fn reused_id_asks_again(options: RunOptions, tool: &str, arguments: &str) -> Bank {
    let bank = Bank::new();
    bank.waiting().await;
    let model = ScriptedModel::new().tool_call(tool, arguments).text("done");
    let outcome = bank.agent(&model).resume("rent", options).await;
    let pending = waiting_on(outcome.result);
    assert_eq!(pending.len(), 1);
    assert_eq!(
        (
            &*pending[0].call_id,
            &*pending[0].tool,
            &*pending[0].arguments
        ),
        ("call_1_2", tool, arguments),
        "the call reusing the id waits for its own answer"
    );
    bank
}

#[tokio::test]
async fn an_answer_to_a_question_runs_that_call_once_and_a_reused_id_with_other_arguments_asks_again()
 {
    let probe = Bank::new();
    let pending = probe.waiting().await;
    let options = RunOptions::new().answer_to(&pending, Decision::Approve);
    let bank = reused_id_asks_again(options, "transfer", r#"{"amount": 90000}"#).await;
    assert_eq!(*bank.sent.lock().unwrap(), [1], "90000 never ran");
}

#[tokio::test]
async fn an_answer_to_a_question_does_not_run_another_tool_reusing_its_call_id() {
    let probe = Bank::new();
    let pending = probe.waiting().await;
    let options = RunOptions::new().answer_to(&pending, Decision::Approve);
    let bank = reused_id_asks_again(options, "wipe", "{}").await;
    assert_eq!(*bank.sent.lock().unwrap(), [1]);
    assert_eq!(*bank.wiped.lock().unwrap(), 0, "wipe never ran");
}

#[tokio::test]
async fn an_answer_by_call_id_is_used_once_for_the_call_that_waited() {
    let options = RunOptions::new().answer("call_1", Decision::Approve);
    let bank = reused_id_asks_again(options, "transfer", r#"{"amount": 90000}"#).await;
    assert_eq!(*bank.sent.lock().unwrap(), [1]);
    let options = RunOptions::new().answer("call_1", Decision::Approve);
    let bank = reused_id_asks_again(options, "wipe", "{}").await;
    assert_eq!(*bank.wiped.lock().unwrap(), 0);
}

#[tokio::test]
async fn an_edit_applies_to_the_call_it_answered_only() {
    let probe = Bank::new();
    let pending = probe.waiting().await;
    let edit = Decision::ApproveWith(r#"{"amount": 2}"#.into());
    let options = RunOptions::new().answer_to(&pending, edit);
    let bank = reused_id_asks_again(options, "transfer", r#"{"amount": 90000}"#).await;
    assert_eq!(
        *bank.sent.lock().unwrap(),
        [2],
        "the edit ran once, in place of 1"
    );
}

#[tokio::test]
async fn an_answer_to_another_question_is_refused_and_the_call_waits() {
    let bank = Bank::new();
    let waiting = bank.waiting().await;
    // The person was shown 90000 under the same call id: not the question the run waits on.
    let other = PendingApproval::new(
        "call_1",
        "transfer",
        r#"{"amount": 90000}"#,
        WaitReason::ApprovalRequired,
    );
    assert_ne!(other.digest, waiting.digest);
    let options = RunOptions::new().answer_to(&other, Decision::Approve);
    let model = ScriptedModel::new().text("done");
    let outcome = bank.agent(&model).resume("rent", options).await;
    assert_eq!(answers(&outcome.report.events), ["refused", "later"]);
    assert_eq!(waiting_on(outcome.result), [waiting]);
    assert!(bank.sent.lock().unwrap().is_empty());
}

#[tokio::test]
async fn an_answer_replayed_on_a_run_that_never_asked_runs_nothing_there() {
    let bank = Bank::new();
    let pending = bank.waiting().await;
    // The same call, under the same id, in another run: a person approved it for "rent" only.
    let model = ScriptedModel::new()
        .tool_call("transfer", r#"{"amount": 1}"#)
        .text("done");
    let replayed = RunOptions::new()
        .run_id("rent-again")
        .answer_to(&pending, Decision::Approve);
    let outcome = bank.agent(&model).run_with("pay the rent", replayed).await;
    assert_eq!(answers(&outcome.report.events), ["refused", "later"]);
    let [asked_here] = <[PendingApproval; 1]>::try_from(waiting_on(outcome.result)).unwrap();
    let shown = |p: &PendingApproval| (p.call_id.clone(), p.tool.clone(), p.arguments.clone());
    assert_eq!(
        shown(&asked_here),
        shown(&pending),
        "the same call waits here"
    );
    assert_ne!(
        asked_here.digest, pending.digest,
        "a question of this run, not of `rent`"
    );
    assert!(bank.sent.lock().unwrap().is_empty(), "nothing was sent");
}

/// `{"memo": "...", "amount": 90000}` with the amount past the first `memo_chars` characters.
fn long_transfer(memo_chars: usize) -> String {
    let memo = "x".repeat(memo_chars);
    format!(r#"{{"memo": "{memo}", "amount": 90000}}"#)
}

/// Runs a transfer of `arguments` answered `decision` by an approver; what the person was
/// shown, and the amounts sent.
async fn approved(arguments: &str, decision: Decision) -> (PendingApproval, Vec<u32>) {
    let sent = Arc::new(Mutex::new(Vec::new()));
    let shown = Arc::new(Mutex::new(Vec::new()));
    let model = ScriptedModel::new()
        .tool_call("transfer", arguments)
        .text("done");
    let seen = Arc::clone(&shown);
    let agent = Agent::builder("clerk")
        .model(model)
        .tool(transfer(&sent).requires_approval(true))
        .approver(move |pending: &PendingApproval| {
            seen.lock().unwrap().push(pending.clone());
            decision.clone()
        })
        .build()
        .unwrap();
    agent.run("pay").await.unwrap();
    let shown = shown.lock().unwrap().remove(0);
    let sent = sent.lock().unwrap().clone();
    (shown, sent)
}

#[tokio::test]
async fn a_person_is_shown_the_whole_arguments_they_approve() {
    let arguments = long_transfer(5_070);
    assert_eq!(arguments.chars().count(), 5_099);
    let (shown, sent) = approved(&arguments, Decision::Approve).await;
    assert_eq!(
        shown.arguments, arguments,
        "shown whole, not cut at 300 characters"
    );
    assert!(!shown.arguments_cut);
    assert_eq!(sent, [90000], "approved as shown, it runs");
}

#[tokio::test]
async fn a_plain_approval_of_arguments_shown_cut_never_runs_them() {
    let arguments = long_transfer(MAX_SHOWN_CHARS);
    let (shown, sent) = approved(&arguments, Decision::Approve).await;
    assert!(shown.arguments_cut);
    assert!(
        !shown.arguments.contains("90000"),
        "the amount sat past the cut"
    );
    assert!(sent.is_empty(), "a person approved what they could not see");

    let (_, sent) = approved(&arguments, Decision::ApproveUnseen).await;
    assert_eq!(sent, [90000], "approving unseen, explicitly, runs it");
}
