//! Defaults a new user meets on the first day, each as they would meet it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use agent_errors::policy::{Action, Policy, PolicyKey};
use agent_errors::testing::ScriptedModel;
use agent_errors::{Agent, BoxError, ToolDef};

/// A tool that fails twice with `error()`, then answers; and how often it was called.
fn flaky<E>(error: fn() -> E) -> (ToolDef, Arc<AtomicU32>)
where
    E: Into<BoxError> + Send + 'static,
{
    let calls = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&calls);
    let tool = ToolDef::new("fetch", "Fetches.", move |_: serde_json::Value| {
        let counted = Arc::clone(&counted);
        async move {
            if counted.fetch_add(1, Ordering::SeqCst) < 2 {
                return Err(error());
            }
            Ok("page".to_owned())
        }
    });
    (tool, calls)
}

async fn run_under_retry(tool: ToolDef) -> String {
    let model = ScriptedModel::new().tool_call("fetch", "{}").text("done");
    let agent = Agent::builder("reader")
        .model(model.clone())
        .tool(tool)
        .on_tool_error(
            "fetch",
            Policy::new().on(PolicyKey::Execution, Action::retry(3).unwrap()),
        )
        .build()
        .unwrap();
    agent.run("go").await.unwrap();
    let request = model.last_request().unwrap();
    match request.messages.last() {
        Some(agent_errors::Message::Tool(result)) => result.content.clone(),
        other => panic!("the model saw the call's result: {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_plain_string_error_is_classified_from_its_text_and_retried() {
    for text in ["HTTP 503", "connection refused", "timed out"] {
        let (tool, calls) = match text {
            "HTTP 503" => flaky(|| "HTTP 503".to_owned()),
            "connection refused" => flaky(|| "connection refused".to_owned()),
            _ => flaky(|| "timed out".to_owned()),
        };
        assert_eq!(run_under_retry(tool).await, "page", "{text}");
        assert_eq!(calls.load(Ordering::SeqCst), 3, "{text}: retried twice");
    }
}

#[tokio::test(start_paused = true)]
async fn a_boxed_error_of_a_message_is_classified_from_its_text() {
    let boxed = || -> Box<dyn std::error::Error + Send + Sync> { "upstream: HTTP 503".into() };
    let (tool, calls) = flaky(boxed);
    assert_eq!(run_under_retry(tool).await, "page");
    assert_eq!(calls.load(Ordering::SeqCst), 3);

    let (tool, calls) = flaky(|| std::io::Error::other("status code: 502"));
    assert_eq!(run_under_retry(tool).await, "page");
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

#[test]
fn a_service_breaker_takes_plain_numbers_and_refuses_those_that_cannot_work() {
    use agent_errors::breaker::{BreakerSettingsError, ServiceBreaker};
    use std::time::Duration;

    assert!(ServiceBreaker::new(5, Duration::from_secs(30)).is_ok());
    assert_eq!(
        ServiceBreaker::new(0, Duration::from_secs(30)).unwrap_err(),
        BreakerSettingsError::ZeroThreshold
    );
    assert_eq!(
        ServiceBreaker::new(5, Duration::ZERO).unwrap_err(),
        BreakerSettingsError::ZeroCooldown
    );
}

#[tokio::test(start_paused = true)]
async fn a_failure_rate_breaker_judges_its_rate_when_a_call_fails_and_never_on_a_success() {
    use agent_errors::breaker::{BreakerState, ServiceBreaker};
    use std::time::Duration;

    let breaker = ServiceBreaker::failure_rate(50, 10, 4, Duration::from_secs(30)).unwrap();
    let store = breaker.store();
    for ok in [false, false, true, true] {
        store.record("search", ok);
    }
    assert_eq!(
        breaker.state("search"),
        BreakerState::Closed,
        "2 of 4 failed, but the last call was a success, which opens nothing"
    );
    store.record("search", false);
    assert_eq!(
        breaker.state("search"),
        BreakerState::Open,
        "the next failure is judged: 3 of the last 5 failed"
    );
}

/// Arguments of a hand-written tool, derived with the `schemars` agent-errors re-exports.
#[derive(serde::Deserialize, agent_errors::schemars::JsonSchema)]
#[schemars(crate = "agent_errors::schemars")]
struct Lookup {
    /// The city.
    city: String,
}

#[tokio::test]
async fn a_hand_written_tool_reaches_schemars_through_agent_errors() {
    let tool = ToolDef::new("lookup", "Looks a city up.", |args: Lookup| async move {
        Ok::<_, std::io::Error>(format!("found {}", args.city))
    });
    let properties = &tool.parameters()["properties"];
    assert_eq!(properties["city"]["type"], "string");
    let model = ScriptedModel::new()
        .tool_call("lookup", r#"{"city":"Oslo"}"#)
        .text("done");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tool(tool)
        .build()
        .unwrap();
    agent.run("go").await.unwrap();
    let request = model.last_request().unwrap();
    assert!(matches!(
        request.messages.last(),
        Some(agent_errors::Message::Tool(r)) if r.content == "found Oslo"
    ));
}

#[tokio::test(start_paused = true)]
async fn a_fix_followed_by_retries_still_announces_the_fix() {
    use agent_errors::build::FixerDef;
    use agent_errors::testing::ReportAssertions;
    use agent_errors::{Fix, HttpError};

    let calls = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&calls);
    let tool = ToolDef::new("lookup", "Looks a city up.", move |args: Lookup| {
        let counted = Arc::clone(&counted);
        async move {
            if counted.fetch_add(1, Ordering::SeqCst) == 0 {
                return Err(HttpError::new(503, "busy"));
            }
            Ok(format!("found {}", args.city))
        }
    });
    let repair = FixerDef::from_fn("repair", |_| Ok(Fix::Args(r#"{"city":"Oslo"}"#.into())));
    let model = ScriptedModel::new()
        .tool_call("lookup", r#"{"town":"Oslo"}"#)
        .text("done");
    let agent = Agent::builder("a")
        .model(model)
        .tool(tool)
        .fixer(repair)
        .on_tool_error(
            "lookup",
            Policy::new()
                .on(PolicyKey::InvalidArgs, Action::fix("repair", 1).unwrap())
                .on(PolicyKey::Execution, Action::retry(3).unwrap()),
        )
        .build()
        .unwrap();
    let outcome = agent.run_with_report("go").await;
    assert_eq!(outcome.result.unwrap(), "done");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(
        outcome.report.event_names(),
        ["tool_rerun", "tool_retry", "tool_fixed"],
        "the re-run with the fixer's arguments, the retry after it, then the fix once the call \
         succeeded"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failure_that_opens_the_service_breaker_is_not_slept_on_before_a_retry() {
    use agent_errors::HttpError;
    use agent_errors::breaker::ServiceBreaker;
    use agent_errors::run::TerminationReason;
    use std::time::Duration;

    let (tool, calls) = flaky(|| HttpError::new(503, "busy"));
    let model = ScriptedModel::new().tool_call("fetch", "{}").text("done");
    let breaker = Arc::new(ServiceBreaker::new(1, Duration::from_secs(60)).unwrap());
    let agent = Agent::builder("reader")
        .model(model)
        .tool(tool)
        .service_breaker(Arc::clone(&breaker))
        .on_tool_error(
            "fetch",
            Policy::new().on(PolicyKey::Execution, Action::retry(3).unwrap()),
        )
        .build()
        .unwrap();
    let started = tokio::time::Instant::now();
    let outcome = agent.run_with_report("go").await;
    let error = outcome.result.unwrap_err();
    let terminated = error.terminated().expect("the open circuit ends the run");
    assert!(
        matches!(terminated.reason, TerminationReason::CircuitOpen),
        "{terminated:?}"
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the open circuit is not called"
    );
    assert_eq!(
        started.elapsed(),
        Duration::ZERO,
        "no backoff was slept for a retry the open circuit would refuse"
    );
}

/// The user a run is for.
struct Caller(String);

/// Greets the caller.
#[agent_errors::tool]
async fn greet(caller: agent_errors::Ctx<Caller>) -> String {
    format!("hello {}", caller.0)
}

#[tokio::test]
async fn a_run_missing_a_ctx_value_is_refused_before_the_model_is_asked() {
    use agent_errors::{RunError, RunOptions};

    let model = ScriptedModel::new().tool_call("greet", "{}").text("done");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tools(agent_errors::tools![greet])
        .build()
        .unwrap();
    let outcome = agent.run_with_report("hi").await;
    let error = outcome.result.unwrap_err();
    assert!(
        matches!(&error, RunError::MissingContext { tool, type_name }
            if tool == "greet" && type_name.ends_with("Caller")),
        "{error:?}"
    );
    assert!(error.to_string().contains("RunOptions::context"), "{error}");
    assert_eq!(model.calls(), 0);

    let options = RunOptions::new().context(Caller("ada".into()));
    assert_eq!(agent.run_with("hi", options).await.result.unwrap(), "done");
}

/// Sends once per call, whatever retries happen.
#[agent_errors::tool]
async fn send(key: agent_errors::Ctx<agent_errors::call::IdempotencyKey>) -> String {
    format!("sent with {}", &*key)
}

#[tokio::test]
async fn a_tool_asking_for_its_idempotency_key_needs_nothing_from_the_caller() {
    let model = ScriptedModel::new().tool_call("send", "{}").text("done");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tools(agent_errors::tools![send])
        .build()
        .unwrap();
    assert_eq!(agent.run("go").await.unwrap(), "done");
    let request = model.last_request().unwrap();
    assert!(matches!(
        request.messages.last(),
        Some(agent_errors::Message::Tool(r)) if r.content.starts_with("sent with run-")
    ));
}
