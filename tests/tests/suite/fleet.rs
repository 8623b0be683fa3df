//! Breakers keyed by the upstream a tool names, and retry budgets: everything that makes many
//! runs (or many processes) fail together gracefully, without a shared store.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use agent_errors::{
    HttpError, Registry, RunContext, ToolCall, ToolDef,
    breaker::{BreakerState, ServiceBreaker},
    call::CallOutcome,
    policy::{Action, Policy, PolicyKey},
    retry::RetryBudget,
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
        .is_some_and(|t| t.reason == agent_errors::run::TerminationReason::CircuitOpen)
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
    let breaker = Arc::new(ServiceBreaker::new(2, Duration::from_secs(30)).unwrap());
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

fn retry_then(n: u32, then: Action) -> Policy {
    let retry = Action::retry(n).expect("n > 0");
    Policy::new().on(PolicyKey::Execution, [retry, then])
}

fn count_events(ctx: &RunContext, name: &str) -> usize {
    ctx.events()
        .snapshot()
        .iter()
        .filter(|e| e.name() == name)
        .count()
}

#[tokio::test(start_paused = true)]
async fn a_retry_the_budget_refuses_is_not_made_and_the_ladder_goes_on() {
    let (calls, cached_calls) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
    let cached = ToolDef::new("cached", "Yesterday's answer.", {
        let cached_calls = Arc::clone(&cached_calls);
        move |_: serde_json::Value| {
            cached_calls.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, HttpError>("stale but fine") }
        }
    });
    let registry = Registry::builder()
        .tool(down_tool("fetch", &calls).with_policy(retry_then(3, Action::fallback("cached"))))
        .tool(cached)
        .build()
        .expect("a tool and its fallback");
    // A floor of one retry per window, and no share of calls: one retry in all.
    let budget = RetryBudget::new(0.0, Duration::from_secs(10))
        .expect("in range")
        .with_min_retries(1);
    let budget = Arc::new(budget);
    let run = || RunContext::new().with_retry_budget(Arc::clone(&budget));

    let first = run();
    let outcome = registry.execute(&first, &call("fetch")).await;
    assert_eq!(
        outcome.result().map(|r| r.content.as_str()),
        Some("stale but fine")
    );
    // The first call and the one retry the budget paid for; the third attempt was refused.
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(count_events(&first, "retry_budget_exhausted"), 1);
    assert_eq!(count_events(&first, "fell_back"), 1);

    // Another run sharing the budget gets no retry at all.
    let second = run();
    registry.execute(&second, &call("fetch")).await;
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    assert_eq!(count_events(&second, "retry_budget_exhausted"), 1);
    assert_eq!(cached_calls.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn a_refused_retry_keeps_the_real_failure_for_the_default_fate() {
    let calls = Arc::new(AtomicU32::new(0));
    let retry = Action::retry(3).expect("3 > 0");
    let tool =
        down_tool("fetch", &calls).with_policy(Policy::new().on(PolicyKey::Execution, [retry]));
    let registry = Registry::builder().tool(tool).build().expect("one tool");
    let budget = RetryBudget::new(0.0, Duration::from_secs(10))
        .expect("in range")
        .with_min_retries(0);
    let ctx = RunContext::new().with_retry_budget(Arc::new(budget));

    let outcome = registry.execute(&ctx, &call("fetch")).await;
    let stop = outcome
        .stop()
        .expect("a transient failure that could not be retried ends the run");
    assert_eq!(
        stop.reason,
        agent_errors::run::TerminationReason::RetriesExhausted { attempts: 1 }
    );
    let cause = stop.unredacted_error().map(|e| e.cause().to_string());
    assert_eq!(cause.as_deref(), Some("HTTP 503: upstream unavailable"));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn runs_sharing_a_budget_retry_at_most_its_share_of_their_calls() {
    let calls = Arc::new(AtomicU32::new(0));
    let retry = Action::retry(3).expect("3 > 0");
    let tool =
        down_tool("fetch", &calls).with_policy(Policy::new().on(PolicyKey::Execution, [retry]));
    let registry = Registry::builder().tool(tool).build().expect("one tool");
    let budget = Arc::new(RetryBudget::new(0.2, Duration::from_secs(60)).expect("in range"));

    for _ in 0..50 {
        let ctx = RunContext::new().with_retry_budget(Arc::clone(&budget));
        registry.execute(&ctx, &call("fetch")).await;
    }
    // Without the budget: 150 calls. With it: 50 calls and 20% of them (10) retried.
    assert_eq!(calls.load(Ordering::SeqCst), 60);
}
