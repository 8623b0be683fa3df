//! A fixed number of executor calls with an in-memory service breaker, for counting
//! instructions under callgrind (`HOT_PATH_CALLS`, default 20,000): run it with 0 calls too and
//! subtract, to get the cost of one call.

use std::hint::black_box;
use std::sync::Arc;

use agent_errors::{Registry, RunContext, ToolCall, ToolDef, breaker::ServiceBreaker};

async fn forecast(_: serde_json::Value) -> Result<&'static str, std::io::Error> {
    Ok("sunny")
}

fn main() {
    let calls: u32 = std::env::var("HOT_PATH_CALLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(20_000);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a current-thread runtime");
    let registry = Registry::builder()
        .tool(ToolDef::new("forecast", "Tomorrow's weather.", forecast))
        .build()
        .expect("one tool");
    let call = ToolCall::new("call-1", "forecast", "{}");
    let ctx = RunContext::new().with_service_breaker(Arc::new(ServiceBreaker::default()));
    rt.block_on(async {
        for _ in 0..calls {
            black_box(registry.execute(&ctx, black_box(&call)).await);
        }
    });
}
