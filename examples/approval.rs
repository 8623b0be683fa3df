//! A person in the loop, without holding a process.
//!
//! A clerk agent sends money with a `transfer` tool that requires approval. Small transfers are
//! approved in code; a large one waits for a person: the run ends with
//! `RunError::WaitingForPerson`, its checkpoint saved to a SQLite file, and no process waits
//! for the answer. Later (here, a moment later; in production, when the person clicks) a new
//! agent on a new store handle resumes the run with the person's answer, who lowers the amount.
//! Runs offline, on a scripted model.
//!
//! ```sh
//! cargo run -p agent-errors-examples --bin approval
//! ```

use agent_errors::approval::{Decision, PendingApproval};
use agent_errors::checkpoint::SqliteCheckpoints;
use agent_errors::prelude::*;
use agent_errors::testing::ScriptedModel;
use agent_errors::{RunOptions, ToolDef};

/// Sends money from the company account.
#[tool(approval = required)]
async fn transfer(to: String, amount: u32) -> String {
    println!("  (the bank sends {amount} to {to})");
    format!("sent {amount} to {to}")
}

/// Approves transfers up to 100 at once; anything larger waits for a person.
fn small_ones_only(pending: &PendingApproval) -> Decision {
    let arguments: serde_json::Value = serde_json::from_str(&pending.arguments).unwrap_or_default();
    match arguments["amount"].as_u64() {
        Some(amount) if amount <= 100 => Decision::Approve,
        _ => Decision::Later,
    }
}

fn clerk(model: ScriptedModel, store: SqliteCheckpoints, tools: Vec<ToolDef>) -> Agent {
    Agent::builder("clerk")
        .model(model)
        .tools(tools)
        .approver(small_ones_only)
        .checkpoints(store)
        .build()
        .expect("a valid agent")
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("agent-errors-approval-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("runs.db");

    println!("1. A small transfer is approved in code and runs at once.");
    let model = ScriptedModel::new()
        .tool_call("transfer", r#"{"to": "the cafe", "amount": 40}"#)
        .text("Paid the cafe.");
    let agent = clerk(model, SqliteCheckpoints::open(&path)?, tools![transfer]);
    println!("   -> {}", agent.run("Pay the cafe's invoice.").await?);

    println!("2. A large one waits for a person; the run ends and nothing is held.");
    let model = ScriptedModel::new().tool_call("transfer", r#"{"to": "Acme", "amount": 9000}"#);
    let agent = clerk(model, SqliteCheckpoints::open(&path)?, tools![transfer]);
    let outcome = agent
        .run_with("Pay Acme's invoice.", RunOptions::new().run_id("invoice-7"))
        .await;
    let Err(RunError::WaitingForPerson { pending }) = outcome.result else {
        return Err(format!("expected the run to wait, got {:?}", outcome.result).into());
    };
    for call in &pending {
        println!(
            "   waiting: {call} with {} ({:?})",
            call.arguments, call.reason
        );
    }

    println!("3. A person answers: pay 4500 now. A new agent resumes the run with the answer.");
    // The answer names the question (its digest: the tool, the whole arguments, why it asked),
    // so it cannot run another call that reuses the id.
    let question = pending[0].clone();
    let edited = Decision::ApproveWith(r#"{"to": "Acme", "amount": 4500}"#.into());
    let model = ScriptedModel::new().text("Paid Acme 4500; the rest waits for next month.");
    let agent = clerk(model, SqliteCheckpoints::open(&path)?, tools![transfer]);
    let answered = RunOptions::new().answer_to(&question, edited);
    let outcome = agent.resume("invoice-7", answered).await;
    println!("   -> {}", outcome.result?);

    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
