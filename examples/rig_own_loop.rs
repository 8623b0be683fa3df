//! A rig agent that stays on rig's own loop, with usage limits and a fallback model: `RigGuard`
//! guards its tool and caps each run at two tool calls (then asks the model, without tools, for
//! its best answer), and `RecoveringModel` answers from a backup model while the primary is
//! overloaded, each retry spending the run's retry allowance. Then the same agent, built once,
//! serves a second prompt.
//!
//! Runs offline on rig's scripted model (`MockCompletionModel`), and instantly: tokio's clock is
//! paused, so the backoff sleeps advance virtual time instead of waiting.
//!
//! ```text
//! cargo run -p agent-errors-examples --features rig --bin rig_own_loop
//! ```

use std::sync::Arc;

use agent_errors::retry::RetrySchedule;
use agent_errors::rig::RigGuard;
use agent_errors::run::{OnExceed, UsageLimit, UsageLimits};
use agent_errors::{Registry, RunContext, ToolDef};
use rig_core::test_utils::{MockCompletionModel, MockTurn};
use rig_core::tool::{Tool, ToolContext, ToolExecutionError};

/// A rig tool, written for rig and left as it is.
struct Search;

impl Tool for Search {
    const NAME: &'static str = "search";
    type Args = serde_json::Value;
    type Output = String;
    type Error = ToolExecutionError;

    fn description(&self) -> String {
        "Searches the docs.".into()
    }

    fn parameters(&self) -> serde_json::Value {
        serde_json::json!({"type": "object", "properties": {"query": {"type": "string"}}})
    }

    async fn call(
        &self,
        _: &mut ToolContext,
        args: serde_json::Value,
    ) -> Result<String, ToolExecutionError> {
        println!("  tool   search({})", args["query"]);
        Ok(format!("a page about {}", args["query"]))
    }
}

/// The primary provider, overloaded for every request of this example.
fn primary() -> MockCompletionModel {
    MockCompletionModel::from_turns((0..10).map(|n| {
        MockTurn::provider_response_error(
            http::StatusCode::from_u16(529).expect("a status"),
            r#"{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}"#,
            format!("req-{n}"),
        )
    }))
}

fn search(id: &str, query: &str) -> MockTurn {
    MockTurn::tool_call(id, "search", serde_json::json!({ "query": query }))
}

/// The backup provider: three searches (the third past the cap), the final answer, then the
/// second prompt's answer.
fn backup() -> MockCompletionModel {
    MockCompletionModel::from_turns([
        search("call-1", "retries"),
        search("call-2", "fallbacks"),
        search("call-3", "breakers"),
        MockTurn::text("Retries and fallbacks keep a run going (from two searches)."),
        MockTurn::text("Hello again."),
    ])
}

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let registry = Arc::new(
        Registry::builder()
            .tool(ToolDef::from_rig(Search))
            .build()?,
    );
    let run = Arc::new(RunContext::new());
    let limits = UsageLimits::new()
        .max_tool_calls(2)
        .on_exceed(UsageLimit::ToolCalls, OnExceed::FinalAnswer);
    let guard = RigGuard::new(registry, Arc::clone(&run)).with_usage_limits(limits)?;
    let model = guard
        .recovering(primary(), RetrySchedule::attempts(2)?)
        .fallback(backup());
    let agent = guard.agent(model).default_max_turns(8).build();

    println!("rig's own loop, capped at two tool calls, the primary model overloaded:");
    let answer = agent.prompt("How does a run recover?").await?;
    println!("  answer {}", answer.output());

    println!("the same agent, a second prompt:");
    let answer = agent.prompt("Hi!").await?;
    println!("  answer {}", answer.output());

    println!("the run's events:");
    let events = run.events().snapshot();
    for name in ["llm_retry", "llm_fallback", "usage_limit_reached"] {
        let count = events.iter().filter(|event| event.name() == name).count();
        println!("  {name:<20} {count}");
    }
    Ok(())
}
