//! Against the reference MCP server, `@modelcontextprotocol/server-everything` (installed, pinned,
//! by `scripts/install-mcp-server.sh`), started over stdio: its tools registered like local ones
//! and driven through policies.

use crate::common;

use std::time::Duration;

use agent_errors::{
    ErrorKind, Event, Fix, FixRequest, Registry,
    build::FixerDef,
    policy,
    policy::{PolicyKey, PolicyLayer},
};
use common::mcp::{call, everything, wait_gone};

fn kind_of(content: &str) -> String {
    let json: serde_json::Value = serde_json::from_str(content).expect("an error result is JSON");
    json["kind"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn its_tools_register_with_their_own_names_descriptions_and_schemas() {
    let client = everything()
        .connect()
        .await
        .expect("server-everything starts");
    let tools = client.tools();
    let echo = tools
        .iter()
        .find(|t| t.name() == "echo")
        .expect("an echo tool");
    assert_eq!(echo.description(), "Echoes back the input string");
    assert_eq!(echo.parameters()["properties"]["message"]["type"], "string");
    for name in ["get-sum", "trigger-long-running-operation"] {
        assert!(tools.iter().any(|t| t.name() == name), "no `{name}`");
    }
    let registry = Registry::builder().tools(tools).build().expect("valid");
    assert!(registry.tool("echo").is_some());
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn echo_and_get_sum_answer_through_the_executor() {
    let client = everything()
        .with_prefix("everything_")
        .connect()
        .await
        .expect("starts");
    let registry = Registry::builder()
        .tools(client.tools())
        .build()
        .expect("valid");

    let echo = call(&registry, "everything_echo", r#"{"message": "hi"}"#).await;
    assert!(!echo.is_error, "{}", echo.content);
    assert_eq!(echo.content, "Echo: hi");
    let sum = call(&registry, "everything_get-sum", r#"{"a": 2, "b": 3}"#).await;
    assert_eq!(sum.content, "The sum of 2 and 3 is 5.");
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn invalid_params_reach_a_fixer_and_the_call_is_sent_again() {
    let client = everything().connect().await.expect("starts");
    // Numbers sent as strings: what the schema refuses and a fixer can mend.
    let numbers = FixerDef::from_fn("numbers", |req: FixRequest| {
        let mut args = req.args.unwrap_or_default();
        for key in ["a", "b"] {
            if let Some(n) = args[key].as_str().and_then(|s| s.parse::<f64>().ok()) {
                args[key] = serde_json::json!(n);
            }
        }
        Ok(Fix::args_value(&args))
    });
    let registry = Registry::builder()
        .tools(client.tools())
        .fixer(numbers)
        .on_tool_error("get-sum", policy!(invalid_args = fix(agent = "numbers")))
        .build()
        .expect("valid");

    let ctx = agent_errors::RunContext::new();
    let sum = common::mcp::call_in(&registry, &ctx, "get-sum", r#"{"a": "2", "b": 3}"#).await;
    assert!(!sum.is_error, "{}", sum.content);
    assert_eq!(sum.content, "The sum of 2 and 3 is 5.");
    let fixed = ctx.events().snapshot();
    assert_eq!(fixed.iter().filter(|e| e.name() == "tool_fixed").count(), 1);

    // Without a fixer, the built-in policy shows the model the server's own words.
    let bare = Registry::builder()
        .tools(client.tools())
        .build()
        .expect("valid");
    let refused = call(&bare, "get-sum", r#"{"a": "2", "b": 3}"#).await;
    assert!(refused.is_error);
    assert_eq!(kind_of(&refused.content), "validation");
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_long_running_operation_that_overruns_is_a_timeout_under_its_policy() {
    let client = everything()
        .with_timeout(Duration::from_millis(300))
        .with_policy(policy!(timeout = escalate))
        .connect()
        .await
        .expect("starts");
    let registry = Registry::builder()
        .tools(client.tools())
        .build()
        .expect("valid");
    let explained = registry
        .explain("trigger-long-running-operation")
        .expect("registered");
    let (key, _, layer) = explained.for_kind(ErrorKind::Timeout);
    assert_eq!(
        (key, layer),
        (PolicyKey::Kind(ErrorKind::Timeout), PolicyLayer::Tool)
    );

    let ctx = agent_errors::RunContext::new();
    let args = r#"{"duration": 5, "steps": 5}"#;
    let slow = common::mcp::call_in(&registry, &ctx, "trigger-long-running-operation", args).await;
    assert!(slow.is_error);
    assert_eq!(kind_of(&slow.content), "timeout");
    assert!(ctx.events().snapshot().iter().any(|e| matches!(
        e,
        Event::Escalated { tool, .. } if tool == "trigger-long-running-operation"
    )));
    // The server is still fine for the next call.
    let short = call(
        &registry,
        "trigger-long-running-operation",
        r#"{"duration": 0.1, "steps": 1}"#,
    )
    .await;
    assert!(!short.is_error, "{}", short.content);
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn shutdown_leaves_no_process_behind() {
    let client = everything().connect().await.expect("starts");
    let pid = client.pid().expect("a child process");
    assert!(common::mcp::alive(pid));
    client.shutdown().await;
    assert!(
        wait_gone(pid).await,
        "server-everything ({pid}) outlived shutdown"
    );
    assert_eq!(client.pid(), None);
}

#[tokio::test(flavor = "multi_thread")]
async fn only_the_tools_chosen_are_offered_and_a_denied_one_is_an_unknown_tool() {
    let client = everything()
        .allow_tools(["echo", "get-*"])
        .deny_tools(["get-env"])
        .filter_tools(|tool| tool.name != "get-tiny-image")
        .connect()
        .await
        .expect("server-everything starts");
    let names: Vec<String> = client.tools().iter().map(|t| t.name().to_owned()).collect();
    assert!(names.iter().any(|n| n == "echo"), "{names:?}");
    assert!(names.iter().any(|n| n == "get-sum"), "{names:?}");
    for hidden in [
        "get-env",
        "get-tiny-image",
        "trigger-long-running-operation",
    ] {
        assert!(
            !names.iter().any(|n| n == hidden),
            "`{hidden}` offered: {names:?}"
        );
    }
    assert!(names.iter().all(|n| n == "echo" || n.starts_with("get-")));

    let registry = Registry::builder()
        .tools(client.tools())
        .build()
        .expect("valid");
    let refused = call(&registry, "get-env", "{}").await;
    assert!(refused.is_error);
    assert_eq!(kind_of(&refused.content), "not_found");
    assert!(!refused.content.contains("PATH"), "{}", refused.content);
    let echo = call(&registry, "echo", r#"{"message": "hi"}"#).await;
    assert_eq!(echo.content, "Echo: hi");
    client.shutdown().await;
}
