//! A fixed amount of work for `valgrind --tool=callgrind` to count, so the cost of the recovery
//! layer can be measured in instructions, which do not move with the machine's load.
//!
//! `instructions <variant> <n>` does `n` calls of one variant; `scripts/callgrind.sh` runs it
//! for `n` and for 0 and divides the difference by `n`. Variants:
//!
//! - `direct_json`: parse the arguments, call the tool's fn, serialize its result (the floor);
//! - `handler`: the same through the `#[tool]`'s handler (one boxed future);
//! - `executor`: `Registry::execute` with a fresh-per-run `RunContext`, reused across calls;
//! - `agent_run`: a whole scripted agent run: one tool call, then a final answer.
//!
//! Not a criterion bench: run `bash scripts/callgrind.sh`.

use std::hint::black_box;

use agent_errors::prelude::*;
use agent_errors::{ChatRequest, ChatResponse, Message, Registry, RunContext, ToolCall};
use serde::{Deserialize, Serialize};

#[derive(Serialize)]
struct Forecast {
    city: String,
    highs: Vec<f64>,
}

fn compute(city: String, days: u32) -> Forecast {
    let highs = (0..days).map(|d| 18.0 + f64::from(d) * 0.5).collect();
    Forecast { city, highs }
}

/// Daily highs for a city.
#[tool]
async fn forecast(city: String, days: u32) -> Result<Forecast, std::io::Error> {
    Ok(compute(city, days))
}

#[derive(Deserialize)]
struct ForecastArgs {
    city: String,
    days: u32,
}

const ARGS: &str = r#"{"city":"Paris","days":5}"#;

async fn direct_json(raw: &str) -> Result<String, BoxError> {
    let args: ForecastArgs = serde_json::from_str(raw)?;
    let out = forecast(args.city, args.days).await?;
    Ok(serde_json::to_string(&out)?)
}

/// Turn 1 calls `forecast`; turn 2 answers with what it returned.
struct TwoTurns;

impl ChatModel for TwoTurns {
    fn chat<'a>(
        &'a self,
        request: &'a ChatRequest,
    ) -> agent_errors::BoxFuture<'a, Result<ChatResponse, BoxError>> {
        let reply = match request.messages.last() {
            Some(Message::Tool(result)) => ChatResponse::text(result.content.clone()),
            _ => ChatResponse::tool_calls(vec![ToolCall::new("call_1", "forecast", ARGS)]),
        };
        Box::pin(async move { Ok(reply) })
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let variant = args.next().unwrap_or_default();
    let n: u64 = args.next().and_then(|n| n.parse().ok()).unwrap_or(0);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a current-thread runtime");
    let registry = Registry::builder()
        .tools(tools![forecast])
        .build()
        .expect("one tool");
    let agent = Agent::builder("bench")
        .model(TwoTurns)
        .tools(tools![forecast])
        .build()
        .expect("a valid agent");
    let ctx = RunContext::new();
    let call = ToolCall::new("call-1", "forecast", ARGS);
    let tool = &registry.tools()[0];
    rt.block_on(async {
        for _ in 0..n {
            match variant.as_str() {
                "direct_json" => drop(black_box(direct_json(black_box(ARGS)).await)),
                "handler" => {
                    let running = tool.handler().call(black_box(ARGS));
                    drop(black_box(running.expect("valid arguments").await));
                }
                "executor" => drop(black_box(registry.execute(&ctx, black_box(&call)).await)),
                "agent_run" => drop(black_box(agent.run(black_box("go")).await)),
                other => panic!("unknown variant `{other}`"),
            }
        }
    });
}
