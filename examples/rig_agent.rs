//! A rig agent, kept on rig's own loop, with our recovery underneath: its weather tool fails
//! twice with a network error and our `retry(3)` policy retries it inside the call; its provider
//! answers 503 once and the recovering model calls again, where rig alone would end the run.
//! Then the same rig tool and rig provider in our own agent loop.
//!
//! Runs offline on rig's scripted model (`MockCompletionModel`), and instantly: tokio's clock is
//! paused, so the backoff sleeps advance virtual time instead of waiting.
//!
//! ```text
//! cargo run -p agent-errors-examples --features rig --bin rig_agent
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use agent_errors::policy::{Action, Policy, PolicyKey};
use agent_errors::prelude::*;
use agent_errors::retry::RetrySchedule;
use agent_errors::rig::{GuardedTool, RecoveringModel, RigModel};
use agent_errors::{Registry, RunContext};
use rig_core::test_utils::{MockCompletionModel, MockTurn};
use rig_core::tool::{Tool, ToolContext, ToolExecutionError};

/// A rig tool, written for rig and left as it is: it cannot reach its upstream twice.
#[derive(Default)]
struct Weather {
    calls: AtomicU32,
}

#[derive(serde::Deserialize)]
struct WeatherArgs {
    city: String,
}

impl Tool for Weather {
    const NAME: &'static str = "weather";
    type Args = WeatherArgs;
    type Output = String;
    type Error = ToolExecutionError;

    fn description(&self) -> String {
        "Today's weather in a city.".into()
    }

    fn parameters(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"]
        })
    }

    async fn call(
        &self,
        _: &mut ToolContext,
        args: WeatherArgs,
    ) -> Result<String, ToolExecutionError> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        if call % 3 != 0 {
            println!(
                "  tool   weather({}) call #{call}: network error",
                args.city
            );
            return Err(ToolExecutionError::network(
                "connection reset by the weather service",
            ));
        }
        println!("  tool   weather({}) call #{call}: sunny", args.city);
        Ok(format!("sunny in {}", args.city))
    }
}

/// The provider's script: a tool call, then a 503, then the answer.
fn provider() -> MockCompletionModel {
    MockCompletionModel::from_turns([
        MockTurn::tool_call("call-1", "weather", serde_json::json!({"city": "Lyon"})),
        MockTurn::provider_response_error(
            http::StatusCode::SERVICE_UNAVAILABLE,
            r#"{"error": {"type": "api_error", "message": "try again"}}"#,
            "req-1",
        ),
        MockTurn::text("It is sunny in Lyon."),
    ])
}

fn weather() -> ToolDef {
    let retry = Action::retry(3).expect("3 is not zero");
    ToolDef::from_rig(Weather::default()).with_policy(Policy::new().on(PolicyKey::Execution, retry))
}

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("rig's own loop (rig_agent), our policies inside it:");
    let registry = Arc::new(Registry::builder().tool(weather()).build()?);
    let run = Arc::new(RunContext::new());
    let guarded = GuardedTool::<Weather>::new(registry, Arc::clone(&run))?;
    let model = RecoveringModel::new(provider(), RetrySchedule::attempts(3)?, Arc::clone(&run));
    let agent = rig_agent::AgentBuilder::new(model)
        .default_max_turns(3)
        .tool(guarded.clone())
        .add_hook(guarded.stop_hook())
        .build();
    let answer = agent.prompt("What's the weather in Lyon?").await?;
    println!("  answer {}", answer.output());
    for event in run.events().snapshot() {
        println!("  event  {}", event.name());
    }

    println!("\nthe same rig tool and provider in our loop:");
    let agent = Agent::builder("weather")
        .model(RigModel::new(provider()).with_model_id("mock-model"))
        .tool(weather())
        // The recommended preset: a failed model call that may pass is retried (three calls,
        // backoff from 500 ms), the tool's failures retried only where that cannot repeat an
        // effect.
        .recommended()
        .build()?;
    let outcome = agent.run_with_report("What's the weather in Lyon?").await;
    println!("  answer {}", outcome.result?);
    for event in &outcome.report.events {
        println!("  event  {}", event.name());
    }
    Ok(())
}
