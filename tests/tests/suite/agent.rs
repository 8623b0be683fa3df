//! The agent loop, driven as a user would: a scripted model, tools that
//! fail on purpose, and the run's report and transcript.

use std::sync::Arc;
use std::time::Duration;

use agent_errors::breaker::{BreakerState, ServiceBreaker};
use agent_errors::build::ConfigProblem;
use agent_errors::testing::{
    Fault, FaultyTool, ReportAssertions, ScriptedModel, echo_tool, transcript_violations,
};
use agent_errors::{Agent, AgentBuilder, RunError, RunOptions, run::Json};
use agent_errors::{
    Cancellation, ChatRequest, ErrorKind, HttpError, Message, ToolCall, ToolResult,
    policy::{Action, Policy, PolicyKey},
};
use agent_errors::{permission::Permission, run::TerminationReason};
use tokio::time::Instant;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// The tool results the model was shown in `request`, in order.
fn tool_results(request: &ChatRequest) -> Vec<&ToolResult> {
    request
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(r) => Some(r),
            _ => None,
        })
        .collect()
}

fn error_json(result: &ToolResult) -> serde_json::Value {
    assert!(result.is_error, "expected an error result: {result:?}");
    serde_json::from_str(&result.content).expect("error results are JSON")
}

fn offered(request: &ChatRequest) -> Vec<&str> {
    request.tools.iter().map(|t| &*t.name).collect()
}

#[tokio::test(start_paused = true)]
async fn a_tool_result_goes_back_to_the_model_and_its_answer_ends_the_run() {
    let model = ScriptedModel::new()
        .tool_call("echo", r#"{"text": "42"}"#)
        .text("the answer is 42");
    let agent = Agent::builder("a")
        .model(model.clone())
        .system_prompt("be brief")
        .tool(echo_tool("echo"))
        .build()
        .unwrap();

    let outcome = agent.run_with_report("what is it?").await;

    assert_eq!(outcome.result.unwrap(), "the answer is 42");
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].messages[0], Message::system("be brief"));
    assert_eq!(requests[0].messages[1], Message::user("what is it?"));
    assert_eq!(offered(&requests[0]), ["echo"]);
    let results = tool_results(&requests[1]);
    assert_eq!(results.len(), 1);
    assert_eq!(
        (&*results[0].call_id, results[0].content.as_str()),
        ("call_1", "42")
    );
    assert!(!results[0].is_error);
    outcome
        .report
        .assert_turns(2)
        .assert_model_calls(2)
        .assert_tool_calls(1)
        .assert_events(&[]);
    assert_eq!(transcript_violations(&outcome.transcript), []);
}

#[tokio::test(start_paused = true)]
async fn an_unknown_tool_gets_an_error_result_listing_the_available_ones() {
    let model = ScriptedModel::new()
        .tool_call("ecko", r#"{"text": "x"}"#)
        .text("sorry");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tools([echo_tool("echo"), echo_tool("say")])
        .build()
        .unwrap();

    assert_eq!(agent.run("hi").await.unwrap(), "sorry");

    let seen = model.last_request().unwrap();
    let error = error_json(tool_results(&seen)[0]);
    assert_eq!(error["kind"], "not_found");
    let suggestion = error["suggestion"].as_str().unwrap();
    assert!(suggestion.contains("echo, say"), "{suggestion}");
}

#[tokio::test(start_paused = true)]
async fn parallel_calls_run_concurrently_and_are_answered_in_call_order() {
    let slow = FaultyTool::new(echo_tool("slow")).then(Fault::Delay(secs(3)));
    let fast = FaultyTool::new(echo_tool("fast")).then(Fault::Delay(secs(1)));
    let model = ScriptedModel::new()
        .tool_calls([
            ("slow", r#"{"text": "s"}"#),
            ("fast", r#"{"text": "f"}"#),
            ("nope", r#"{}"#),
        ])
        .text("done");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tools([slow.tool(), fast.tool()])
        .build()
        .unwrap();

    let start = Instant::now();
    assert_eq!(agent.run("go").await.unwrap(), "done");

    assert_eq!(start.elapsed(), secs(3), "3 s and 1 s calls overlap");
    let seen = model.last_request().unwrap();
    let ids: Vec<_> = tool_results(&seen).iter().map(|r| &*r.call_id).collect();
    assert_eq!(ids, ["call_1", "call_2", "call_3"]);
    assert_eq!(tool_results(&seen)[0].content, "s");
    assert_eq!(tool_results(&seen)[1].content, "f");
}

#[tokio::test(start_paused = true)]
async fn cancelling_mid_call_answers_every_pending_call_and_ends_the_run() {
    let hanging = FaultyTool::new(echo_tool("hang")).hang_times(2);
    let model = ScriptedModel::new()
        .tool_calls([
            ("hang", r#"{"text": "1"}"#),
            ("echo", r#"{"text": "quick"}"#),
            ("hang", r#"{"text": "2"}"#),
        ])
        .text("never asked");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tools([hanging.tool(), echo_tool("echo")])
        .build()
        .unwrap();
    let cancel = Cancellation::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(secs(5)).await;
        trigger.cancel();
    });

    let start = Instant::now();
    let outcome = agent
        .run_with("go", RunOptions::new().cancellation(cancel))
        .await;

    assert!(matches!(outcome.result, Err(RunError::Cancelled)));
    assert_eq!(start.elapsed(), secs(5));
    assert_eq!(model.calls(), 1, "no model turn after cancellation");
    assert_eq!(transcript_violations(&outcome.transcript), []);
    let answers: Vec<_> = outcome
        .transcript
        .iter()
        .filter_map(|m| match m {
            Message::Tool(r) => Some((&*r.call_id, r.content.as_str(), r.is_error)),
            _ => None,
        })
        .collect();
    assert_eq!(
        answers,
        [
            ("call_1", "operation cancelled", true),
            ("call_2", "quick", false),
            ("call_3", "operation cancelled", true),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_run_cancelled_before_it_starts_never_calls_the_model() {
    let model = ScriptedModel::new().text("hi");
    let agent = Agent::builder("a").model(model.clone()).build().unwrap();
    let cancel = Cancellation::new();
    cancel.cancel();
    assert!(
        agent
            .run_cancellable("go", cancel)
            .await
            .unwrap_err()
            .is_cancelled()
    );
    assert_eq!(model.calls(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_denied_call_gets_an_error_result_and_the_tool_never_runs() {
    let guarded = FaultyTool::new(echo_tool("delete_all"));
    let model = ScriptedModel::new()
        .tool_calls([
            ("delete_all", r#"{"text": "now"}"#),
            ("echo", r#"{"text": "fine"}"#),
        ])
        .text("ok");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tools([guarded.tool(), echo_tool("echo")])
        .permission(|call: &ToolCall| {
            if &*call.name == "delete_all" {
                Permission::Deny("destructive tools need a human".into())
            } else {
                Permission::Allow
            }
        })
        .build()
        .unwrap();

    assert_eq!(agent.run("go").await.unwrap(), "ok");

    assert_eq!(guarded.calls(), 0);
    let seen = model.last_request().unwrap();
    let results = tool_results(&seen);
    let denied = error_json(results[0]);
    assert!(
        denied["message"]
            .as_str()
            .unwrap()
            .contains("destructive tools need a human")
    );
    assert_eq!(results[1].content, "fine");
}

#[tokio::test(start_paused = true)]
async fn an_auth_failure_ends_the_run_before_the_model_sees_it() {
    let token =
        FaultyTool::new(echo_tool("fetch")).fail_times(5, || HttpError::new(401, "expired"));
    let model = ScriptedModel::new()
        .tool_calls([("fetch", r#"{"text": "a"}"#), ("echo", r#"{"text": "b"}"#)])
        .text("never asked");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tools([token.tool(), echo_tool("echo")])
        .on_tool_error(
            "fetch",
            Policy::new().on(PolicyKey::Execution, Action::retry(5).unwrap()),
        )
        .build()
        .unwrap();

    let outcome = agent.run_with_report("go").await;

    let err = outcome.result.unwrap_err();
    let terminated = err.terminated().expect("a terminal stop");
    assert_eq!(terminated.tool, "fetch");
    assert_eq!(terminated.kind, ErrorKind::Auth);
    assert_eq!(terminated.reason, TerminationReason::Auth);
    assert!(err.to_string().contains("credentials"), "{err}");
    assert_eq!(
        token.calls(),
        1,
        "an expired token is called once, whatever the policy"
    );
    assert_eq!(model.calls(), 1, "no extra model turn");
    outcome.report.assert_count("terminated", 1);
    assert_eq!(transcript_violations(&outcome.transcript), []);
}

#[tokio::test(start_paused = true)]
async fn a_tripped_breaker_ends_the_run_before_another_turn() {
    let broken = FaultyTool::new(echo_tool("lookup"))
        .then_always(Fault::error(|| HttpError::new(404, "no such id")));
    let model = ScriptedModel::new()
        .tool_call("lookup", r#"{"text": "1"}"#)
        .tool_call("lookup", r#"{"text": "2"}"#)
        .tool_call("lookup", r#"{"text": "3"}"#)
        .text("never asked");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tool(broken.tool())
        .breaker_threshold(2)
        .build()
        .unwrap();

    let outcome = agent.run_with_report("go").await;

    match outcome.result {
        Err(RunError::BreakerTripped { tool, failures }) => {
            assert_eq!((tool.as_str(), failures), ("lookup", 2));
        }
        other => panic!("expected a tripped breaker, got {other:?}"),
    }
    assert_eq!(model.calls(), 2);
    assert_eq!(broken.calls(), 2);
    outcome.report.assert_count("breaker_tripped", 1);
}

#[tokio::test(start_paused = true)]
async fn the_per_run_breaker_is_fresh_for_every_run() {
    let broken = FaultyTool::new(echo_tool("lookup"))
        .then_always(Fault::error(|| HttpError::new(404, "no such id")));
    let model = ScriptedModel::new();
    for _ in 0..3 {
        model.push(agent_errors::testing::Reply::response(
            agent_errors::ChatResponse::tool_calls(vec![ToolCall::new(
                model.next_call_id(),
                "lookup",
                r#"{"text": "x"}"#,
            )]),
        ));
        model.push(agent_errors::testing::Reply::text("gave up"));
    }
    let agent = Agent::builder("a")
        .model(model)
        .tool(broken.tool())
        .breaker_threshold(2)
        .build()
        .unwrap();
    for _ in 0..3 {
        assert_eq!(agent.run("go").await.unwrap(), "gave up");
    }
    assert_eq!(broken.calls(), 3);
}

#[tokio::test(start_paused = true)]
async fn the_service_breaker_is_shared_by_the_agents_runs() {
    let down = FaultyTool::new(echo_tool("fetch"))
        .then_always(Fault::error(|| HttpError::new(503, "down")));
    let breaker = Arc::new(ServiceBreaker::new(2, secs(30)).unwrap());
    let model = ScriptedModel::new()
        .tool_call("fetch", r#"{"text": "1"}"#)
        .tool_call("fetch", r#"{"text": "2"}"#);
    let agent = Agent::builder("a")
        .model(model)
        .tool(down.tool())
        .on_tool_error(
            "fetch",
            Policy::new().on(PolicyKey::Execution, Action::retry(2).unwrap()),
        )
        .service_breaker(Arc::clone(&breaker))
        .build()
        .unwrap();

    let first = agent.run("go").await.unwrap_err();
    assert!(matches!(
        first.terminated().map(|t| &t.reason),
        Some(TerminationReason::RetriesExhausted { attempts: 2 })
    ));
    assert_eq!(breaker.state("fetch"), BreakerState::Open);
    assert!(Arc::ptr_eq(agent.service_breaker(), &breaker));

    let second = agent.run("go").await.unwrap_err();
    assert_eq!(
        second.terminated().map(|t| &t.reason),
        Some(&TerminationReason::CircuitOpen)
    );
    assert_eq!(
        down.calls(),
        2,
        "the open circuit kept the second run off the service"
    );
}

#[tokio::test(start_paused = true)]
async fn a_degraded_tool_is_no_longer_offered() {
    let extra = FaultyTool::new(echo_tool("enrich").optional(true))
        .fail_times(1, || HttpError::new(500, "broken"));
    let model = ScriptedModel::new()
        .tool_call("enrich", r#"{"text": "1"}"#)
        .text("done without it");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tools([extra.tool(), echo_tool("echo")])
        .on_tool_error(
            "enrich",
            Policy::new().on(PolicyKey::Execution, Action::Degrade),
        )
        .build()
        .unwrap();

    let outcome = agent.run_with_report("go").await;

    assert_eq!(outcome.result.unwrap(), "done without it");
    let requests = model.requests();
    assert_eq!(offered(&requests[0]), ["enrich", "echo"]);
    assert_eq!(offered(&requests[1]), ["echo"]);
    outcome.report.assert_count("degraded", 1);
}

#[tokio::test(start_paused = true)]
async fn retries_show_up_in_the_report_and_not_to_the_model() {
    let flaky = FaultyTool::new(echo_tool("fetch")).fail_times(2, || HttpError::new(503, "busy"));
    let model = ScriptedModel::new()
        .tool_call("fetch", r#"{"text": "page"}"#)
        .text("got it");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tool(flaky.tool())
        .on_tool_error(
            "fetch",
            Policy::new().on(PolicyKey::Execution, Action::retry(3).unwrap()),
        )
        .build()
        .unwrap();

    let outcome = agent.run_with_report("go").await;

    assert_eq!(outcome.result.unwrap(), "got it");
    outcome.report.assert_events(&["tool_retry", "tool_retry"]);
    assert_eq!(flaky.calls(), 3);
    let seen = model.last_request().unwrap();
    assert_eq!(tool_results(&seen)[0].content, "page");
}

#[tokio::test(start_paused = true)]
async fn the_turn_cap_ends_a_model_that_never_stops_calling_tools() {
    let model = ScriptedModel::new();
    for _ in 0..10 {
        model.push(agent_errors::testing::Reply::response(
            agent_errors::ChatResponse::tool_calls(vec![ToolCall::new(
                model.next_call_id(),
                "echo",
                r#"{"text": "again"}"#,
            )]),
        ));
    }
    let agent = Agent::builder("a")
        .model(model.clone())
        .tool(echo_tool("echo"))
        .max_turns(4)
        .build()
        .unwrap();
    let outcome = agent.run_with_report("go").await;
    assert!(matches!(
        outcome.result,
        Err(RunError::TurnCap { max_turns: 4 })
    ));
    assert_eq!(model.calls(), 4);
    outcome.report.assert_turns(4);
    assert_eq!(transcript_violations(&outcome.transcript), []);
}

#[tokio::test(start_paused = true)]
async fn the_default_turn_cap_is_twenty() {
    let agent = Agent::builder("a")
        .model(ScriptedModel::new())
        .build()
        .unwrap();
    assert_eq!(agent.max_turns(), 20);
}

#[derive(Debug, PartialEq, serde::Deserialize, schemars::JsonSchema)]
struct Verdict {
    ok: bool,
}

#[tokio::test(start_paused = true)]
async fn a_typed_output_is_read_from_the_final_answer() {
    let model = ScriptedModel::new()
        .text("```json\n{\"ok\": true}\n```")
        .text("yes");
    // No re-ask: the answer that does not parse ends the run at once.
    let agent = AgentBuilder::<Json<Verdict>>::new("judge")
        .model(model)
        .output_policy(agent_errors::run::OutputPolicy::retry(0))
        .build()
        .unwrap();
    assert_eq!(agent.run("ok?").await.unwrap().0, Verdict { ok: true });
    match agent.run("ok?").await {
        Err(RunError::InvalidOutput { text, error }) => {
            assert_eq!(text, "yes");
            assert!(error.downcast_ref::<serde_json::Error>().is_some());
        }
        other => panic!("expected InvalidOutput, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn an_empty_answer_is_an_error_not_an_empty_output() {
    let model = ScriptedModel::new().reply(agent_errors::testing::Reply::response(
        agent_errors::ChatResponse::default(),
    ));
    let agent = Agent::builder("a").model(model).build().unwrap();
    assert!(matches!(
        agent.run("hi").await,
        Err(RunError::EmptyResponse)
    ));
}

#[test]
fn build_lists_every_problem() {
    let fixed = echo_tool("fetch").with_policy(Policy::new().on(
        PolicyKey::InvalidArgs,
        Action::fix("missing_fixer", 1).unwrap(),
    ));
    let err = Agent::builder("a")
        .tools([fixed, echo_tool("escalate")])
        .max_turns(0)
        .build()
        .unwrap_err();
    let problems = err.problems();
    assert!(problems.contains(&ConfigProblem::MissingModel), "{err}");
    assert!(problems.contains(&ConfigProblem::ZeroLimit {
        setting: "max_turns"
    }));
    assert!(problems.contains(&ConfigProblem::ReservedToolName("escalate".into())));
    assert!(problems.iter().any(
        |p| matches!(p, ConfigProblem::UnknownFixer { fixer, .. } if fixer == "missing_fixer")
    ));
    assert_eq!(problems.len(), 4, "{err}");
}

#[test]
fn explain_shows_the_resolved_policy() {
    let agent = Agent::builder("a")
        .model(ScriptedModel::new())
        .tool(echo_tool("fetch"))
        .on_tool_error(
            "fetch",
            Policy::new().on(PolicyKey::Execution, Action::retry(4).unwrap()),
        )
        .build()
        .unwrap();
    let explained = agent.explain("fetch").unwrap().to_string();
    assert!(explained.contains("retry(4)"), "{explained}");
    assert!(explained.contains("agent"), "{explained}");
    assert!(agent.explain("nope").is_none());
}

#[tokio::test(start_paused = true)]
async fn concurrent_runs_of_one_agent_do_not_share_state() {
    let agent = Agent::builder("a")
        .model(
            ScriptedModel::new()
                .tool_call("echo", r#"{"text": "1"}"#)
                .tool_call("echo", r#"{"text": "2"}"#)
                .text("x")
                .text("y"),
        )
        .tool(echo_tool("echo"))
        .build()
        .unwrap();
    let (a, b) = tokio::join!(agent.run_with_report("1"), agent.run_with_report("2"));
    let mut answers = [a.result.unwrap(), b.result.unwrap()];
    answers.sort();
    assert_eq!(answers, ["x", "y"]);
    assert_eq!(a.report.turns + b.report.turns, 4);
}

/// Found by the property test: a retry still sleeping when a concurrent call of the same tool
/// tripped the breaker used to call the tool again.
#[tokio::test(start_paused = true)]
async fn a_retry_in_flight_does_not_call_a_tool_whose_breaker_tripped_meanwhile() {
    let tool = FaultyTool::new(echo_tool("lookup"))
        .fail_times(1, || HttpError::new(503, "busy"))
        .fail_times(1, || HttpError::new(404, "missing"));
    let model = ScriptedModel::new()
        .tool_calls([
            ("lookup", r#"{"text": "1"}"#),
            ("lookup", r#"{"text": "2"}"#),
        ])
        .text("never asked");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tool(tool.tool())
        .on_tool_error(
            "lookup",
            Policy::new().on(PolicyKey::Execution, Action::retry(2).unwrap()),
        )
        .breaker_threshold(1)
        .build()
        .unwrap();

    let outcome = agent.run_with_report("go").await;

    assert!(
        matches!(
            &outcome.result,
            Err(RunError::BreakerTripped { tool, failures: 1 }) if tool == "lookup"
        ),
        "{:?}",
        outcome.result
    );
    assert_eq!(tool.calls(), 2, "the retry of the first call did not run");
    assert_eq!(model.calls(), 1);
    assert_eq!(transcript_violations(&outcome.transcript), []);
}

#[tokio::test(start_paused = true)]
async fn a_stop_ends_the_run_at_once_and_slow_sibling_calls_answer_cancelled() {
    let expired = FaultyTool::new(echo_tool("bad"))
        .then_always(Fault::error(|| HttpError::new(401, "token expired")));
    let slow = FaultyTool::new(echo_tool("slow")).then(Fault::Delay(secs(600)));
    let model = ScriptedModel::new()
        .tool_calls([("bad", r#"{"text": "a"}"#), ("slow", r#"{"text": "b"}"#)]);
    let agent = Agent::builder("a")
        .model(model)
        .tool(expired.tool())
        .tool(slow.tool())
        .build()
        .unwrap();

    let start = Instant::now();
    let outcome = agent.run_with_report("go").await;

    assert!(start.elapsed() < secs(1), "waited {:?}", start.elapsed());
    let stop = outcome.result.unwrap_err();
    assert_eq!(stop.terminated().unwrap().reason, TerminationReason::Auth);
    assert!(transcript_violations(&outcome.transcript).is_empty());
    let answered: Vec<&ToolResult> = outcome
        .transcript
        .iter()
        .filter_map(|m| match m {
            Message::Tool(r) => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(answered.len(), 2);
    assert_eq!(answered[1].content, "operation cancelled");
}
