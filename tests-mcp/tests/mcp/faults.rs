//! MCP failures, against the Rust fault server of this package (`src/bin/mcp_fault_server.rs`)
//! over stdio: a server that dies mid-call, answers invalid params, hangs, answers `isError`.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use agent_errors::mcp::{IDEMPOTENCY_KEY_META, McpClient, McpError};
use agent_errors::{
    Cancellation, ErrorKind, Event, Fix, FixRequest, Registry, RunContext, ToolCall,
    breaker::{BreakerState, ServiceBreaker},
    build::{ConfigProblem, FixerDef},
    call::CallOutcome,
    classify::classify,
    policy,
    retry::RetrySchedule,
};
use common::mcp::{alive, call, call_in, faults, wait_gone};

fn kind_of(content: &str) -> String {
    let json: serde_json::Value = serde_json::from_str(content).expect("an error result is JSON");
    json["kind"].as_str().unwrap_or_default().to_owned()
}

async fn registry_of(client: &McpClient) -> Registry {
    Registry::builder()
        .tools(client.tools())
        .build()
        .expect("valid")
}

/// Waits until the server has seen `started` hang calls and `cancelled` cancellations.
async fn wait_for_hangs(registry: &Registry, started: u32, cancelled: u32) {
    let want = format!("{started} {cancelled}");
    for _ in 0..200 {
        if call(registry, "hangs", "{}").await.content == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the server never reported `{want}` hang calls started and cancelled");
}

#[tokio::test(flavor = "multi_thread")]
async fn same_names_on_two_servers_are_refused_unless_prefixed() {
    let (one, two) = (
        faults().connect().await.unwrap(),
        faults().connect().await.unwrap(),
    );
    let clash = Registry::builder()
        .tools(one.tools())
        .tools(two.tools())
        .build();
    let problems = clash.expect_err("duplicate names").problems().to_vec();
    assert!(problems.contains(&ConfigProblem::DuplicateTool("echo".to_owned())));
    let message = ConfigProblem::DuplicateTool("echo".to_owned()).to_string();
    assert!(message.contains("prefix"), "{message}");

    let prefixed = faults().with_prefix("b_").connect().await.unwrap();
    let registry = Registry::builder()
        .tools(one.tools())
        .tools(prefixed.tools())
        .build();
    let registry = registry.expect("prefixed names do not clash");
    assert_eq!(
        call(&registry, "b_echo", r#"{"text": "hi"}"#).await.content,
        "hi"
    );
    for client in [one, two, prefixed] {
        client.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_servers_tools_can_share_one_breaker_key() {
    let keyed = faults()
        .with_breaker_key("fault-server")
        .connect()
        .await
        .unwrap();
    let tools = keyed.tools();
    assert!(!tools.is_empty());
    assert!(tools.iter().all(|t| t.breaker_key() == "fault-server"));
    keyed.shutdown().await;
    let plain = faults().connect().await.unwrap();
    assert!(plain.tools().iter().all(|t| t.breaker_key() == t.name()));
    plain.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn invalid_params_as_rpc_error_or_as_text_are_repaired_in_the_same_call() {
    let client = faults().connect().await.unwrap();
    let integer = FixerDef::from_fn("integer", |_req: FixRequest| Ok(Fix::args(r#"{"n": 2}"#)));
    let registry = Registry::builder()
        .tools(client.tools())
        .fixer(integer)
        .on_tool_error("strict", policy!(invalid_args = fix(agent = "integer")))
        .on_tool_error(
            "strict_text",
            policy!(invalid_args = fix(agent = "integer")),
        )
        .build()
        .unwrap();
    for tool in ["strict", "strict_text"] {
        let ctx = RunContext::new();
        let result = call_in(&registry, &ctx, tool, r#"{"n": "two"}"#).await;
        assert_eq!(result.content, "4", "{tool}");
        let events = ctx.events().snapshot();
        assert!(
            events.iter().any(|e| matches!(e, Event::ToolFixed { .. })),
            "{tool}"
        );
    }
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn is_error_text_is_classified_from_its_status_and_retry_after() {
    let client = faults().connect().await.unwrap();
    let registry = Registry::builder()
        .tools(client.tools())
        .on_tool_error("fail", policy!(quota = [retry(2), escalate]))
        .build()
        .unwrap();

    let missing = call(&registry, "fail", r#"{"text": "upstream said HTTP 404"}"#).await;
    assert_eq!(kind_of(&missing.content), "not_found");
    let not_a_tool = r#"{"text": "MCP error -32602: Tool nope not found"}"#;
    assert_eq!(
        kind_of(&call(&registry, "fail", not_a_tool).await.content),
        "not_found"
    );

    let ctx = RunContext::new();
    let limited = r#"{"text": "HTTP 429 Too Many Requests. Retry-After: 0"}"#;
    let result = call_in(&registry, &ctx, "fail", limited).await;
    assert_eq!(kind_of(&result.content), "quota");
    let retried = ctx.events().snapshot();
    assert!(retried.iter().any(|e| matches!(
        e,
        Event::ToolRetry { delay, .. } if *delay == Duration::ZERO
    )));

    // The server's text is untrusted: it reaches the model sanitized.
    let noisy = r#"{"text": "broken \u001b[31mred\u001b[0m\u0007 text"}"#;
    let shown = call(&registry, "fail", noisy).await;
    assert!(!shown.content.contains('\u{1b}') && !shown.content.contains('\u{7}'));
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_dies_mid_call_is_restarted_and_the_retry_succeeds() {
    let marker = std::env::temp_dir().join(format!("mcp-die-once-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    let client = faults()
        .with_policy(policy!(transient = retry(3)))
        .with_restarts(
            RetrySchedule::attempts(3)
                .unwrap()
                .with_initial(Duration::from_millis(10)),
        )
        .connect()
        .await
        .unwrap();
    let registry = registry_of(&client).await;
    let first_pid = client.pid().expect("a process");

    let args = serde_json::json!({ "marker": marker }).to_string();
    let ctx = RunContext::new();
    let result = call_in(&registry, &ctx, "die_once", &args).await;
    assert_eq!(result.content, "survived");
    let retries = ctx.events().snapshot();
    assert!(retries.iter().any(|e| matches!(e, Event::ToolRetry { .. })));
    let second_pid = client.pid().expect("a restarted process");
    assert_ne!(first_pid, second_pid);
    assert!(wait_gone(first_pid).await);
    let _ = std::fs::remove_file(&marker);
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn in_flight_calls_of_a_dying_server_each_get_one_result() {
    let client = faults()
        .with_policy(policy!(transient = escalate))
        .connect()
        .await
        .unwrap();
    let registry = registry_of(&client).await;
    let calls = [
        ToolCall::new("1", "hang", "{}"),
        ToolCall::new("2", "hang", "{}"),
        ToolCall::new("3", "die", "{}"),
    ];
    let outcomes = registry.execute_turn(&RunContext::new(), &calls).await;
    assert_eq!(outcomes.len(), 3);
    for outcome in &outcomes {
        let result = outcome.result().expect("an error result, not a stop");
        assert!(result.is_error);
        assert_eq!(kind_of(&result.content), "transient", "{}", result.content);
    }
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_keeps_dying_gives_up_and_opens_the_service_breaker() {
    let client = faults()
        .with_policy(policy!(transient = escalate))
        .with_restarts(
            RetrySchedule::attempts(2)
                .unwrap()
                .with_initial(Duration::from_millis(10)),
        )
        .connect()
        .await
        .unwrap();
    let registry = registry_of(&client).await;
    let breaker = Arc::new(ServiceBreaker::new(4, Duration::from_secs(60)).unwrap());
    let run = || RunContext::new().with_service_breaker(Arc::clone(&breaker));
    // Died, restarted and died twice, then given up: four transient failures in a row.
    for expected in ["closed", "closed", "closed", "restarts in a row"] {
        let result = call_in(&registry, &run(), "die", "{}").await;
        assert_eq!(kind_of(&result.content), "transient");
        assert!(result.content.contains(expected), "{}", result.content);
    }
    // The server is not called again: the open circuit answers, under the same `escalate`.
    let open = call_in(&registry, &run(), "die", "{}").await;
    assert!(open.content.contains("circuit is open"), "{}", open.content);
    assert_eq!(breaker.state("die"), BreakerState::Open);
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn cancelling_a_run_sends_mcp_cancellation_for_its_requests() {
    let client = faults().connect().await.unwrap();
    let registry = registry_of(&client).await;
    let cancel = Cancellation::new();
    let ctx = RunContext::new().with_cancellation(cancel.clone());
    let hang = ToolCall::new("1", "hang", "{}");
    let (outcome, ()) = tokio::join!(registry.execute(&ctx, &hang), async {
        wait_for_hangs(&registry, 1, 0).await;
        cancel.cancel();
    });
    assert_eq!(
        outcome.result().expect("a result").content,
        "operation cancelled"
    );
    wait_for_hangs(&registry, 1, 1).await;
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_that_overruns_its_timeout_is_a_timeout_and_is_cancelled_on_the_server() {
    let client = faults()
        .with_timeout(Duration::from_millis(200))
        .with_policy(policy!(timeout = escalate))
        .connect()
        .await
        .unwrap();
    let registry = registry_of(&client).await;
    let result = call(&registry, "hang", "{}").await;
    assert_eq!(kind_of(&result.content), "timeout");
    wait_for_hangs(&registry, 1, 1).await;
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn shutdown_stops_the_process_and_later_calls_fail() {
    let client = faults().connect().await.unwrap();
    let registry = registry_of(&client).await;
    let pid = client.pid().expect("a process");
    assert!(alive(pid));
    client.shutdown().await;
    assert!(
        wait_gone(pid).await,
        "the fault server ({pid}) outlived shutdown"
    );
    let after = registry
        .execute(&RunContext::new(), &ToolCall::new("1", "echo", "{}"))
        .await;
    match after {
        CallOutcome::Result(result) => assert!(result.content.contains("shut down")),
        CallOutcome::Stop(stop) => assert!(stop.to_string().contains("unavailable"), "{stop}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn dropping_every_handle_kills_the_process() {
    let client = faults().connect().await.unwrap();
    let registry = registry_of(&client).await;
    let pid = client.pid().expect("a process");
    drop((client, registry));
    assert!(
        wait_gone(pid).await,
        "the fault server ({pid}) outlived its handles"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_carries_its_idempotency_key_in_meta_and_the_same_call_the_same_key() {
    let client = faults().connect().await.expect("starts");
    let registry = registry_of(&client).await;
    let meta_of = |content: &str| -> serde_json::Value {
        serde_json::from_str(content).expect("the server answers its `_meta` as JSON")
    };

    let run = RunContext::new().with_run_id("run-7");
    let first = call_in(&registry, &run, "meta", "{}").await;
    let meta = meta_of(&first.content);
    assert_eq!(meta[IDEMPOTENCY_KEY_META], "run-7:call_1", "{meta}");
    // The same call again (a retry, a resumed run) carries the same key.
    let again = call_in(&registry, &run, "meta", "{}").await;
    let again = meta_of(&again.content);
    assert_eq!(again[IDEMPOTENCY_KEY_META], "run-7:call_1", "{again}");

    // A run without an id gives its calls no key, and none is made up.
    let anonymous = call(&registry, "meta", "{}").await;
    assert!(
        meta_of(&anonymous.content)
            .get(IDEMPOTENCY_KEY_META)
            .is_none()
    );
    client.shutdown().await;
}

/// An MCP server's error text is the server's words: a key or a connection string it echoes is
/// redacted in the `McpError` itself (its `Display` and `Debug`), and in the chain of the run's
/// error a tool failure ends.
#[tokio::test(flavor = "multi_thread")]
async fn a_servers_error_text_reaches_no_error_unredacted() {
    use agent_errors::mcp::McpError;

    let client = faults().connect().await.unwrap();
    let registry = Registry::builder()
        .tools(client.tools())
        .on_tool_error("fail", policy!(execution = throw, unknown = throw))
        .build()
        .unwrap();
    let leaking = r#"{"text": "db at postgres://app:hunter2hunter2@db.internal/prod refused, api_key=Q7zzSecretValue9"}"#;
    let outcome = registry
        .execute(
            &RunContext::new(),
            &ToolCall::new("call_1", "fail", leaking),
        )
        .await;
    let CallOutcome::Stop(stop) = outcome else {
        panic!("expected the run to stop, got {outcome:?}");
    };
    let mut logged = String::new();
    let mut level: Option<&(dyn std::error::Error + 'static)> = Some(&*stop);
    while let Some(error) = level {
        logged.push_str(&format!("\n{error}\n{error:?}"));
        level = error.source();
    }
    let original = stop.unredacted_error().expect("the tool's failure");
    let mcp = original
        .cause()
        .downcast_ref::<McpError>()
        .expect("the MCP error itself");
    logged.push_str(&format!("\n{mcp}\n{mcp:?}"));
    for secret in ["hunter2hunter2", "Q7zzSecretValue9"] {
        assert!(!logged.contains(secret), "{secret} in {logged}");
    }
    assert!(
        logged.contains("postgres://app:[REDACTED]@db.internal/prod"),
        "{logged}"
    );
    client.shutdown().await;
}

/// A server whose `tools/list` never answers, or answers more than the transport takes in one
/// line: `connect` ends with a timeout that names the server, and leaves no process behind.
#[tokio::test(flavor = "multi_thread")]
async fn connecting_to_a_server_whose_tool_list_never_arrives_is_a_timeout() {
    for fault in ["hang", "huge"] {
        let bound = Duration::from_secs(3);
        let connecting = faults()
            .env("MCP_FAULT_LIST", fault)
            .with_request_timeout(bound)
            .connect();
        // Not `expect_err`: a client that did connect would print every tool it listed.
        let Err(error) = connecting.await else {
            panic!("{fault}: the tool list arrived");
        };
        assert!(
            matches!(&error, McpError::Timeout { timeout, .. } if *timeout == bound),
            "{fault}: {error:?}"
        );
        assert!(error.to_string().contains("`faults`"), "{error}");
        assert_eq!(classify(&error).kind, ErrorKind::Timeout);
    }
}

/// Without a tool timeout of its own, a call is still bounded by the server's request timeout,
/// and the server is told the request is cancelled.
#[tokio::test(flavor = "multi_thread")]
async fn a_call_with_no_answer_is_bounded_by_the_request_timeout() {
    let client = faults()
        .with_request_timeout(Duration::from_secs(2))
        .with_policy(policy!(timeout = escalate))
        .connect()
        .await
        .unwrap();
    let registry = registry_of(&client).await;
    let result = call(&registry, "hang", "{}").await;
    assert_eq!(kind_of(&result.content), "timeout");
    wait_for_hangs(&registry, 1, 1).await;
    client.shutdown().await;
}
