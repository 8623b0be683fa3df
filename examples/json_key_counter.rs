//! A tool fails on malformed JSON; a fixer escalates with the corrected JSON; the model reads it
//! and calls again; the answer is 3.
//!
//! Runs offline: the model is a `ScriptedModel` whose replies are computed from what it is sent,
//! the way a real model would read the conversation.
//!
//! ```text
//! cargo run -p agent-errors-examples --bin json_key_counter
//! ```

use agent_errors::ToolCall;
use agent_errors::prelude::*;
use agent_errors::testing::ScriptedModel;
use agent_errors::{ChatRequest, ChatResponse, Message};

#[derive(Debug, thiserror::Error)]
#[error("no quoted keys found: is this really JSON? ({0})")]
struct NotJson(#[from] serde_json::Error);

/// Counts the top-level keys of a JSON object.
#[tool(on_error(execution = fix(agent = "json_fixer")))]
async fn count_keys(json: String) -> Result<usize, NotJson> {
    let parsed = serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&json);
    match parsed {
        Ok(object) => {
            println!("  tool   count_keys({json}) = {}", object.len());
            Ok(object.len())
        }
        Err(e) => {
            println!("  tool   count_keys({json}) failed: {e}");
            Err(NotJson(e))
        }
    }
}

/// Quotes bare keys and bare string values, then escalates with the corrected JSON so the model
/// can make the call itself.
#[fixer]
fn json_fixer(req: FixRequest) -> Result<Fix, FixerError> {
    let json = req
        .args
        .as_ref()
        .and_then(|args| args["json"].as_str())
        .ok_or_else(|| FixerError::throw("the arguments have no `json` text to repair"))?;
    let corrected = quote_bare_words(json);
    println!("  fixer  json_fixer: escalating with corrected JSON {corrected}");
    Err(FixerError::escalate(
        format!("unquoted keys; corrected: {corrected}"),
        Severity::Medium,
    ))
}

fn quote_bare_words(text: &str) -> String {
    let inner = text.trim().trim_start_matches('{').trim_end_matches('}');
    let pairs: Vec<String> = inner
        .split(',')
        .filter_map(|pair| pair.split_once(':'))
        .map(|(key, value)| {
            let key = key.trim().trim_matches('"');
            let value = value.trim();
            let is_literal = value.parse::<f64>().is_ok()
                || matches!(value, "true" | "false" | "null")
                || value.starts_with('"');
            if is_literal {
                format!("\"{key}\":{value}")
            } else {
                format!("\"{key}\":\"{value}\"")
            }
        })
        .collect();
    format!("{{{}}}", pairs.join(","))
}

/// The newest tool result the model was sent.
fn last_tool_result(request: &ChatRequest) -> Option<&agent_errors::ToolResult> {
    request.messages.iter().rev().find_map(|m| match m {
        Message::Tool(result) => Some(result),
        _ => None,
    })
}

fn scripted_model() -> ScriptedModel {
    let model = ScriptedModel::named("scripted-analyst");
    let first = ToolCall::new(
        model.next_call_id(),
        "count_keys",
        serde_json::json!({ "json": "{name: world, age: 30, active: true}" }).to_string(),
    );
    let second_id = model.next_call_id();
    model
        .computed(move |_| {
            println!("  model  calls count_keys with {}", first.arguments);
            Ok(ChatResponse::tool_calls(vec![first]))
        })
        .computed(move |request| {
            // Read the corrected JSON out of the error result, as a model would.
            let error = last_tool_result(request).ok_or("no tool result to read")?;
            let surfaced: serde_json::Value = serde_json::from_str(&error.content)?;
            let message = surfaced["message"].as_str().ok_or("no message")?;
            let corrected = message
                .split_once("corrected: ")
                .map(|(_, json)| json)
                .ok_or("no corrected JSON in the error")?;
            println!("  model  read the error ({message}); calls again");
            let args = serde_json::json!({ "json": corrected }).to_string();
            Ok(ChatResponse::tool_calls(vec![ToolCall::new(
                second_id,
                "count_keys",
                args,
            )]))
        })
        .computed(|request| {
            let result = last_tool_result(request).ok_or("no tool result to read")?;
            println!("  model  answers with the tool's result");
            Ok(ChatResponse::text(result.content.clone()))
        })
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let agent = Agent::builder("json-analyst")
        .model(scripted_model())
        .system_prompt("Use count_keys. If it returns an error with corrected JSON, call it again with that JSON. Reply with only the number.")
        .tools(tools![count_keys])
        .fixers(fixers![json_fixer])
        .recommended()
        .build()?;

    println!("user   How many keys? {{name: world, age: 30, active: true}}");
    let outcome = agent
        .run_with_report("How many keys? {name: world, age: 30, active: true}")
        .await;
    let answer = outcome.result?;
    println!("answer {answer}");
    println!("events:");
    for event in &outcome.report.events {
        println!("  {event:?}");
    }
    assert_eq!(answer, "3");
    Ok(())
}
