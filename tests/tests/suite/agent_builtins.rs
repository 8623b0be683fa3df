//! The built-in tools `escalate` and `throw_exception`, and agents used as fixers.

use agent_errors::llm::CallSource;
use agent_errors::run::TerminationReason;
use agent_errors::testing::{FaultyTool, ReportAssertions, ScriptedModel, echo_tool};
use agent_errors::{
    Agent, RunError,
    run::{ESCALATE, NotJsonArguments, THROW_EXCEPTION},
};
use agent_errors::{
    ChatRequest, Fix, FixRequest, FixerError, Limits, Message, Severity, ToolResult,
};

use crate::support::tools::count_keys;

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

fn offered(request: &ChatRequest) -> Vec<&str> {
    request.tools.iter().map(|t| t.name.as_str()).collect()
}

fn user_text(request: &ChatRequest) -> &str {
    request
        .messages
        .iter()
        .find_map(|m| match m {
            Message::User { content } => Some(content.as_str()),
            _ => None,
        })
        .expect("a user message")
}

#[tokio::test(start_paused = true)]
async fn builtins_are_offered_only_when_enabled() {
    let plain = ScriptedModel::new()
        .tool_call(ESCALATE, r#"{"reason": "help"}"#)
        .text("carried on");
    let agent = Agent::builder("plain")
        .model(plain.clone())
        .tool(echo_tool("echo"))
        .build()
        .unwrap();
    assert_eq!(agent.run("go").await.unwrap(), "carried on");
    let requests = plain.requests();
    assert_eq!(offered(&requests[0]), ["echo"]);
    let answer: serde_json::Value =
        serde_json::from_str(&tool_results(&requests[1])[0].content).unwrap();
    assert_eq!(
        answer["kind"], "not_found",
        "a builtin not enabled is not callable"
    );

    let enabled = ScriptedModel::new().text("hi");
    Agent::builder("enabled")
        .model(enabled.clone())
        .tool(echo_tool("echo"))
        .enable_builtin_tools()
        .build()
        .unwrap()
        .run("go")
        .await
        .unwrap();
    let request = enabled.last_request().unwrap();
    assert_eq!(offered(&request), ["echo", ESCALATE, THROW_EXCEPTION]);
    let schema = &request.tools[1].parameters;
    assert!(schema["properties"]["reason"].is_object(), "{schema}");
    assert!(schema["properties"]["severity"].is_object(), "{schema}");
}

#[tokio::test(start_paused = true)]
async fn escalate_ends_the_run_with_the_reason_and_a_case_insensitive_severity() {
    let model = ScriptedModel::new().tool_call(
        ESCALATE,
        r#"{"reason": "the ledger is locked", "severity": "LOW"}"#,
    );
    let agent = Agent::builder("a")
        .model(model.clone())
        .enable_escalate()
        .build()
        .unwrap();
    let outcome = agent.run_with_report("go").await;
    match outcome.result {
        Err(RunError::Escalated { reason, severity }) => {
            assert_eq!(reason, "the ledger is locked");
            assert_eq!(severity, Severity::Low);
        }
        other => panic!("expected an escalation, got {other:?}"),
    }
    assert_eq!(model.calls(), 1);
    outcome.report.assert_events(&["escalated"]);
}

#[tokio::test(start_paused = true)]
async fn escalate_without_a_reason_still_escalates() {
    let model = ScriptedModel::new().tool_call(ESCALATE, r#"{"severity": "critical"}"#);
    let agent = Agent::builder("a")
        .model(model)
        .enable_escalate()
        .build()
        .unwrap();
    match agent.run("go").await {
        Err(RunError::Escalated { reason, severity }) => {
            assert_eq!(severity, Severity::Critical);
            assert!(reason.contains("without giving a reason"), "{reason}");
        }
        other => panic!("expected an escalation, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn escalate_shows_the_model_a_reason_bounded_by_the_agents_limit() {
    let long = "x".repeat(2_000);
    let model = ScriptedModel::new().tool_call(ESCALATE, serde_json::json!({ "reason": long }));
    let agent = Agent::builder("a")
        .model(model)
        .enable_escalate()
        .limits(Limits::default().with_max_message_chars(50))
        .build()
        .unwrap();
    let outcome = agent.run_with_report("go").await;
    let Some(Message::Tool(result)) = outcome.transcript.last() else {
        panic!("the escalate call is answered: {:?}", outcome.transcript);
    };
    let shown: serde_json::Value = serde_json::from_str(&result.content).unwrap();
    assert!(
        shown["message"].as_str().unwrap().chars().count() <= 50,
        "{shown}"
    );
}

#[tokio::test(start_paused = true)]
async fn escalate_severity_defaults_to_high() {
    let model = ScriptedModel::new().tool_call(ESCALATE, r#"{"reason": "stuck"}"#);
    let agent = Agent::builder("a")
        .model(model)
        .enable_escalate()
        .build()
        .unwrap();
    assert!(matches!(
        agent.run("go").await,
        Err(RunError::Escalated {
            severity: Severity::High,
            ..
        })
    ));
}

#[tokio::test(start_paused = true)]
async fn a_builtin_called_with_bad_arguments_gets_an_error_result_and_the_run_goes_on() {
    let model = ScriptedModel::new()
        .tool_call(ESCALATE, r#"{"reason": 42}"#)
        .text("fine");
    let agent = Agent::builder("a")
        .model(model.clone())
        .enable_escalate()
        .build()
        .unwrap();
    assert_eq!(agent.run("go").await.unwrap(), "fine");
    let seen = model.last_request().unwrap();
    let error: serde_json::Value = serde_json::from_str(&tool_results(&seen)[0].content).unwrap();
    assert_eq!(error["kind"], "validation");
    assert!(error["suggestion"].as_str().unwrap().contains("reason"));
}

#[tokio::test(start_paused = true)]
async fn throw_exception_ends_the_run_with_that_reason() {
    let echo = FaultyTool::new(echo_tool("echo"));
    let model = ScriptedModel::new()
        .tool_calls([
            (THROW_EXCEPTION, r#"{"reason": "binary garbage, not JSON"}"#),
            ("echo", r#"{"text": "still answered"}"#),
        ])
        .text("never asked");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tool(echo.tool())
        .enable_throw_exception()
        .build()
        .unwrap();
    let outcome = agent.run_with_report("go").await;
    let err = outcome.result.unwrap_err();
    let terminated = err.terminated().expect("a hard failure");
    assert_eq!(terminated.tool, THROW_EXCEPTION);
    assert_eq!(
        terminated.reason,
        TerminationReason::Thrown("binary garbage, not JSON".into())
    );
    assert_eq!(model.calls(), 1);
    // The run ends at once: the other call of the turn is answered, not run.
    assert_eq!(echo.calls(), 0);
    let answers: Vec<&str> = outcome
        .transcript
        .iter()
        .filter_map(|m| match m {
            agent_errors::Message::Tool(r) => Some(r.content.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(answers.len(), 2);
    assert_eq!(answers[1], "operation cancelled");
    outcome.report.assert_count("terminated", 1);
}

// --- agents as fixers ------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_fixer_agents_escalation_reaches_the_parent_model_which_retries() {
    let fixer_model = ScriptedModel::new().tool_call(
        ESCALATE,
        serde_json::json!({
            "reason": r#"unquoted keys; corrected: {"name":"world","age":30,"active":true}"#,
            "severity": "medium",
        }),
    );
    let fixer = Agent::builder("fixer")
        .model(fixer_model.clone())
        .build()
        .unwrap()
        .into_fixer("json_fixer");
    let model = ScriptedModel::new()
        .tool_call(
            "count_keys",
            serde_json::json!({"json": "{name: world, age: 30, active: true}"}),
        )
        .tool_call(
            "count_keys",
            serde_json::json!({"json": r#"{"name":"world","age":30,"active":true}"#}),
        )
        .text("3");
    let agent = Agent::builder("analyst")
        .model(model.clone())
        .tool(count_keys())
        .fixer(fixer)
        .build()
        .unwrap();

    let outcome = agent.run_with_report("How many keys?").await;

    assert_eq!(outcome.result.unwrap(), "3");
    let requests = model.requests();
    let escalated: serde_json::Value =
        serde_json::from_str(&tool_results(&requests[1])[0].content).unwrap();
    assert_eq!(escalated["severity"], "medium");
    assert!(
        escalated["message"]
            .as_str()
            .unwrap()
            .contains(r#"{"name":"world","age":30,"active":true}"#)
    );
    assert_eq!(tool_results(&requests[2])[1].content, "3");
    outcome.report.assert_events(&["escalated", "tool_failed"]);

    let asked = fixer_model.last_request().unwrap();
    assert_eq!(asked.source, CallSource::FIXER);
    assert_eq!(offered(&asked), [ESCALATE, THROW_EXCEPTION]);
    let prompt = user_text(&asked);
    assert!(prompt.contains("count_keys"), "{prompt}");
    assert!(
        prompt.contains("{name: world, age: 30, active: true}"),
        "{prompt}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_fixer_agents_json_answer_repairs_the_call_in_the_same_turn() {
    let fixer_model =
        ScriptedModel::new().text("```json\n{\"json\": \"{\\\"a\\\": 1, \\\"b\\\": 2}\"}\n```");
    let fixer = Agent::builder("fixer")
        .model(fixer_model)
        .build()
        .unwrap()
        .into_fixer("json_fixer");
    let model = ScriptedModel::new()
        .tool_call("count_keys", serde_json::json!({"json": "{a: 1, b: 2}"}))
        .text("2");
    let agent = Agent::builder("analyst")
        .model(model.clone())
        .tool(count_keys())
        .fixer(fixer)
        .build()
        .unwrap();

    let outcome = agent.run_with_report("How many keys?").await;

    assert_eq!(outcome.result.unwrap(), "2");
    assert_eq!(model.calls(), 2, "no extra model round trip");
    let seen = model.last_request().unwrap();
    let result = tool_results(&seen)[0];
    assert!(!result.is_error);
    assert_eq!(result.content, "2");
    outcome.report.assert_events(&["tool_rerun", "tool_fixed"]);
}

#[tokio::test(start_paused = true)]
async fn a_fixer_agents_throw_ends_the_parent_run() {
    let fixer_model =
        ScriptedModel::new().tool_call(THROW_EXCEPTION, r#"{"reason": "this is binary data"}"#);
    let fixer = Agent::builder("fixer")
        .model(fixer_model)
        .build()
        .unwrap()
        .into_fixer("json_fixer");
    let model = ScriptedModel::new()
        .tool_call("count_keys", serde_json::json!({"json": "\u{1}\u{2}"}))
        .text("never asked");
    let agent = Agent::builder("analyst")
        .model(model.clone())
        .tool(count_keys())
        .fixer(fixer)
        .build()
        .unwrap();

    let err = agent.run("How many keys?").await.unwrap_err();

    let terminated = err.terminated().expect("a hard failure");
    assert_eq!(terminated.tool, "count_keys");
    assert_eq!(
        terminated.reason,
        TerminationReason::Thrown("this is binary data".into())
    );
    assert_eq!(model.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_fixer_agent_maps_each_way_its_run_can_end() {
    let request = FixRequest::new("count_keys", "{a: 1}", "key must be a string");
    let fixer_for = |model: ScriptedModel| {
        Agent::builder("fixer")
            .model(model)
            .build()
            .unwrap()
            .into_fixer("f")
    };

    let json = fixer_for(ScriptedModel::new().text(r#" {"json": "{\"a\": 1}"} "#));
    assert_eq!(
        json.fix(request.clone()).await.unwrap(),
        Fix::Args(r#"{"json":"{\"a\": 1}"}"#.into())
    );

    let prose = fixer_for(ScriptedModel::new().text("I think you meant a string key."));
    match prose.fix(request.clone()).await {
        Err(FixerError::Other(e)) => assert!(e.downcast_ref::<NotJsonArguments>().is_some()),
        other => panic!("expected Other, got {other:?}"),
    }

    let escalates = fixer_for(ScriptedModel::new().tool_call(ESCALATE, r#"{"reason": "r"}"#));
    assert!(matches!(
        escalates.fix(request.clone()).await,
        Err(FixerError::Escalate {
            severity: Severity::High,
            ..
        })
    ));

    let down = fixer_for(ScriptedModel::new().error(std::io::Error::other("model down")));
    match down.fix(request).await {
        Err(FixerError::Other(e)) => {
            let run_error = e.downcast_ref::<RunError>().expect("the fixer run's error");
            assert!(run_error.model_error().is_some());
        }
        other => panic!("expected Other, got {other:?}"),
    }
}
