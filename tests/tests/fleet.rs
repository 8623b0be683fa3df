//! Breakers keyed by the upstream a tool names, and retry budgets: everything that makes many
//! runs (or many processes) fail together gracefully, without a shared store.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use agent_errors::{
    BreakerState, CallOutcome, HttpError, Registry, RunContext, ServiceBreaker, ToolCall, ToolDef,
};

/// A tool that always fails with a 503, counting its calls.
fn down_tool(name: &'static str, calls: &Arc<AtomicU32>) -> ToolDef {
    let calls = Arc::clone(calls);
    ToolDef::new(
        name,
        "Calls an upstream that is down.",
        move |_: serde_json::Value| {
            let calls = Arc::clone(&calls);
            async move {
                calls.fetch_add(1, Ordering::SeqCst);
                Err::<String, _>(HttpError::new(503, "upstream unavailable"))
            }
        },
    )
}

fn call(name: &str) -> ToolCall {
    ToolCall::new("call-1", name, "{}")
}

fn is_circuit_open(outcome: &CallOutcome) -> bool {
    outcome
        .stop()
        .is_some_and(|t| t.reason == agent_errors::TerminationReason::CircuitOpen)
}

#[tokio::test(start_paused = true)]
async fn tools_that_name_one_upstream_share_its_breaker() {
    let calls = Arc::new(AtomicU32::new(0));
    let registry = Registry::builder()
        .tool(down_tool("forecast", &calls).with_breaker_key("weather-api"))
        .tool(down_tool("alerts", &calls).with_breaker_key("weather-api"))
        .tool(down_tool("geocode", &calls))
        .build()
        .expect("three tools, no policy problems");
    let breaker = Arc::new(ServiceBreaker::new(
        NonZeroU32::new(2).expect("2 is not zero"),
        Duration::from_secs(30),
    ));
    let run = || RunContext::new().with_service_breaker(Arc::clone(&breaker));

    registry.execute(&run(), &call("forecast")).await;
    registry.execute(&run(), &call("alerts")).await;
    assert_eq!(breaker.state("weather-api"), BreakerState::Open);
    assert_eq!(breaker.state("forecast"), BreakerState::Closed);

    // Both tools of the failing upstream stop calling it; a tool of another upstream goes on.
    assert!(is_circuit_open(
        &registry.execute(&run(), &call("forecast")).await
    ));
    assert!(is_circuit_open(
        &registry.execute(&run(), &call("alerts")).await
    ));
    registry.execute(&run(), &call("geocode")).await;
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

#[test]
fn a_tool_without_a_breaker_key_answers_to_its_own_name() {
    let calls = Arc::new(AtomicU32::new(0));
    assert_eq!(down_tool("geocode", &calls).breaker_key(), "geocode");
}
