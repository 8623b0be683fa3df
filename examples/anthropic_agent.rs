//! A JSON key counter agent against the Anthropic Messages API, or any server that speaks it.
//!
//! ```sh
//! ANTHROPIC_API_KEY=sk-ant-... AGENT_ERRORS_MODEL=claude-sonnet-4-5 \
//!     cargo run -p agent-errors-examples --bin anthropic_agent --features anthropic
//! # the answer as it is written:
//! ... --bin anthropic_agent --features anthropic -- --stream
//! ```
//!
//! `ANTHROPIC_BASE_URL` points it at another server (a gateway, a local compatible server;
//! without `/v1`). The provider retries what a retry can fix (dropped connections, 5xx, 529
//! overloads and 429s for this foreground agent, a context overflow by shrinking `max_tokens`)
//! before an error reaches the agent; `on_llm_error` below handles what it leaves, including a
//! stream that broke after output began, and tool failures become `is_error` tool results the
//! model reads on its next turn.

use std::time::Duration;

use agent_errors::anthropic::{AnthropicError, AnthropicModel};
use agent_errors::prelude::*;
use agent_errors::stream::StreamInterrupted;
use agent_errors::{RunOptions, run::RunDelta, stream::StreamEvent};

#[derive(Debug, thiserror::Error)]
enum CountError {
    #[error("the text is not JSON")]
    Syntax(#[source] serde_json::Error),
    #[error("the JSON is valid but not an object")]
    NotAnObject,
}

/// Count the top-level keys of a JSON object given as text.
#[tool]
async fn count_keys(json: String) -> Result<usize, CountError> {
    match serde_json::from_str::<serde_json::Value>(&json) {
        Ok(serde_json::Value::Object(map)) => Ok(map.len()),
        Ok(_) => Err(CountError::NotAnObject),
        Err(e) => Err(CountError::Syntax(e)),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
    let stream = std::env::args().any(|arg| arg == "--stream");

    let model = match AnthropicModel::from_env() {
        Ok(model) => model,
        Err(error) => {
            eprintln!("{error}");
            eprintln!("example: ANTHROPIC_API_KEY=sk-ant-... AGENT_ERRORS_MODEL=claude-sonnet-4-5");
            std::process::exit(2);
        }
    };
    println!("model  {} at {}", model.name(), model.url());

    let agent = Agent::builder("json-key-counter")
        .model(model)
        .system_prompt(
            "You answer questions about JSON documents. Count keys with the count_keys tool, \
             never by yourself. Reply with only the number.",
        )
        .tools(tools![count_keys])
        .max_turns(6)
        // Retries only where a retry cannot repeat an effect; shows the model what it can fix.
        .recommended()
        .on_llm_error(|error, _attempt| {
            // Transport faults were already retried inside the provider. What is left: a
            // timeout (the whole budget of one call, or a streamed call's wait for headers)
            // and a stream that broke after output began; allow one more call for either.
            let timed_out = matches!(
                error.downcast_ref::<AnthropicError>(),
                Some(AnthropicError::Timeout { .. } | AnthropicError::HeadersTimeout { .. })
            );
            if timed_out || error.downcast_ref::<StreamInterrupted>().is_some() {
                LlmErrorDecision::retry(2, Duration::from_secs(1))
            } else {
                Ok(LlmErrorDecision::Rethrow)
            }
        })
        .build()?;

    let document = r#"{"name": "agent-errors", "version": "0.1.0", "features": ["anthropic"], "license": "MIT OR Apache-2.0"}"#;
    let question = format!("How many top-level keys does this JSON object have?\n{document}");
    println!("user   {question}");

    let mut options = RunOptions::new();
    let printer = if stream {
        let (tx, mut rx) = tokio::sync::mpsc::channel(256);
        options = options.stream_to(tx);
        Some(tokio::spawn(async move {
            while let Some(delta) = rx.recv().await {
                print_delta(delta);
            }
        }))
    } else {
        None
    };

    let outcome = agent.run_with(question, options).await;
    if let Some(printer) = printer {
        printer.await?;
        println!();
    }
    for event in &outcome.report.events {
        println!("event  {event:?}");
    }
    println!(
        "calls  {} model calls over {} turns, {} tool calls, {} input / {} output tokens",
        outcome.report.model_calls,
        outcome.report.turns,
        outcome.report.tool_calls,
        outcome.report.usage.input_tokens,
        outcome.report.usage.output_tokens
    );
    println!("answer {}", outcome.result?);
    Ok(())
}

/// Prints the answer's text as it arrives, and a line for each tool call and restart.
fn print_delta(delta: RunDelta) {
    use std::io::Write;
    match delta {
        RunDelta::Model(StreamEvent::TextDelta(text)) => print!("{text}"),
        RunDelta::Model(StreamEvent::ToolCallStarted { name, .. }) => println!("\ntool   {name}"),
        RunDelta::Model(StreamEvent::Finish(reason)) => println!("\nfinish {reason:?}"),
        RunDelta::TurnRestarted { turn, .. } => println!("\n(turn {turn} restarted)"),
        _ => {}
    }
    let _ = std::io::stdout().flush();
}
