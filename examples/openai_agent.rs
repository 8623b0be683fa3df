//! A JSON key counter agent against any OpenAI-compatible server: OpenAI, Ollama, vLLM,
//! llama.cpp.
//!
//! ```sh
//! OPENAI_BASE_URL=http://localhost:11434/v1 AGENT_ERRORS_MODEL=llama3.1 \
//!     cargo run -p agent-errors-examples --bin openai_agent --features openai
//! ```
//!
//! Add `-- --stream` to print the model's answers as they arrive (text as it is written, tool
//! calls as their arguments come in), then the final answer.
//!
//! `OPENAI_API_KEY` is needed only by servers that check it. The provider retries what a retry
//! can fix (dropped connections, 503s, rate limits, a context overflow) before an error reaches
//! the agent; `on_llm_error` below handles what it leaves, and tool failures become error results
//! the model reads on its next turn.

use std::io::Write as _;
use std::time::Duration;

use agent_errors::openai::{OpenAiError, OpenAiModel};
use agent_errors::prelude::*;
use agent_errors::{Agent, RunOptions, run::RunDelta, stream::StreamEvent};
use tokio::sync::mpsc;

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
    let stream = std::env::args().skip(1).any(|arg| arg == "--stream");
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();

    let model = match OpenAiModel::from_env() {
        Ok(model) => model,
        Err(error) => {
            eprintln!("{error}");
            eprintln!(
                "example: OPENAI_BASE_URL=http://localhost:11434/v1 AGENT_ERRORS_MODEL=llama3.1"
            );
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
            // Transport faults were already retried inside the provider; a timeout was not,
            // since it is the whole budget of one call. Allow one more call for it here.
            match error.downcast_ref::<OpenAiError>() {
                Some(OpenAiError::Timeout { .. }) => {
                    LlmErrorDecision::retry(2, Duration::from_secs(1))
                }
                _ => Ok(LlmErrorDecision::Rethrow),
            }
        })
        .build()?;

    let document = r#"{"name": "agent-errors", "version": "0.1.0", "features": ["openai"], "license": "MIT OR Apache-2.0"}"#;
    let question = format!("How many top-level keys does this JSON object have?\n{document}");
    println!("user   {question}");

    let outcome = if stream {
        let (sender, deltas) = mpsc::channel(64);
        let printer = tokio::spawn(print_deltas(deltas));
        let outcome = agent
            .run_with(question, RunOptions::new().stream_to(sender))
            .await;
        // The run dropped its sender when it ended, so the printer has seen every delta.
        printer.await?;
        outcome
    } else {
        agent.run_with_report(question).await
    };
    for event in &outcome.report.events {
        println!("event  {event:?}");
    }
    println!(
        "calls  {} model calls over {} turns, {} tool calls",
        outcome.report.model_calls, outcome.report.turns, outcome.report.tool_calls
    );
    println!("answer {}", outcome.result?);
    Ok(())
}

/// Prints each delta as it arrives: text as written, tool calls as their arguments stream in.
async fn print_deltas(mut deltas: mpsc::Receiver<RunDelta>) {
    let mut stdout = std::io::stdout();
    while let Some(delta) = deltas.recv().await {
        match delta {
            RunDelta::Model(StreamEvent::TextDelta(text)) => print!("{text}"),
            RunDelta::Model(StreamEvent::ToolCallStarted { name, .. }) => {
                print!("\ncall   {name} ")
            }
            RunDelta::Model(StreamEvent::ToolCallDelta { arguments, .. }) => print!("{arguments}"),
            RunDelta::Model(StreamEvent::Finish(reason)) => println!("\nfinish {reason:?}"),
            RunDelta::TurnRestarted {
                turn,
                failed_attempt,
            } => {
                println!("\nretry  turn {turn} starts over after attempt {failed_attempt} failed");
            }
            _ => {}
        }
        let _ = stdout.flush();
    }
}
