//! The per-run breaker's rule: a tool that keeps failing taken off the table while the run goes
//! on, and failures counted per (tool, kind of failure).

use agent_errors::policy::{OnTrip, RunBreakerRule};
use agent_errors::testing::{
    Fault, FaultyTool, ReportAssertions, ScriptedModel, echo_tool, transcript_violations,
};
use agent_errors::{Agent, ChatRequest, HttpError, Message, RunError, policy, tool, tools};

/// The names of the tools offered in `request`.
fn offered(request: &ChatRequest) -> Vec<&str> {
    request.tools.iter().map(|t| t.name.as_str()).collect()
}

/// How many tool results in `request` say their tool was removed.
fn removal_notices(request: &ChatRequest) -> usize {
    request
        .messages
        .iter()
        .filter(|m| matches!(m, Message::Tool(r) if r.content.contains("removed from your tools")))
        .count()
}

/// A model that calls `lookup` `times` times, each with other arguments; its next answer is
/// chained on.
fn lookups(times: u32) -> ScriptedModel {
    (1..=times).fold(ScriptedModel::new(), |model, n| {
        model.tool_call("lookup", format!(r#"{{"text": "{n}"}}"#))
    })
}

/// Fails the test unless `result` is the stop of a per-run breaker that tripped after
/// `failures` failures.
#[track_caller]
fn assert_tripped(result: &Result<String, RunError>, failures: u32) {
    assert!(
        matches!(result, Err(RunError::BreakerTripped { failures: f, .. }) if *f == failures),
        "{result:?}"
    );
}

fn always_missing(name: &str) -> FaultyTool {
    FaultyTool::new(echo_tool(name)).then_always(Fault::error(|| HttpError::new(404, "no such id")))
}

#[tokio::test(start_paused = true)]
async fn a_tool_that_trips_a_remove_tool_breaker_leaves_the_table_and_the_run_finishes() {
    let lookup = always_missing("lookup");
    let search = echo_tool("search");
    let model = lookups(3)
        .tool_call("search", r#"{"text": "the order"}"#)
        .text("found it by searching");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tool(lookup.tool())
        .tool(search)
        .on_tool_error("lookup", policy!(run_breaker = remove_tool))
        .build()
        .unwrap();

    let outcome = agent.run_with_report("go").await;

    assert_eq!(outcome.result.unwrap(), "found it by searching");
    assert_eq!(lookup.calls(), 3);
    let requests = model.requests();
    assert_eq!(requests.len(), 5);
    for request in &requests[..3] {
        assert_eq!(offered(request), ["lookup", "search"]);
    }
    assert_eq!(
        offered(&requests[3]),
        ["search"],
        "gone from the next request"
    );
    assert_eq!(offered(&requests[4]), ["search"]);
    assert_eq!(removal_notices(&requests[2]), 0);
    assert_eq!(removal_notices(&requests[3]), 1, "the model is told why");
    assert_eq!(removal_notices(&requests[4]), 1, "and told once");
    outcome.report.assert_count("breaker_tripped", 1);
    outcome.report.assert_count("degraded", 1);
    assert_eq!(transcript_violations(&outcome.transcript), []);
}

#[tokio::test(start_paused = true)]
async fn without_the_rule_the_same_failures_end_the_run() {
    let lookup = always_missing("lookup");
    let model = lookups(3).text("never asked");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tool(lookup.tool())
        .tool(echo_tool("search"))
        .build()
        .unwrap();

    let outcome = agent.run_with_report("go").await;

    assert_tripped(&outcome.result, 3);
    assert_eq!(model.calls(), 3);
}

#[tokio::test(start_paused = true)]
async fn with_nothing_left_to_call_the_model_answers_and_the_run_ends() {
    let lookup = always_missing("lookup");
    let model = lookups(2).text("I could not look it up");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tool(lookup.tool())
        .breaker_threshold(2)
        .on_any_tool_error(policy!(run_breaker = remove_tool))
        .build()
        .unwrap();

    let outcome = agent.run_with_report("go").await;

    assert_eq!(outcome.result.unwrap(), "I could not look it up");
    let last = model.last_request().unwrap();
    assert!(offered(&last).is_empty(), "{:?}", offered(&last));
}

#[tokio::test(start_paused = true)]
async fn a_removed_tool_the_model_keeps_calling_trips_again_and_ends_the_run() {
    let lookup = always_missing("lookup");
    let model = lookups(4).text("never asked");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tool(lookup.tool())
        .tool(echo_tool("search"))
        .breaker_threshold(2)
        .on_tool_error("lookup", policy!(run_breaker = remove_tool))
        .build()
        .unwrap();

    let outcome = agent.run_with_report("go").await;

    assert!(
        matches!(&outcome.result, Err(RunError::BreakerTripped { tool, failures: 2 }) if tool == "lookup"),
        "{:?}",
        outcome.result
    );
    assert_eq!(lookup.calls(), 2, "a removed tool is refused, never called");
    assert_eq!(model.calls(), 4);
}

/// A tool that alternates a timeout and a validation error: `failures` in all.
fn alternating(failures: u32) -> FaultyTool {
    let mut tool = FaultyTool::new(echo_tool("lookup"));
    for n in 0..failures {
        tool = if n % 2 == 0 {
            tool.fail_times(1, || HttpError::new(504, "gateway timeout"))
        } else {
            tool.fail_times(1, || HttpError::new(422, "bad field"))
        };
    }
    tool
}

#[tokio::test(start_paused = true)]
async fn counted_per_kind_failures_of_another_kind_do_not_add_up() {
    let lookup = alternating(4);
    let agent = Agent::builder("a")
        .model(lookups(4).text("done"))
        .tool(lookup.tool())
        .on_tool_error(
            "lookup",
            policy!(execution = escalate, run_breaker = stop_run(per_kind)),
        )
        .build()
        .unwrap();

    let outcome = agent.run_with_report("go").await;

    assert_eq!(
        outcome.result.unwrap(),
        "done",
        "2 timeouts and 2 bad fields"
    );
    assert_eq!(lookup.calls(), 4);
    outcome.report.assert_count("breaker_tripped", 0);
}

#[tokio::test(start_paused = true)]
async fn counted_per_tool_the_same_failures_trip_it_at_the_threshold() {
    let lookup = alternating(4);
    let agent = Agent::builder("a")
        .model(lookups(4).text("never asked"))
        .tool(lookup.tool())
        .on_tool_error("lookup", policy!(execution = escalate))
        .build()
        .unwrap();

    let outcome = agent.run_with_report("go").await;

    assert_tripped(&outcome.result, 3);
    assert_eq!(lookup.calls(), 3);
}

#[tokio::test(start_paused = true)]
async fn counted_per_kind_two_failures_of_one_kind_in_a_row_trip_it() {
    let lookup = FaultyTool::new(echo_tool("lookup"))
        .fail_times(1, || HttpError::new(504, "gateway timeout"))
        .fail_times(2, || HttpError::new(422, "bad field"));
    let agent = Agent::builder("a")
        .model(lookups(4).text("never asked"))
        .tool(lookup.tool())
        .breaker_threshold(2)
        .on_tool_error(
            "lookup",
            policy!(execution = escalate, run_breaker = stop_run(per_kind)),
        )
        .build()
        .unwrap();

    let outcome = agent.run_with_report("go").await;

    assert_tripped(&outcome.result, 2);
    assert_eq!(lookup.calls(), 3);
}

/// Looks an order up; its service is gone for good.
#[tool(on_error(not_found = escalate, run_breaker = remove_tool(per_kind)))]
async fn lookup_order(id: String) -> Result<String, HttpError> {
    Err(HttpError::new(404, format!("no order {id}")))
}

#[tokio::test(start_paused = true)]
async fn the_rule_written_on_the_tool_takes_it_off_the_table() {
    let model = ScriptedModel::new()
        .tool_call("lookup_order", r#"{"id": "1"}"#)
        .tool_call("lookup_order", r#"{"id": "2"}"#)
        .tool_call("lookup_order", r#"{"id": "3"}"#)
        .text("no orders today");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tools(tools![lookup_order])
        .tool(echo_tool("search"))
        .build()
        .unwrap();

    let outcome = agent.run_with_report("go").await;

    assert_eq!(outcome.result.unwrap(), "no orders today");
    assert_eq!(offered(&model.last_request().unwrap()), ["search"]);
    let tool = &tools![lookup_order][0];
    assert_eq!(
        tool.policy().run_breaker_rule(),
        Some(RunBreakerRule::new(OnTrip::RemoveTool).per_kind())
    );
}
