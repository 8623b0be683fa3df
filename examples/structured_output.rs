//! Structured output that recovers, and a tool whose 200 answers can be failures.
//!
//! An agent extracts a typed order from a message. The quote service it calls first answers
//! `{"error": "rate limited, retry later"}` (a success that is really a failure): the tool's
//! ready output check turns it into a transient failure and the call is retried, so the model
//! only sees the real price. The model's first answer then puts a string where the schema wants
//! a number two levels down, and its second wraps the JSON in prose: each time it is shown the
//! problems, with their paths, and asked again; the third answer fits.
//!
//! Runs offline: the model is a `ScriptedModel` whose replies print what it was told.
//!
//! ```text
//! cargo run -p agent-errors-examples --bin structured_output
//! ```

use std::sync::atomic::{AtomicU32, Ordering};

use agent_errors::prelude::*;
use agent_errors::run::{Json, OutputPolicy};
use agent_errors::testing::{Reply, ScriptedModel};
use agent_errors::{AgentBuilder, ChatRequest, ChatResponse, Event, Message};

/// The order the agent returns.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct Order {
    customer: String,
    line: Line,
}

/// One line of an order.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct Line {
    sku: String,
    quantity: u32,
    unit_price_cents: u64,
}

static QUOTES: AtomicU32 = AtomicU32::new(0);

/// Today's price of an item, in cents. The service answers 200 with an error body when busy.
#[tool(output_check = error_member(transient), on_error(transient = [retry(3), escalate]))]
async fn price(sku: String) -> Result<String, std::io::Error> {
    let body = match QUOTES.fetch_add(1, Ordering::SeqCst) {
        0 => r#"{"error": "rate limited, retry later"}"#.to_owned(),
        _ => format!(r#"{{"sku": "{sku}", "cents": 1250}}"#),
    };
    println!("  tool   price({sku}) -> {body}");
    Ok(body)
}

/// The last user message of a request: what the model was just told.
fn told(request: &ChatRequest) -> String {
    let said = request.messages.iter().rev().find_map(|m| match m {
        Message::User { content } => Some(content.clone()),
        _ => None,
    });
    said.unwrap_or_default()
}

/// A model that answers as a hasty one would, and prints each correction it reads.
fn model() -> ScriptedModel {
    let answers = [
        r#"{"customer": "Ada", "line": {"sku": "A-7", "quantity": "three", "unit_price_cents": 1250}}"#,
        r#"Here is the order: {"customer": "Ada", "line": {"sku": "A-7", "quantity": 3, "unit_price_cents": 1250}}"#,
        r#"{"customer": "Ada", "line": {"sku": "A-7", "quantity": 3, "unit_price_cents": 1250}}"#,
    ];
    let model = ScriptedModel::named("scripted-extractor").tool_call("price", r#"{"sku": "A-7"}"#);
    for answer in answers {
        model.push(Reply::computed(move |request| {
            let said = told(request);
            if said.starts_with("Your answer") {
                println!("  run    told the model:\n{}", indent(&said));
            }
            println!("  model  answers {answer}");
            Ok(ChatResponse::text(answer))
        }));
    }
    model
}

fn indent(text: &str) -> String {
    let lines: Vec<String> = text.lines().map(|l| format!("           {l}")).collect();
    lines.join("\n")
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let agent = AgentBuilder::<Json<Order>>::new("orders")
        .model(model())
        .tools(tools![price])
        .output_policy(OutputPolicy::retry(2))
        .build()?;
    let outcome = agent
        .run_with_report("Ada wants three A-7 at today's price.")
        .await;
    let order = outcome.result?.0;
    let line = &order.line;
    println!(
        "\n  order  {} wants {} x {} at {} cents",
        order.customer, line.quantity, line.sku, line.unit_price_cents
    );
    for event in &outcome.report.events {
        match event {
            Event::ToolRetry {
                tool,
                attempt,
                kind,
                ..
            } => {
                println!("  event  tool_retry {tool} attempt {attempt} ({kind})")
            }
            Event::OutputReask { attempt, reason } => {
                println!("  event  output_reask attempt {attempt}: {reason}")
            }
            other => println!("  event  {}", other.name()),
        }
    }
    println!("  model calls: {}", outcome.report.model_calls);
    assert_eq!(order.line.quantity, 3);
    assert_eq!(outcome.report.count("output_reask"), 2);
    Ok(())
}
