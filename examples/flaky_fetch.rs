//! A fetch tool answers 503 twice, then succeeds. With `retry(3)` the retries happen inside the
//! tool call: the model only ever sees the page. The run's events show what recovery did.
//!
//! Runs offline on a `ScriptedModel`, and instantly: the runtime starts with tokio's clock
//! paused, so the backoff sleeps (about 500 ms, then 1 s, plus jitter) advance virtual time
//! instead of waiting.
//!
//! ```text
//! cargo run -p agent-errors-examples --bin flaky_fetch
//! ```

use std::sync::atomic::{AtomicU32, Ordering};

use agent_errors::ToolCall;
use agent_errors::prelude::*;
use agent_errors::testing::ScriptedModel;
use agent_errors::{ChatResponse, Message};
use tokio::time::Instant;

static FETCH_CALLS: AtomicU32 = AtomicU32::new(0);

/// Fetches a web page.
#[tool(on_error(execution = retry(3)))]
async fn fetch(url: String) -> Result<String, HttpError> {
    let call = FETCH_CALLS.fetch_add(1, Ordering::SeqCst) + 1;
    if call <= 2 {
        println!("  tool   fetch({url}) call #{call}: 503 service unavailable");
        return Err(HttpError::new(503, "service unavailable"));
    }
    println!("  tool   fetch({url}) call #{call}: 200");
    Ok("<h1>Release notes</h1><p>Version 2.1 fixes the login bug.</p>".to_owned())
}

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let model = ScriptedModel::named("scripted-reader");
    let call = ToolCall::new(
        model.next_call_id(),
        "fetch",
        r#"{"url": "https://example.invalid/notes"}"#,
    );
    let model = model
        .computed(move |_| {
            println!("  model  calls fetch");
            Ok(ChatResponse::tool_calls(vec![call]))
        })
        .computed(|request| {
            let results: Vec<_> = request
                .messages
                .iter()
                .filter_map(|m| match m {
                    Message::Tool(r) => Some(r),
                    _ => None,
                })
                .collect();
            for r in &results {
                println!(
                    "  model  sees result (is_error: {}): {}",
                    r.is_error, r.content
                );
            }
            Ok(ChatResponse::text("Version 2.1 fixes the login bug."))
        });

    let agent = Agent::builder("reader")
        .model(model)
        .tools(tools![fetch])
        .build()?;

    println!("user   What changed in the latest release?");
    let started = Instant::now();
    let outcome = agent
        .run_with_report("What changed in the latest release?")
        .await;
    let answer = outcome.result?;
    println!("answer {answer}");
    println!(
        "fetch calls: {}; virtual time spent backing off: {:?}",
        FETCH_CALLS.load(Ordering::SeqCst),
        started.elapsed()
    );
    println!("events:");
    for event in &outcome.report.events {
        println!("  {event:?}");
    }
    println!(
        "report: {} turns, {} model calls, {} tool calls",
        outcome.report.turns, outcome.report.model_calls, outcome.report.tool_calls
    );

    assert_eq!(FETCH_CALLS.load(Ordering::SeqCst), 3);
    assert_eq!(outcome.report.count("tool_retry"), 2);
    Ok(())
}
