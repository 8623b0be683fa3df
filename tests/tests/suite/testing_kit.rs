//! The test kit as a user meets it: scripted models, faulty tools, report assertions.

use std::time::Duration;

use agent_errors::testing::{
    Fault, FaultyTool, Reply, ReportAssertions, ScriptExhausted, ScriptedModel, echo_tool,
    transcript_violations,
};
use agent_errors::{Agent, RunError};
use agent_errors::{
    ChatResponse, ErrorKind, HttpError, Message,
    policy::{Action, Policy, PolicyKey},
};

#[tokio::test(start_paused = true)]
async fn a_script_that_runs_out_fails_the_run_with_a_clear_error() {
    let model = ScriptedModel::new().tool_call("echo", r#"{"text": "x"}"#);
    let agent = Agent::builder("a")
        .model(model)
        .tool(echo_tool("echo"))
        .build()
        .unwrap();
    let err = agent.run("go").await.unwrap_err();
    let exhausted = err
        .model_error()
        .and_then(|e| e.downcast_ref::<ScriptExhausted>())
        .expect("ScriptExhausted");
    assert_eq!((exhausted.call, exhausted.scripted), (2, 1));
    assert!(err.to_string().contains("no reply left"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn a_panicking_tool_is_a_bug_the_model_is_told_about() {
    let buggy = FaultyTool::new(echo_tool("parse")).panic_times(1, "index out of bounds");
    let model = ScriptedModel::new()
        .tool_call("parse", r#"{"text": "x"}"#)
        .text("ok");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tool(buggy.tool())
        .build()
        .unwrap();
    let outcome = agent.run_with_report("go").await;
    assert_eq!(outcome.result.unwrap(), "ok");
    let seen = model.last_request().unwrap();
    let Some(Message::Tool(result)) = seen.messages.last() else {
        panic!("a tool result last");
    };
    let error: serde_json::Value = serde_json::from_str(&result.content).unwrap();
    assert_eq!(error["kind"], "bug");
    outcome.report.assert_count("tool_failed", 1);
}

#[test]
fn a_faulty_tool_keeps_the_wrapped_tools_identity() {
    let policy = Policy::new().on(PolicyKey::Execution, Action::retry(2).unwrap());
    let original = echo_tool("fetch")
        .with_policy(policy.clone())
        .optional(true);
    let wrapped = FaultyTool::new(original.clone()).tool();
    assert_eq!(wrapped.name(), original.name());
    assert_eq!(wrapped.description(), original.description());
    assert_eq!(wrapped.parameters(), original.parameters());
    assert_eq!(wrapped.policy(), &policy);
    assert!(wrapped.is_optional());
}

#[tokio::test(start_paused = true)]
async fn a_faulty_tool_keeps_the_wrapped_tools_timeout() {
    let original = echo_tool("fetch").with_timeout(Duration::from_secs(5));
    let hanging = FaultyTool::new(original).then(Fault::Hang);
    assert_eq!(hanging.tool().timeout(), Some(Duration::from_secs(5)));
    let model = ScriptedModel::new()
        .tool_call("fetch", r#"{"text": "x"}"#)
        .text("done");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tool(hanging.tool())
        .build()
        .unwrap();
    // Without the wrapped tool's timeout the hang would hold the run forever; with it, the
    // call fails as a timeout and, with no retries, ends the run.
    let stop = agent.run("go").await.unwrap_err();
    let terminated = stop.terminated().expect("a tool stop");
    assert_eq!(terminated.kind, ErrorKind::Timeout);
    assert_eq!(model.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn delays_and_latency_run_on_the_paused_clock() {
    let slow = FaultyTool::new(echo_tool("slow")).then(Fault::Delay(Duration::from_secs(30)));
    let model = ScriptedModel::new()
        .reply(
            Reply::response(ChatResponse::tool_calls(vec![agent_errors::ToolCall::new(
                "c1",
                "slow",
                r#"{"text": "x"}"#,
            )]))
            .after(Duration::from_secs(2)),
        )
        .text("done");
    let agent = Agent::builder("a")
        .model(model)
        .tool(slow.tool())
        .build()
        .unwrap();
    let start = tokio::time::Instant::now();
    assert_eq!(agent.run("go").await.unwrap(), "done");
    assert_eq!(start.elapsed(), Duration::from_secs(32));
}

#[tokio::test(start_paused = true)]
async fn report_assertions_chain_and_transcripts_check_clean() {
    let flaky = FaultyTool::new(echo_tool("fetch")).fail_times(1, || HttpError::new(503, "busy"));
    let model = ScriptedModel::new()
        .tool_call("fetch", r#"{"text": "x"}"#)
        .text("done");
    let agent = Agent::builder("a")
        .model(model)
        .tool(flaky.tool())
        .on_tool_error(
            "fetch",
            Policy::new().on(PolicyKey::Execution, Action::retry(2).unwrap()),
        )
        .build()
        .unwrap();
    let outcome = agent.run_with_report("go").await;
    outcome
        .report
        .assert_events(&["tool_retry"])
        .assert_count("tool_retry", 1)
        .assert_turns(2)
        .assert_model_calls(2)
        .assert_tool_calls(1);
    assert_eq!(outcome.report.event_names(), ["tool_retry"]);
    assert_eq!(transcript_violations(&outcome.transcript), []);
}

#[test]
#[should_panic(expected = "expected events [\"tool_retry\"], got []")]
fn a_failed_report_assertion_says_what_it_saw() {
    agent_errors::RunReport::default().assert_events(&["tool_retry"]);
}

#[tokio::test(start_paused = true)]
async fn a_model_error_fails_the_run_even_with_tools_left_to_call() {
    let model = ScriptedModel::new().error(HttpError::new(500, "model crashed"));
    let agent = Agent::builder("a").model(model).build().unwrap();
    match agent.run("go").await {
        Err(RunError::Model(e)) => {
            let original = e.unredacted_error().downcast_ref::<HttpError>();
            assert_eq!(original.unwrap().status(), 500);
        }
        other => panic!("expected the model error, got {other:?}"),
    }
}
