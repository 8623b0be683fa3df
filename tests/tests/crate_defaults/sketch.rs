//! The declarations a typical program writes, minus the agent loop: crate defaults, a tool with
//! its own policy, a fixer, an agent-level override, start-up validation, and calls through the
//! executor.

use std::sync::atomic::{AtomicU32, Ordering};

use agent_errors::policy::PolicyLayer;
use agent_errors::prelude::*;
use agent_errors::{
    ErrorKind, Registry, RunContext, ToolCall, call::CallOutcome, policy::PolicyKey,
};
use agent_errors::{Event, ToolResult};

// The crate-wide `defaults!` these tools inherit (`execution = retry(3)`) is in `main.rs`.

static UPSTREAM_FAILURES: AtomicU32 = AtomicU32::new(0);
static COUNT_CALLS: AtomicU32 = AtomicU32::new(0);

#[derive(Debug, thiserror::Error)]
enum CountError {
    #[error("not a JSON object: {0}")]
    NotAnObject(String),
    // Not `transparent`: that would hide the HttpError from `source()`, and with it the status.
    #[error("the schema service failed")]
    Upstream(#[from] HttpError),
}

/// Count the top-level keys of a JSON object.
#[tool(on_error(invalid_args = fix(agent = "json_fixer"), execution = [retry(2), escalate]))]
async fn count_keys(json: String) -> Result<usize, CountError> {
    COUNT_CALLS.fetch_add(1, Ordering::SeqCst);
    if UPSTREAM_FAILURES.load(Ordering::SeqCst) > 0 {
        UPSTREAM_FAILURES.fetch_sub(1, Ordering::SeqCst);
        return Err(HttpError::new(503, "schema service unavailable").into());
    }
    match serde_json::from_str::<serde_json::Value>(&json) {
        Ok(serde_json::Value::Object(map)) => Ok(map.len()),
        _ => Err(CountError::NotAnObject(json)),
    }
}

/// Look up a user by id.
#[tool]
async fn lookup_user(id: u64) -> Result<String, HttpError> {
    Err(HttpError::new(404, format!("no user {id}")))
}

/// Repairs common JSON mistakes.
#[fixer]
fn json_fixer(req: FixRequest) -> Result<Fix, FixerError> {
    let repaired = req.raw_args.replace(",}", "}").replace(",]", "]");
    if repaired == req.raw_args {
        return Err(FixerError::escalate(
            "could not repair the arguments",
            Severity::High,
        ));
    }
    Ok(Fix::args(repaired))
}

fn registry() -> Registry {
    Registry::builder()
        .tools(tools![count_keys, lookup_user])
        .fixers(fixers![json_fixer])
        .on_tool_error(
            "lookup_user",
            policy!(not_found = escalate, execution = retry(5)),
        )
        .build()
        .expect("the sketch's configuration is valid")
}

fn tool_call(name: &str, args: &str) -> ToolCall {
    ToolCall::new("call-1", name, args)
}

fn result(outcome: CallOutcome) -> ToolResult {
    match outcome {
        CallOutcome::Result(r) => r,
        CallOutcome::Stop(stop) => panic!("unexpected stop: {stop}"),
    }
}

// Both tests touch the counters above; one test keeps them ordered.
#[tokio::test(start_paused = true)]
async fn the_sketch_compiles_resolves_and_executes_as_described() {
    let registry = registry();

    // Resolution: the tool's own keys, then the agent's, then the crate's, then built-in.
    let count = registry.explain("count_keys").unwrap();
    assert_eq!(
        count.source_of(PolicyKey::InvalidArgs),
        Some(PolicyLayer::Tool)
    );
    assert_eq!(
        count.source_of(PolicyKey::Execution),
        Some(PolicyLayer::Tool)
    );
    let lookup = registry.explain("lookup_user").unwrap();
    assert_eq!(
        lookup.source_of(PolicyKey::Execution),
        Some(PolicyLayer::Agent)
    );
    assert_eq!(
        lookup.source_of(PolicyKey::InvalidArgs),
        Some(PolicyLayer::BuiltIn)
    );
    assert_eq!(
        lookup.source_of(PolicyKey::Kind(ErrorKind::NotFound)),
        Some(PolicyLayer::Agent)
    );

    // The schema offered to a model comes from the parameters.
    let spec = &registry.specs()[0];
    assert_eq!(spec.name, "count_keys");
    assert_eq!(
        spec.description,
        "Count the top-level keys of a JSON object."
    );
    assert_eq!(spec.parameters["required"][0], "json");

    // A trailing comma in the arguments: the fixer repairs them and the tool runs once.
    let ctx = RunContext::new();
    let r = result(
        registry
            .execute(
                &ctx,
                &tool_call("count_keys", r#"{"json":"{\"a\":1,\"b\":2}",}"#),
            )
            .await,
    );
    assert_eq!((r.content.as_str(), r.is_error), ("2", false));
    assert_eq!(COUNT_CALLS.swap(0, Ordering::SeqCst), 1);

    // The upstream fails twice: retry(2) is used up, then the ladder escalates to the model.
    UPSTREAM_FAILURES.store(2, Ordering::SeqCst);
    let ctx = RunContext::new();
    let r = result(
        registry
            .execute(&ctx, &tool_call("count_keys", r#"{"json":"{}"}"#))
            .await,
    );
    assert!(r.is_error);
    assert!(
        r.content.contains("schema service unavailable"),
        "{}",
        r.content
    );
    assert_eq!(COUNT_CALLS.swap(0, Ordering::SeqCst), 2);
    let events = ctx.events().snapshot();
    assert!(matches!(events[0], Event::ToolRetry { attempt: 1, .. }));
    assert!(events.iter().any(|e| matches!(e, Event::Escalated { .. })));

    // A 404 is not retried even though the agent says retry(5) for execution failures.
    let r = result(
        registry
            .execute(&RunContext::new(), &tool_call("lookup_user", r#"{"id":7}"#))
            .await,
    );
    assert!(r.is_error && r.content.contains("no user 7"));
}

#[test]
fn a_policy_naming_an_unregistered_fixer_fails_at_start_up() {
    let err = Registry::builder()
        .tools(tools![count_keys])
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("json_fixer"), "{err}");
}
