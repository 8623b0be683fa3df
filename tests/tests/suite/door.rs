//! One door into every tool body: whatever path reaches a tool (the model's arguments, a fixer's
//! rewrite, a fallback tool, a retry, a person's edit), the arguments about to run pass every
//! check in one place, a person's approval included, and an approval covers exactly the tool
//! and arguments approved.

use std::sync::{Arc, Mutex};

use agent_errors::approval::{Decision, PendingApproval};
use agent_errors::build::FixerDef;
use agent_errors::permission::Permission;
use agent_errors::policy::{Action, Policy, PolicyKey};
use agent_errors::testing::ScriptedModel;
use agent_errors::{Agent, Fix, FixRequest, HttpError, ToolCall, ToolDef};

use crate::support::tools::{TransferArgs, transfer};

type Ran = Arc<Mutex<Vec<u32>>>;
type Asked = Arc<Mutex<Vec<PendingApproval>>>;

/// An approver that gives `answers` in turn (the last one from then on) and remembers what it
/// was asked.
fn approver(
    answers: Vec<Decision>,
    asked: &Asked,
) -> impl Fn(&PendingApproval) -> Decision + Send + Sync + 'static {
    let asked = Arc::clone(asked);
    move |pending: &PendingApproval| {
        let mut asked = asked.lock().unwrap();
        asked.push(pending.clone());
        let nth = (asked.len() - 1).min(answers.len() - 1);
        answers[nth].clone()
    }
}

/// `quote`, which always fails, and falls back to `transfer` (whose arguments it takes).
fn failing_quote() -> ToolDef {
    ToolDef::new("quote", "Quotes a transfer.", |_: TransferArgs| async {
        Err::<String, _>(HttpError::new(400, "no quote today"))
    })
    .with_policy(Policy::new().on(PolicyKey::Execution, Action::fallback("transfer")))
}

/// `transfer`, which needs approval, and the fixer `repair` its invalid arguments go to, which
/// rewrites them to an amount of 90000.
fn repaired_to_90000(ran: &Ran) -> (ToolDef, FixerDef) {
    let fixer = FixerDef::from_fn("repair", |_: FixRequest| {
        Ok(Fix::args(r#"{"amount": 90000}"#))
    });
    let policy = Policy::new().on(PolicyKey::InvalidArgs, Action::fix("repair", 1).unwrap());
    (
        transfer(ran).requires_approval(true).with_policy(policy),
        fixer,
    )
}

fn asked_about(asked: &Asked) -> Vec<(String, String)> {
    let asked = asked.lock().unwrap();
    asked
        .iter()
        .map(|p| (p.tool.clone(), p.arguments.clone()))
        .collect()
}

#[tokio::test]
async fn a_fallback_to_a_tool_that_requires_approval_asks_first() {
    let ran = Ran::default();
    let asked = Asked::default();
    let model = ScriptedModel::new()
        .tool_call("quote", r#"{"amount": 5}"#)
        .text("done");
    let agent = Agent::builder("clerk")
        .model(model)
        .tool(failing_quote())
        .tool(transfer(&ran).requires_approval(true))
        .approver(approver(vec![Decision::Deny("no".into())], &asked))
        .build()
        .unwrap();

    agent.run("quote it").await.unwrap();
    assert!(
        ran.lock().unwrap().is_empty(),
        "the denied fallback never ran"
    );
    assert_eq!(
        asked_about(&asked),
        [("transfer".to_owned(), r#"{"amount": 5}"#.to_owned())]
    );
}

#[tokio::test]
async fn a_fallback_the_agents_rule_picks_asks_first() {
    let ran = Ran::default();
    let asked = Asked::default();
    let model = ScriptedModel::new()
        .tool_call("quote", r#"{"amount": 5}"#)
        .text("done");
    let agent = Agent::builder("clerk")
        .model(model)
        .tool(failing_quote())
        .tool(transfer(&ran))
        .require_approval(|call: &ToolCall| &*call.name == "transfer")
        .approver(approver(vec![Decision::Deny("no".into())], &asked))
        .build()
        .unwrap();

    agent.run("quote it").await.unwrap();
    assert!(
        ran.lock().unwrap().is_empty(),
        "the denied fallback never ran"
    );
    assert_eq!(asked_about(&asked).len(), 1);
}

#[tokio::test]
async fn a_fixers_rewrite_of_approved_arguments_asks_again() {
    let ran = Ran::default();
    let asked = Asked::default();
    let model = ScriptedModel::new()
        .tool_call("transfer", r#"{"amount": "900"}"#)
        .text("done");
    let (repaired, fixer) = repaired_to_90000(&ran);
    let agent = Agent::builder("clerk")
        .model(model)
        .tool(repaired)
        .fixer(fixer)
        .approver(approver(
            vec![Decision::Approve, Decision::Deny("not that much".into())],
            &asked,
        ))
        .build()
        .unwrap();

    agent.run("pay").await.unwrap();
    assert!(ran.lock().unwrap().is_empty(), "90000 was never approved");
    assert_eq!(
        asked_about(&asked),
        [
            ("transfer".to_owned(), r#"{"amount": "900"}"#.to_owned()),
            ("transfer".to_owned(), r#"{"amount": 90000}"#.to_owned()),
        ]
    );
}

#[tokio::test]
async fn arguments_refused_for_a_repeated_key_ask_a_person_once_repaired() {
    let ran = Ran::default();
    let asked = Asked::default();
    let model = ScriptedModel::new()
        .tool_call("transfer", r#"{"amount": 1, "amount": 90000}"#)
        .text("done");
    let (repaired, fixer) = repaired_to_90000(&ran);
    let agent = Agent::builder("clerk")
        .model(model)
        .tool(repaired)
        .fixer(fixer)
        .permission(|_: &ToolCall| Permission::Allow)
        .approver(approver(vec![Decision::Deny("no".into())], &asked))
        .build()
        .unwrap();

    agent.run("pay").await.unwrap();
    assert!(
        ran.lock().unwrap().is_empty(),
        "the repaired call was never approved"
    );
    assert_eq!(
        asked_about(&asked),
        [("transfer".to_owned(), r#"{"amount": 90000}"#.to_owned())]
    );
}

/// A key given twice in two spellings (`"amount"` and `"\u0061mount"`), at the top or nested,
/// is the same key given twice: the gate refuses it before a permission hook or the tool reads
/// it, even for a tool whose own argument type would take the last one.
#[tokio::test]
async fn a_key_repeated_in_another_escape_is_refused_at_any_depth() {
    for arguments in [
        r#"{"amount": 1, "\u0061mount": 90000}"#,
        r#"{"to": {"amount": 1, "am\u006funt": 90000}}"#,
    ] {
        let ran = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&ran);
        let tool = ToolDef::new("send", "Sends.", move |args: serde_json::Value| {
            let seen = Arc::clone(&seen);
            async move {
                seen.lock().unwrap().push(args);
                Ok::<_, std::io::Error>("sent".to_owned())
            }
        });
        let model = ScriptedModel::new()
            .tool_call("send", arguments)
            .text("done");
        let agent = Agent::builder("clerk")
            .model(model)
            .tool(tool)
            .permission(|_: &ToolCall| Permission::Allow)
            .build()
            .unwrap();
        agent.run("pay").await.unwrap();
        assert!(ran.lock().unwrap().is_empty(), "{arguments} ran");
    }
}
