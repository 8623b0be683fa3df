//! A tool's token has expired (HTTP 401). Even with `retry(3)` on the tool it is called once:
//! an auth failure cannot succeed on retry. The run ends in code with a message telling the user
//! to check credentials, and the model never sees the failure.
//!
//! Runs offline on a `ScriptedModel`.
//!
//! ```text
//! cargo run -p agent-errors-examples --bin expired_token
//! ```

use std::sync::atomic::{AtomicU32, Ordering};

use agent_errors::ToolCall;
use agent_errors::prelude::*;
use agent_errors::testing::ScriptedModel;
use agent_errors::{ChatResponse, Message};

static INVOICE_CALLS: AtomicU32 = AtomicU32::new(0);

/// Lists a customer's unpaid invoices.
#[tool(on_error(execution = retry(3)))]
async fn list_invoices(customer: String) -> Result<Vec<String>, HttpError> {
    let call = INVOICE_CALLS.fetch_add(1, Ordering::SeqCst) + 1;
    println!("  tool   list_invoices({customer}) call #{call}: 401 token expired");
    Err(HttpError::new(401, "token expired"))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let model = ScriptedModel::named("scripted-assistant");
    let call = ToolCall::new(
        model.next_call_id(),
        "list_invoices",
        r#"{"customer": "acme"}"#,
    );
    let model = model
        .computed(move |_| {
            println!("  model  calls list_invoices for acme");
            Ok(ChatResponse::tool_calls(vec![call]))
        })
        .computed(|_| {
            println!("  model  (a second turn: this must not happen)");
            Ok(ChatResponse::text("unreachable"))
        });

    let agent = Agent::builder("billing")
        .model(model.clone())
        .tools(tools![list_invoices])
        .build()?;

    println!("user   Which invoices does acme owe?");
    let outcome = agent.run_with_report("Which invoices does acme owe?").await;

    let Err(error) = outcome.result else {
        return Err("the run should have ended on the expired token".into());
    };
    let stop = error.terminated().ok_or("expected a terminal stop")?;
    println!("run ended: tool `{}`, kind {}", stop.tool, stop.kind);
    println!("user sees: {error}");
    println!(
        "list_invoices was called {} time(s); the model was called {} time(s)",
        INVOICE_CALLS.load(Ordering::SeqCst),
        model.calls()
    );
    let model_saw_a_result = model
        .requests()
        .iter()
        .flat_map(|r| &r.messages)
        .any(|m| matches!(m, Message::Tool(_)));
    println!("the model saw a tool result: {model_saw_a_result}");
    println!("events:");
    for event in &outcome.report.events {
        println!("  {event:?}");
    }

    assert_eq!(INVOICE_CALLS.load(Ordering::SeqCst), 1);
    assert_eq!(model.calls(), 1);
    assert!(!model_saw_a_result);
    Ok(())
}
