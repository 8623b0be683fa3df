//! Checks on a tool's successful output: a body that reports a failure is one, and goes down
//! the tool's ladder like the tool's own errors.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use agent_errors::call::OutputCheck;
use agent_errors::policy::{Action, Policy, PolicyKey};
use agent_errors::testing::ScriptedModel;
use agent_errors::{Agent, ErrorKind, Event, Message, ToolDef};

/// A tool that answers each of `bodies` in turn, then the last one for good.
fn answering(bodies: &'static [&'static str], calls: Arc<AtomicU32>) -> ToolDef {
    ToolDef::new("quote", "A stock quote.", move |_: serde_json::Value| {
        let n = calls.fetch_add(1, Ordering::SeqCst) as usize;
        async move { Ok::<_, std::io::Error>(bodies[n.min(bodies.len() - 1)]) }
    })
}

/// What the model was shown as tool results, over every request.
fn shown(model: &ScriptedModel) -> Vec<String> {
    let last = model.last_request().expect("the model was asked");
    last.messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(result) => Some(result.content.clone()),
            _ => None,
        })
        .collect()
}

const RATE_LIMITED: &str = r#"{"error": "rate limited, retry later"}"#;

#[tokio::test(start_paused = true)]
async fn an_error_body_is_retried_and_the_model_sees_only_the_real_value() {
    let calls = Arc::new(AtomicU32::new(0));
    let tool = answering(
        &[RATE_LIMITED, RATE_LIMITED, r#"{"price": 42}"#],
        calls.clone(),
    )
    .with_policy(Policy::new().on(PolicyKey::Execution, Action::retry(3).unwrap()))
    .with_output_check(OutputCheck::error_member(ErrorKind::Transient));
    let model = ScriptedModel::new().tool_call("quote", "{}").text("42");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tool(tool)
        .build()
        .unwrap();

    let outcome = agent.run_with_report("price?").await;

    assert_eq!(outcome.result.unwrap(), "42");
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    assert_eq!(shown(&model), vec![r#"{"price": 42}"#.to_owned()]);
    let retries: Vec<_> = (outcome.report.events.iter())
        .filter_map(|e| match e {
            Event::ToolRetry { kind, .. } => Some(*kind),
            _ => None,
        })
        .collect();
    // "rate limited" is read as what it says, whatever kind the check falls back to.
    assert_eq!(retries, vec![ErrorKind::Quota, ErrorKind::Quota]);
}

#[tokio::test(start_paused = true)]
async fn without_a_check_the_error_body_reaches_the_model() {
    let calls = Arc::new(AtomicU32::new(0));
    let tool = answering(&[RATE_LIMITED, r#"{"price": 42}"#], calls.clone())
        .with_policy(Policy::new().on(PolicyKey::Execution, Action::retry(3).unwrap()));
    let model = ScriptedModel::new().tool_call("quote", "{}").text("?");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tool(tool)
        .build()
        .unwrap();

    agent.run("price?").await.unwrap();

    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(shown(&model), vec![RATE_LIMITED.to_owned()]);
}

#[tokio::test(start_paused = true)]
async fn a_rejection_the_ladder_cannot_fix_is_shown_sanitized_and_redacted() {
    let calls = Arc::new(AtomicU32::new(0));
    let body = r#"{"ok": false, "error": "denied for https://x.test/?api_key=abc123\u001b[31m"}"#;
    let bodies: &'static [&'static str] = Box::leak(Box::new([body]));
    let tool = answering(bodies, calls.clone())
        .with_output_check(OutputCheck::ok_false(ErrorKind::Validation));
    let model = ScriptedModel::new().tool_call("quote", "{}").text("no");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tool(tool)
        .build()
        .unwrap();

    agent.run("price?").await.unwrap();

    let [result] = &shown(&model)[..] else {
        panic!("one result")
    };
    assert!(result.contains("denied for"), "{result}");
    assert!(
        !result.contains("abc123") && !result.contains('\u{1b}'),
        "{result}"
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "a validation failure is not retried"
    );
}

#[tokio::test(start_paused = true)]
async fn a_check_that_panics_is_a_bug_of_the_call_and_the_run_goes_on() {
    let calls = Arc::new(AtomicU32::new(0));
    let tool = answering(&[r#"{"price": 42}"#], calls.clone())
        .with_policy(Policy::new().on(PolicyKey::Execution, Action::retry(3).unwrap()))
        .with_output_check(OutputCheck::new(|_| panic!("check bug")));
    let model = ScriptedModel::new()
        .tool_call("quote", "{}")
        .text("no price");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tool(tool)
        .build()
        .unwrap();

    let outcome = agent.run_with_report("price?").await;

    assert_eq!(outcome.result.unwrap(), "no price");
    let [result] = &shown(&model)[..] else {
        panic!("one result")
    };
    let shown: serde_json::Value = serde_json::from_str(result).unwrap();
    assert_eq!(shown["kind"], "bug", "{result}");
    assert!(result.contains("check bug"), "{result}");
    assert_eq!(calls.load(Ordering::SeqCst), 1, "a bug is not retried");
}
