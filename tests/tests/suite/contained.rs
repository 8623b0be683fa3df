//! User code the loop calls cannot crash a run: a panic in a model, an `on_llm_error` handler or
//! a permission hook becomes a typed outcome, and the agent stays usable afterwards.

use agent_errors::testing::{ScriptedModel, echo_tool};
use agent_errors::{
    Agent, BoxError, ChatModel, ChatRequest, ChatResponse, HttpError, RunError, ToolCall,
    call::BoxFuture, permission::Permission,
};

/// Panics in `chat` itself, before any future exists, or inside the future.
struct Panicking {
    before_future: bool,
}

impl ChatModel for Panicking {
    fn chat<'a>(&'a self, _: &'a ChatRequest) -> BoxFuture<'a, Result<ChatResponse, BoxError>> {
        if self.before_future {
            panic!("model blew up before its future");
        }
        Box::pin(async { panic!("model blew up while polled") })
    }
}

#[tokio::test(start_paused = true)]
async fn a_model_that_panics_ends_the_run_with_an_error_naming_it() {
    for before_future in [true, false] {
        let agent = Agent::builder("a")
            .model(Panicking { before_future })
            .build()
            .unwrap();
        match agent.run("hi").await {
            Err(RunError::CallbackPanicked { callback, message }) => {
                assert_eq!(callback, "ChatModel::chat");
                assert!(message.contains("blew up"), "{message}");
            }
            other => panic!("expected a caught panic, got {other:?}"),
        }
        // The agent is still usable.
        assert!(matches!(
            agent.run("again").await,
            Err(RunError::CallbackPanicked { .. })
        ));
    }
}

#[tokio::test(start_paused = true)]
async fn an_on_llm_error_handler_that_panics_ends_the_run_with_an_error_naming_it() {
    let model = ScriptedModel::new().error(HttpError::new(503, "busy"));
    let agent = Agent::builder("a")
        .model(model)
        .on_llm_error(|_, _| -> agent_errors::LlmErrorDecision { panic!("handler bug") })
        .build()
        .unwrap();
    match agent.run("hi").await {
        Err(RunError::CallbackPanicked { callback, message }) => {
            assert_eq!(callback, "on_llm_error");
            assert!(message.contains("handler bug"), "{message}");
        }
        other => panic!("expected a caught panic, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_permission_hook_that_panics_fails_closed() {
    let model = ScriptedModel::new()
        .tool_call("echo", r#"{"text": "hi"}"#)
        .text("done");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tool(echo_tool("echo"))
        .permission(|_: &ToolCall| -> Permission { panic!("hook bug") })
        .build()
        .unwrap();
    assert_eq!(agent.run("go").await.unwrap(), "done");
    let request = model.last_request().unwrap();
    let result = match request.messages.last() {
        Some(agent_errors::Message::Tool(result)) => result.clone(),
        other => panic!("the call is answered: {other:?}"),
    };
    assert!(result.is_error);
    let shown: serde_json::Value = serde_json::from_str(&result.content).unwrap();
    assert_eq!(shown["kind"], "bug");
    assert!(shown["message"].as_str().unwrap().contains("did not run"));
}

#[tokio::test(start_paused = true)]
async fn a_default_tool_timeout_bounds_a_tool_without_its_own() {
    use agent_errors::testing::{Fault, FaultyTool};
    use agent_errors::{ErrorKind, Limits};
    use std::time::Duration;

    let hanging = FaultyTool::new(echo_tool("fetch")).then(Fault::Hang);
    let model = ScriptedModel::new()
        .tool_call("fetch", r#"{"text": "x"}"#)
        .text("done");
    let agent = Agent::builder("a")
        .model(model)
        .tool(hanging.tool())
        .limits(Limits::default().with_default_tool_timeout(Duration::from_secs(3)))
        .build()
        .unwrap();
    let started = tokio::time::Instant::now();
    let error = agent.run("go").await.unwrap_err();
    assert_eq!(error.terminated().map(|t| t.kind), Some(ErrorKind::Timeout));
    assert_eq!(started.elapsed(), Duration::from_secs(3));
}

#[tokio::test(start_paused = true)]
async fn a_run_deadline_ends_a_run_that_would_go_on() {
    use agent_errors::Limits;
    use agent_errors::testing::{Fault, FaultyTool, transcript_violations};
    use std::time::Duration;

    // A tool slower than the deadline, and no timeout of its own.
    let slow = FaultyTool::new(echo_tool("fetch")).then(Fault::Delay(Duration::from_secs(600)));
    let model = ScriptedModel::new()
        .tool_call("fetch", r#"{"text": "x"}"#)
        .text("done");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tool(slow.tool())
        .limits(Limits::default().with_run_deadline(Duration::from_secs(60)))
        .build()
        .unwrap();
    let started = tokio::time::Instant::now();
    let outcome = agent.run_with_report("go").await;
    assert!(
        matches!(outcome.result, Err(RunError::DeadlineExceeded { limit }) if limit == Duration::from_secs(60)),
        "{:?}",
        outcome.result
    );
    assert_eq!(started.elapsed(), Duration::from_secs(60));
    assert_eq!(model.calls(), 1);
    assert_eq!(transcript_violations(&outcome.transcript), []);
}

/// A panic is a bug in the tool: the model is not told to correct its arguments, as it is for
/// arguments that did not fit.
#[tokio::test(start_paused = true)]
async fn a_tool_that_panics_gets_the_suggestion_for_a_crash_not_for_bad_arguments() {
    use agent_errors::testing::FaultyTool;

    let crashing = FaultyTool::new(echo_tool("echo")).panic_times(1, "index out of bounds");
    let model = ScriptedModel::new()
        .tool_call("echo", r#"{"text": "hi"}"#)
        .tool_call("echo", r#"{"text": 7}"#)
        .text("done");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tool(crashing.tool())
        .build()
        .unwrap();
    assert_eq!(agent.run("go").await.unwrap(), "done");
    let request = model.last_request().unwrap();
    let shown: Vec<serde_json::Value> = request
        .messages
        .iter()
        .filter_map(|message| match message {
            agent_errors::Message::Tool(result) => serde_json::from_str(&result.content).ok(),
            _ => None,
        })
        .collect();
    assert_eq!(shown.len(), 2, "{shown:?}");
    let (panicked, bad_args) = (&shown[0], &shown[1]);
    assert_eq!(panicked["kind"], "bug");
    assert!(
        panicked["message"]
            .as_str()
            .unwrap()
            .contains("index out of bounds")
    );
    let suggestion = panicked["suggestion"].as_str().unwrap();
    assert!(suggestion.contains("crashed"), "{suggestion}");
    assert!(!suggestion.contains("schema"), "{suggestion}");
    assert_eq!(bad_args["kind"], "validation");
    assert!(
        bad_args["suggestion"].as_str().unwrap().contains("schema"),
        "{bad_args}"
    );
}
