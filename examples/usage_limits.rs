//! A model that never stops searching, capped three ways: at most three calls of `search`
//! (the run ends with a typed error carrying what it used), the same cap with a graceful stop
//! (one last request without tools, and its answer is the run's), and the default cap on tool
//! calls in one turn, which stops a model that asks for 10,000 at once before any runs.
//!
//! Runs offline on a `ScriptedModel`.
//!
//! ```text
//! cargo run -p agent-errors-examples --bin usage_limits
//! ```

use agent_errors::llm::Usage;
use agent_errors::prelude::*;
use agent_errors::run::{ModelPrice, OnExceed, UsageLimit, UsageLimits};
use agent_errors::testing::ScriptedModel;
use agent_errors::{ChatResponse, ToolCall};

/// Searches the web.
#[tool]
async fn search(query: String) -> Result<String, std::convert::Infallible> {
    Ok(format!("three results for {query:?}, none conclusive"))
}

/// A model that answers every request that offers tools with another search (reporting 1,200
/// input and 80 output tokens), and a request without tools with its best answer.
fn relentless() -> ScriptedModel {
    let model = ScriptedModel::named("scripted-researcher");
    let ids = model.clone();
    for _ in 0..10 {
        let ids = ids.clone();
        model.push(agent_errors::testing::Reply::computed(move |request| {
            if request.tools.is_empty() {
                println!("  model  asked without tools: answers with what it has");
                return Ok(ChatResponse::text(
                    "Probably 42, from three inconclusive searches.",
                ));
            }
            println!("  model  calls search");
            let call = ToolCall::new(ids.next_call_id(), "search", r#"{"query":"answer"}"#);
            let mut response = ChatResponse::tool_calls(vec![call]);
            response.usage = Some(Usage::new(1_200, 80));
            Ok(response)
        }));
    }
    model
}

fn capped() -> UsageLimits {
    UsageLimits::new()
        .max_calls_of("search", 3)
        .price(
            "scripted-researcher",
            ModelPrice::per_million_tokens(2.5, 10.0),
        )
        .max_cost(1.0)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("1. at most three searches; going past ends the run");
    let agent = Agent::builder("researcher")
        .model(relentless())
        .tools(tools![search])
        .usage_limits(capped())
        .build()?;
    let outcome = agent.run_with_report("What is the answer?").await;
    let error = outcome.result.expect_err("the cap ends the run");
    let exceeded = error.usage_limit().expect("a usage limit");
    println!("  run    {error}");
    println!(
        "  used   {} requests, {} tokens, {} tool calls, cost {:.4}",
        exceeded.usage.requests,
        exceeded.usage.tokens.total(),
        exceeded.usage.tool_calls,
        exceeded.usage.cost
    );
    assert_eq!(exceeded.usage.calls_of.get("search"), Some(&3));

    println!("\n2. the same cap with a graceful stop");
    let agent = Agent::builder("researcher")
        .model(relentless())
        .tools(tools![search])
        .usage_limits(capped().on_exceed(
            UsageLimit::ToolCallsOf {
                tool: "search".to_owned(),
            },
            OnExceed::FinalAnswer,
        ))
        .build()?;
    let answer = agent.run("What is the answer?").await?;
    println!("  run    answered: {answer}");

    println!("\n3. a model asking for 10,000 calls in one turn");
    let model = ScriptedModel::new();
    let calls = (0..10_000).map(|_| ("search", r#"{"query":"again"}"#));
    let agent = Agent::builder("flooded")
        .model(model.tool_calls(calls))
        .tools(tools![search])
        .build()?;
    let outcome = agent.run_with_report("What is the answer?").await;
    let error = outcome.result.expect_err("the default per-turn cap");
    println!("  run    {error}");
    println!(
        "  transcript: {} messages, every call answered as not run",
        outcome.transcript.len()
    );
    Ok(())
}
