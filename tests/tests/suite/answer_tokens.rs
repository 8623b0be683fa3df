//! A person's answer as a value that travels: it may expire (a call reached after that does not
//! run, the model is told it expired, and the outcome lists it) and it may be signed with a key
//! of the user's (an agent given the key takes no answer it cannot verify).

use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use agent_errors::approval::{
    Answer, AnswerError, AnswerKey, ApprovalContext, Approver, Decision, MAX_ANSWER_BYTES,
    PendingApproval, WaitReason,
};
use agent_errors::call::BoxFuture;
use agent_errors::testing::{Reply, ScriptedModel};
use agent_errors::{ChatResponse, Event, Message, RunOptions, ToolCall};

use crate::answers::{Bank, answers, waiting_on};

fn key() -> AnswerKey {
    AnswerKey::new(b"the user's own secret, 32 bytes+").unwrap()
}

/// What the model was told for each call, in order.
fn told(transcript: &[Message]) -> Vec<String> {
    let results = transcript.iter().filter_map(|message| match message {
        Message::Tool(result) => Some(result.content.clone()),
        _ => None,
    });
    results.collect()
}

fn expired_events(events: &[Event]) -> usize {
    let expired = events.iter().filter(|e| e.name() == "answer_expired");
    expired.count()
}

#[tokio::test]
async fn an_expired_answer_is_told_to_the_model_as_expired_and_the_outcome_lists_it() {
    let bank = Bank::new();
    let pending = bank.waiting().await;
    let stale = Answer::to(&pending, Decision::Approve)
        .expires_at(SystemTime::now() - Duration::from_secs(1));
    // Told it expired, the model asks again: that call waits for a person.
    let model = ScriptedModel::new().tool_call("transfer", r#"{"amount": 1}"#);
    let options = RunOptions::new().answered(stale);
    let outcome = bank.agent(&model).resume("rent", options).await;

    assert!(bank.sent.lock().unwrap().is_empty(), "the tool never ran");
    let told = told(&outcome.transcript);
    assert!(told[0].contains("expired"), "{told:?}");
    assert!(
        !told[0].contains("denied"),
        "not told it was denied: {told:?}"
    );
    assert_eq!(expired_events(&outcome.report.events), 1);
    let expired = outcome.expired_approvals();
    assert_eq!(expired.len(), 1);
    assert_eq!(
        (&*expired[0].call_id, &*expired[0].tool, &*expired[0].digest),
        ("call_1", "transfer", &*pending.digest)
    );
    assert_eq!(outcome.pending_approvals().len(), 1, "the new call waits");
    assert_eq!(outcome.pending_approvals()[0].digest, pending.digest);
    assert_eq!(waiting_on(outcome.result).len(), 1);
}

/// An approver that relays answers a client sent as text, one per question asked, each after
/// `delay` of Tokio's clock (the time a person takes).
struct Relayed {
    texts: Mutex<Vec<String>>,
    delay: Duration,
}

impl Relayed {
    fn new(texts: Vec<String>) -> Self {
        let delay = Duration::ZERO;
        let texts = Mutex::new(texts);
        Relayed { texts, delay }
    }
}

impl Approver for Relayed {
    fn decide<'a>(
        &'a self,
        pending: &'a PendingApproval,
        run: ApprovalContext<'a>,
    ) -> BoxFuture<'a, Decision> {
        Box::pin(async move {
            loop {
                tokio::time::sleep(self.delay).await;
                let Some(text) = self.texts.lock().unwrap().pop() else {
                    return Decision::Later;
                };
                let Ok(answer) = Answer::from_token(&text) else {
                    continue;
                };
                if let Some(decision) = run.accept(pending, &answer) {
                    return decision;
                }
            }
        })
    }
}

/// A run whose approver relays, two minutes after asking, an answer to `transfer {"amount": 1}`
/// made valid for `valid_for`: the amounts sent, and how many approvals the outcome lists as
/// expired.
async fn answered_after_two_minutes(valid_for: Duration) -> (Vec<u32>, usize) {
    let bank = Bank::new();
    let model = ScriptedModel::new()
        .tool_call("transfer", r#"{"amount": 1}"#)
        .text("done");
    let pending = PendingApproval::new(
        "call_1",
        "transfer",
        r#"{"amount": 1}"#,
        WaitReason::ApprovalRequired,
    )
    .in_run("pay");
    let answer = Answer::to(&pending, Decision::Approve).expires_at(SystemTime::now() + valid_for);
    let approver = Relayed {
        delay: Duration::from_secs(120),
        ..Relayed::new(vec![answer.to_token()])
    };
    let agent = bank.builder(&model).approver(approver).build().unwrap();
    let outcome = agent.run_with("pay", RunOptions::new().run_id("pay")).await;
    outcome.result.as_ref().unwrap();
    let sent = bank.sent.lock().unwrap().clone();
    (sent, outcome.expired_approvals().len())
}

#[tokio::test(start_paused = true)]
async fn an_answer_expires_by_the_run_s_clock_while_the_run_waits_for_it() {
    assert_eq!(
        answered_after_two_minutes(Duration::from_secs(60)).await,
        (vec![], 1),
        "expired a minute before it arrived"
    );
    assert_eq!(
        answered_after_two_minutes(Duration::from_secs(600)).await,
        (vec![1], 0),
        "still good when it arrived"
    );
}

#[tokio::test]
async fn an_agent_with_an_answer_key_refuses_an_unsigned_answer_and_asks_again() {
    let bank = Bank::new();
    let pending = bank.waiting().await;
    let model = ScriptedModel::new().text("done");
    let agent = bank.builder(&model).answer_key(key()).build().unwrap();
    let options = RunOptions::new().answer_to(&pending, Decision::Approve);
    let outcome = agent.resume("rent", options).await;

    assert_eq!(answers(&outcome.report.events), ["refused", "later"]);
    assert_eq!(waiting_on(outcome.result), [pending]);
    assert!(bank.sent.lock().unwrap().is_empty());
}

/// Resumes "rent" on an agent with the key, given `token` as the client sent it back: the
/// answers the events report and the amounts sent.
async fn resumed_with_token(bank: &Bank, token: &str) -> (Vec<&'static str>, Vec<u32>) {
    let model = ScriptedModel::new().text("done");
    let agent = bank.builder(&model).answer_key(key()).build().unwrap();
    let answer = Answer::from_token(token).unwrap();
    let outcome = agent
        .resume("rent", RunOptions::new().answered(answer))
        .await;
    let sent = bank.sent.lock().unwrap().clone();
    (answers(&outcome.report.events), sent)
}

/// The JSON a token holds, as a client that decodes it reads it (and the form earlier versions
/// sent, which `from_token` still reads).
fn json_of(token: &str) -> String {
    serde_json::to_string(&Answer::from_token(token).unwrap()).unwrap()
}

#[tokio::test]
async fn a_signed_answer_runs_its_call_once() {
    let bank = Bank::new();
    let pending = bank.waiting().await;
    let token = Answer::to(&pending, Decision::Approve)
        .expires_at(SystemTime::now() + Duration::from_secs(600))
        .signed(&key())
        .to_token();
    assert_eq!(
        resumed_with_token(&bank, &token).await,
        (vec!["approved"], vec![1])
    );
}

#[tokio::test]
async fn a_signed_answer_copied_to_another_run_waiting_on_the_same_call_is_refused() {
    let bank = Bank::new();
    let pending = bank.waiting().await;
    // A second run, "rent-2", waits on the very same call: `transfer {"amount": 1}` as `call_1`.
    let model = ScriptedModel::new().tool_call("transfer", r#"{"amount": 1}"#);
    let second = bank.agent(&model);
    let options = RunOptions::new().run_id("rent-2");
    let waiting = waiting_on(second.run_with("pay the rent", options).await.result);
    assert_eq!(waiting[0].arguments, pending.arguments);
    // The client holds the person's signed approval of "rent" and sends it to "rent-2".
    let token = Answer::to(&pending, Decision::Approve)
        .signed(&key())
        .to_token();
    let agent = bank
        .builder(&ScriptedModel::new().text("done"))
        .answer_key(key())
        .build()
        .unwrap();
    let answer = Answer::from_token(&token).unwrap();
    let outcome = agent
        .resume("rent-2", RunOptions::new().answered(answer))
        .await;

    assert_eq!(answers(&outcome.report.events), ["refused", "later"]);
    assert!(bank.sent.lock().unwrap().is_empty(), "nothing was sent");
}

#[tokio::test]
async fn an_answer_changed_after_it_was_signed_is_refused() {
    let bank = Bank::new();
    let pending = bank.waiting().await;
    let signed = Answer::to(&pending, Decision::Deny("no".into()))
        .expires_at(SystemTime::now() + Duration::from_secs(600))
        .signed(&key())
        .to_token();
    // A client turns the denial into an edit to 90000 (in the JSON the token holds).
    let forged = json_of(&signed).replace(
        r#"{"Deny":"no"}"#,
        r#"{"ApproveWith":"{\"amount\": 90000}"}"#,
    );
    assert_ne!(forged, signed);
    assert_eq!(
        resumed_with_token(&bank, &forged).await,
        (vec!["refused", "later"], vec![])
    );
    // A client makes a stale answer last longer.
    let stale = Answer::to(&pending, Decision::Approve)
        .expires_at(SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000))
        .signed(&key())
        .to_token();
    let extended = json_of(&stale).replace("1000000000000", "9000000000000");
    assert_ne!(extended, stale);
    assert_eq!(
        resumed_with_token(&bank, &extended).await,
        (vec!["refused", "later"], vec![])
    );
    // Signed with another key.
    let other = AnswerKey::new([3u8; 32]).unwrap();
    let token = Answer::to(&pending, Decision::Approve)
        .signed(&other)
        .to_token();
    assert_eq!(
        resumed_with_token(&bank, &token).await,
        (vec!["refused", "later"], vec![])
    );
}

#[tokio::test]
async fn a_signed_answer_that_expired_is_told_as_expired_not_refused() {
    let bank = Bank::new();
    let pending = bank.waiting().await;
    let token = Answer::to(&pending, Decision::Approve)
        .expires_at(SystemTime::now() - Duration::from_secs(1))
        .signed(&key())
        .to_token();
    let (asked, sent) = resumed_with_token(&bank, &token).await;
    assert!(asked.is_empty(), "{asked:?}");
    assert!(sent.is_empty());
}

#[test]
fn an_answer_s_text_is_read_within_bounds() {
    let long = format!(
        r#"{{"call_id": "call_1", "digest": "{}", "decision": "Approve"}}"#,
        "x".repeat(MAX_ANSWER_BYTES)
    );
    assert!(matches!(
        Answer::from_token(&long),
        Err(AnswerError::TooLong { .. })
    ));
    let nested = format!(r#"{{"a": {}{}}}"#, "[".repeat(100_000), "]".repeat(100_000));
    assert!(matches!(
        Answer::from_token(&nested),
        Err(AnswerError::Malformed(_))
    ));
    let extra = r#"{"call_id": "c", "digest": "d", "decision": "Approve", "admin": true}"#;
    assert!(
        Answer::from_token(extra).is_err(),
        "no field it does not know"
    );
    assert!(matches!(
        AnswerKey::new([0u8; 31]),
        Err(AnswerError::ShortKey { bytes: 31 })
    ));
}

#[tokio::test]
async fn an_approver_relaying_answers_takes_only_those_bound_and_signed() {
    let bank = Bank::new();
    let pending = PendingApproval::new(
        "call_1",
        "transfer",
        r#"{"amount": 1}"#,
        WaitReason::ApprovalRequired,
    )
    .in_run("pay");
    let other = PendingApproval::new(
        "call_1",
        "transfer",
        r#"{"amount": 90000}"#,
        WaitReason::ApprovalRequired,
    )
    .in_run("pay");
    // Popped last first: unsigned, then for another question, then the one to take.
    let texts = vec![
        Answer::to(&pending, Decision::Approve)
            .signed(&key())
            .to_token(),
        Answer::to(&other, Decision::Approve)
            .signed(&key())
            .to_token(),
        Answer::to(&pending, Decision::Approve).to_token(),
    ];
    let model = ScriptedModel::new()
        .tool_call("transfer", r#"{"amount": 1}"#)
        .text("done");
    let agent = bank
        .builder(&model)
        .answer_key(key())
        .approver(Relayed::new(texts))
        .build()
        .unwrap();
    let outcome = agent.run_with("pay", RunOptions::new().run_id("pay")).await;
    assert_eq!(outcome.result.unwrap(), "done");
    assert_eq!(*bank.sent.lock().unwrap(), [1]);
    let refused = answers(&outcome.report.events);
    assert_eq!(refused, ["refused", "refused", "approved"]);
}

/// A turn calling `transfer {"amount": 1}` under the id `call_1`, as a provider that numbers
/// calls per turn sends it.
fn transfer_as_call_1() -> Reply {
    let call = ToolCall::new("call_1", "transfer", r#"{"amount": 1}"#);
    Reply::response(ChatResponse::tool_calls(vec![call]))
}

#[tokio::test]
async fn a_relayed_answer_is_taken_once_and_a_copy_for_a_later_identical_call_is_refused() {
    let bank = Bank::new();
    let pending = PendingApproval::new(
        "call_1",
        "transfer",
        r#"{"amount": 1}"#,
        WaitReason::ApprovalRequired,
    )
    .in_run("pay-twice");
    let token = Answer::to(&pending, Decision::Approve)
        .signed(&key())
        .to_token();
    // The person approved one transfer; the same token is delivered again for the second.
    let model = ScriptedModel::new()
        .reply(transfer_as_call_1())
        .reply(transfer_as_call_1())
        .text("done");
    let agent = bank
        .builder(&model)
        .answer_key(key())
        .approver(Relayed::new(vec![token.clone(), token]))
        .build()
        .unwrap();
    let outcome = agent
        .run_with("pay twice", RunOptions::new().run_id("pay-twice"))
        .await;

    assert_eq!(
        *bank.sent.lock().unwrap(),
        [1],
        "one approval, one transfer"
    );
    assert_eq!(
        answers(&outcome.report.events),
        ["approved", "refused", "later"]
    );
    assert_eq!(outcome.pending_approvals().len(), 1, "the second waits");
}

/// One person's answer is used once in the process, whichever run takes it: two runs without a
/// store that reuse a caller's run id ask the same question under the same digest, and a
/// relaying approver hands both the same signed answer; only the first runs the transfer.
#[tokio::test]
async fn one_answer_relayed_to_two_runs_that_reuse_a_run_id_runs_once() {
    use agent_errors::Agent;

    let pending = PendingApproval::new(
        "call_1",
        "transfer",
        r#"{"amount": 5}"#,
        WaitReason::ApprovalRequired,
    )
    .in_run("reused-run-id");
    let token = Answer::to(&pending, Decision::Approve)
        .signed(&key())
        .to_token();
    let sent = std::sync::Arc::new(Mutex::new(Vec::new()));
    let mut answered = Vec::new();
    for _ in 0..2 {
        let model = ScriptedModel::new()
            .reply(Reply::response(ChatResponse::tool_calls(vec![
                ToolCall::new("call_1", "transfer", r#"{"amount": 5}"#),
            ])))
            .text("done");
        let agent = Agent::builder("clerk")
            .model(model)
            .tool(crate::support::tools::transfer(&sent).requires_approval(true))
            .answer_key(key())
            .approver(Relayed::new(vec![token.clone()]))
            .build()
            .unwrap();
        let options = RunOptions::new().run_id("reused-run-id");
        let outcome = agent.run_with("pay", options).await;
        answered.push(answers(&outcome.report.events));
    }
    assert_eq!(*sent.lock().unwrap(), [5], "one answer, one transfer");
    assert_eq!(answered[0], ["approved"]);
    assert_eq!(answered[1], ["refused", "later"]);
}

#[test]
fn a_token_is_opaque_url_safe_text_and_the_json_form_is_still_read() {
    let pending = PendingApproval::new(
        "call_1",
        "transfer",
        r#"{"to": "Acme & Sons", "amount": 9000}"#,
        WaitReason::ApprovalRequired,
    );
    let answer = Answer::to(&pending, Decision::ApproveWith(r#"{"amount": 10}"#.into()))
        .expires_at(SystemTime::now() + Duration::from_secs(60))
        .signed(&key());
    let token = answer.to_token();
    let url_safe = |c: u8| c.is_ascii_alphanumeric() || c == b'-' || c == b'_';
    assert!(token.bytes().all(url_safe), "{token}");
    assert!(
        !token.contains("Approve"),
        "it says nothing to the eye: {token}"
    );
    assert_eq!(Answer::from_token(&token).unwrap(), answer);
    assert_eq!(Answer::from_token(&format!(" {token}\n")).unwrap(), answer);
    assert_eq!(Answer::from_token(&json_of(&token)).unwrap(), answer);
    assert!(key().verifies(&Answer::from_token(&token).unwrap()));
    // One character changed in the token: it reads as another answer, whose signature fails,
    // or as no answer at all.
    let mut flipped = token.clone().into_bytes();
    flipped[10] = if flipped[10] == b'A' { b'B' } else { b'A' };
    let flipped = String::from_utf8(flipped).unwrap();
    match Answer::from_token(&flipped) {
        Ok(changed) => assert!(!key().verifies(&changed)),
        Err(error) => assert!(matches!(error, AnswerError::Malformed(_)), "{error}"),
    }
    assert!(matches!(
        Answer::from_token(&format!("{token}%3D")),
        Err(AnswerError::NotAToken { .. })
    ));
}

#[tokio::test]
async fn a_run_started_under_an_answer_key_is_not_resumed_by_an_agent_without_one() {
    use agent_errors::RunError;
    use agent_errors::run::ResumeError;
    let bank = Bank::new();
    let model = ScriptedModel::new().tool_call("transfer", r#"{"amount": 1}"#);
    let keyed = bank.builder(&model).answer_key(key()).build().unwrap();
    let outcome = keyed
        .run_with("pay the rent", RunOptions::new().run_id("rent"))
        .await;
    let pending = waiting_on(outcome.result).remove(0);

    // A second code path builds the agent without the key and hands it an unsigned answer.
    let forgetful = bank.agent(&ScriptedModel::new().text("paid"));
    let unsigned = Answer::to(&pending, Decision::Approve);
    let outcome = forgetful
        .resume("rent", RunOptions::new().answered(unsigned))
        .await;
    match outcome.result {
        Err(RunError::Resume(ResumeError::AnswerKeyRequired { run_id })) => {
            assert_eq!(run_id, "rent");
        }
        other => panic!("expected the resume to be refused: {other:?}"),
    }
    assert!(bank.sent.lock().unwrap().is_empty(), "nothing was sent");
    // Still waiting, and the keyed agent goes on with a signed answer.
    let signed = Answer::to(&pending, Decision::Approve).signed(&key());
    let outcome = bank
        .builder(&ScriptedModel::new().text("paid"))
        .answer_key(key())
        .build()
        .unwrap()
        .resume("rent", RunOptions::new().answered(signed))
        .await;
    assert_eq!(outcome.result.unwrap(), "paid");
    assert_eq!(*bank.sent.lock().unwrap(), [1]);
}

#[tokio::test]
async fn a_run_id_used_twice_is_refused_as_existing_not_as_a_sequence_conflict() {
    use agent_errors::RunError;
    let bank = Bank::new();
    let pending = bank.waiting().await;
    let model = ScriptedModel::new().tool_call("transfer", r#"{"amount": 1}"#);
    let outcome = bank
        .agent(&model)
        .run_with("pay the rent", RunOptions::new().run_id("rent"))
        .await;
    let error = outcome.result.unwrap_err();
    assert!(
        matches!(&error, RunError::RunExists { run_id } if run_id == "rent"),
        "{error:?}"
    );
    assert!(error.to_string().contains("resume it"), "{error}");
    assert_eq!(error.http_status(), 409);
    // The saved run is untouched: its question reads back as it was asked.
    let agent = bank.agent(&ScriptedModel::new());
    assert_eq!(agent.pending_approvals("rent").await.unwrap(), [pending]);
}
