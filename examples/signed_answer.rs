//! A person's answer that travels through a client nobody trusts: signed, and good for a while.
//!
//! A clerk agent's `transfer` waits for a person; the run ends, its checkpoint in a SQLite
//! file. The approval side (a web app holding the agent's key) turns the person's click into a
//! signed token that expires in fifteen minutes and hands it to the person's browser. What comes
//! back is resumed with: a token the browser altered (the approval turned into 90000) is
//! refused and the call waits again; the genuine one runs it once. Another run shows an answer
//! that came too late: the call does not run, the model is told the approval expired, and the
//! outcome lists it. Runs offline, on a scripted model.
//!
//! ```sh
//! cargo run -p agent-errors-examples --bin signed_answer
//! ```

use std::time::{Duration, SystemTime};

use agent_errors::approval::{Answer, AnswerKey, Decision, PendingApproval};
use agent_errors::checkpoint::SqliteCheckpoints;
use agent_errors::prelude::*;
use agent_errors::testing::ScriptedModel;
use agent_errors::{Event, RunOptions};

/// Sends money from the company account.
#[tool(approval = required)]
async fn transfer(to: String, amount: u32) -> String {
    println!("  (the bank sends {amount} to {to})");
    format!("sent {amount} to {to}")
}

/// A new agent on the store at `path`, as another process would build it, taking only answers
/// signed with `key`.
fn clerk(model: ScriptedModel, path: &std::path::Path, key: &AnswerKey) -> Agent {
    Agent::builder("clerk")
        .model(model)
        .tools(tools![transfer])
        .checkpoints(SqliteCheckpoints::open(path).expect("the store opens"))
        .answer_key(key.clone())
        .build()
        .expect("a valid agent")
}

/// Starts the run `run_id`, which waits on a transfer of 9000 to Acme; the question.
async fn waiting(path: &std::path::Path, key: &AnswerKey, run_id: &str) -> PendingApproval {
    let model = ScriptedModel::new().tool_call("transfer", r#"{"to": "Acme", "amount": 9000}"#);
    let outcome = clerk(model, path, key)
        .run_with("Pay Acme's invoice.", RunOptions::new().run_id(run_id))
        .await;
    let pending = outcome.pending_approvals()[0].clone();
    println!("   waiting: {pending} with {}", pending.arguments);
    pending
}

/// The approval side: the person's decision, signed, good until `until`.
fn token(
    pending: &PendingApproval,
    decision: Decision,
    until: SystemTime,
    key: &AnswerKey,
) -> String {
    Answer::to(pending, decision)
        .expires_at(until)
        .signed(key)
        .to_token()
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("agent-errors-signed-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("runs.db");
    // In production: 32 random bytes from your secret store, shared by the service and the app.
    let key = AnswerKey::new(b"an example key of thirty-two bytes, not a secret")?;

    println!("1. A large transfer waits for a person; the run ends and nothing is held.");
    let pending = waiting(&path, &key, "invoice-8").await;

    println!("2. The person approves; the app hands the browser a signed token for 15 minutes.");
    let in_15_minutes = SystemTime::now() + Duration::from_secs(15 * 60);
    let genuine = token(&pending, Decision::Approve, in_15_minutes, &key);
    println!("   token: {genuine}");

    println!("3. The browser sends back an altered token: refused, and the call waits again.");
    let altered = serde_json::to_string(&Answer::from_token(&genuine)?)?.replace(
        r#""Approve""#,
        r#"{"ApproveWith":"{\"to\": \"Mallory\", \"amount\": 90000}"}"#,
    );
    let outcome = clerk(ScriptedModel::new(), &path, &key)
        .resume(
            "invoice-8",
            RunOptions::new().answered(Answer::from_token(&altered)?),
        )
        .await;
    let answers = outcome
        .report
        .events
        .iter()
        .filter_map(|event| match event {
            Event::PersonAsked { answer, .. } => Some(*answer),
            _ => None,
        });
    println!("   answers: {:?}", answers.collect::<Vec<_>>());
    println!("   still waiting on: {}", outcome.pending_approvals()[0]);

    println!("4. The genuine token: the transfer runs once.");
    let model = ScriptedModel::new().text("Paid Acme 9000.");
    let outcome = clerk(model, &path, &key)
        .resume(
            "invoice-8",
            RunOptions::new().answered(Answer::from_token(&genuine)?),
        )
        .await;
    println!("   -> {}", outcome.result?);

    println!("5. Another run, answered too late: the call does not run and the model is told.");
    let pending = waiting(&path, &key, "invoice-9").await;
    let a_minute_ago = SystemTime::now() - Duration::from_secs(60);
    let stale = token(&pending, Decision::Approve, a_minute_ago, &key);
    let model =
        ScriptedModel::new().text("Your approval expired before I could pay; approve it again?");
    let outcome = clerk(model, &path, &key)
        .resume(
            "invoice-9",
            RunOptions::new().answered(Answer::from_token(&stale)?),
        )
        .await;
    for expired in outcome.expired_approvals() {
        println!("   expired: `{}` ({})", expired.tool, expired.call_id);
    }
    println!("   -> {}", outcome.result?);

    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
