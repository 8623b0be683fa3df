//! A registry's tools served over MCP: each call runs through its policy on the serving side,
//! and a stop of the ladder becomes an `isError` result with a fixed message.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use agent_errors::mcp::rmcp::model::{CallToolRequestParams, RequestParamsMeta};
use agent_errors::mcp::rmcp::{ServiceError, ServiceExt};
use agent_errors::mcp::{IDEMPOTENCY_KEY_META, McpServer, McpService};
use agent_errors::{
    HttpError, Registry, ToolDef, ToolError,
    call::{Extensions, IdempotencyKey, ToolFuture, ToolHandler},
    policy,
    run::TerminationReason,
};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Name {
    name: String,
}

/// `flaky` fails with a 503 twice, then greets; `locked` always answers 401 with a secret in
/// its message.
fn registry() -> Registry {
    let calls = Arc::new(AtomicU32::new(0));
    let flaky = ToolDef::new("flaky", "Greets, eventually.", move |args: Name| {
        let calls = Arc::clone(&calls);
        async move {
            match calls.fetch_add(1, Ordering::SeqCst) {
                0 | 1 => Err(HttpError::new(503, "busy")),
                _ => Ok(format!("hello {}", args.name)),
            }
        }
    })
    .with_policy(policy!(
        transient = retry(max_attempts = 3, initial = "1ms")
    ));
    let locked = ToolDef::new("locked", "Needs credentials.", |_: Name| async move {
        Err::<String, _>(HttpError::new(401, "token sk-live-SECRET rejected"))
    });
    Registry::builder()
        .tool(flaky)
        .tool(locked)
        .build()
        .expect("valid")
}

fn text_of(result: &agent_errors::mcp::rmcp::model::CallToolResult) -> String {
    let texts = result.content.iter().filter_map(|c| c.as_text());
    texts.map(|t| t.text.clone()).collect()
}

fn call(tool: &'static str, name: &str) -> CallToolRequestParams {
    let args = serde_json::json!({ "name": name });
    let serde_json::Value::Object(args) = args else {
        unreachable!("an object literal")
    };
    CallToolRequestParams::new(tool).with_arguments(args)
}

#[tokio::test(start_paused = true)]
async fn calls_run_through_their_policies_on_the_serving_side() {
    let (server_io, client_io) = tokio::io::duplex(64 * 1024);
    let server = tokio::spawn(McpService::new(registry()).serve(server_io));
    let client = ().serve(client_io).await.expect("handshake");
    let _server = server.await.expect("task").expect("served");

    let tools = client.peer().list_all_tools().await.expect("tools");
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["flaky", "locked"]);
    assert_eq!(
        tools[0].input_schema["properties"]["name"]["type"],
        "string"
    );

    // Two 503s retried on this side: the client sees only the answer.
    let flaky = client
        .peer()
        .call_tool(call("flaky", "Ada"))
        .await
        .expect("answered");
    assert_eq!(flaky.is_error, Some(false));
    assert_eq!(text_of(&flaky), "hello Ada");

    let locked = client
        .peer()
        .call_tool(call("locked", "Ada"))
        .await
        .expect("answered");
    assert_eq!(locked.is_error, Some(true));
    assert_eq!(text_of(&locked), TerminationReason::Auth.user_message());
    assert!(!text_of(&locked).contains("SECRET"));

    let unknown = client.peer().call_tool(call("nope", "Ada")).await;
    match unknown {
        Err(ServiceError::McpError(error)) => assert_eq!(error.code.0, -32602),
        other => panic!("expected invalid params, got {other:?}"),
    }
    client.cancel().await.expect("closed");
}

#[tokio::test(flavor = "multi_thread")]
async fn our_client_reaches_our_server_over_streamable_http() {
    use agent_errors::mcp::rmcp::transport::streamable_http_server::StreamableHttpServerConfig;

    let stop = tokio_util::sync::CancellationToken::new();
    let config = StreamableHttpServerConfig::default().with_cancellation_token(stop.child_token());
    let service = McpService::new(registry()).streamable_http(config);
    let router = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("loopback");
    let url = format!("http://{}/mcp", listener.local_addr().expect("bound"));
    let served = tokio::spawn({
        let stop = stop.clone();
        async move {
            let _ = axum::serve(listener, router)
                .with_graceful_shutdown(stop.cancelled_owned())
                .await;
        }
    });

    let client = McpServer::http("ours", url)
        .with_prefix("ours_")
        .connect()
        .await
        .expect("up");
    let registry = Registry::builder()
        .tools(client.tools())
        .build()
        .expect("valid");
    let ctx = agent_errors::RunContext::new();
    let call = agent_errors::ToolCall::new("1", "ours_flaky", r#"{"name": "Ada"}"#);
    let outcome = registry.execute(&ctx, &call).await;
    assert_eq!(outcome.result().expect("a result").content, "hello Ada");

    client.shutdown().await;
    stop.cancel();
    served.await.expect("server task");
}

/// Answers the idempotency key its call was given, or `none`.
struct KeyTool;

impl ToolHandler for KeyTool {
    fn call(&self, raw_args: &str) -> Result<ToolFuture, ToolError> {
        self.call_with(raw_args, &Extensions::new())
    }

    fn call_with(&self, _: &str, extensions: &Extensions) -> Result<ToolFuture, ToolError> {
        let key = extensions.get::<IdempotencyKey>().map(ToString::to_string);
        Ok(Box::pin(async move {
            Ok(key.unwrap_or_else(|| "none".to_owned()))
        }))
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_served_tool_gets_the_idempotency_key_the_client_sent() {
    let key_tool = ToolDef::from_handler("key", "Says its key.", serde_json::json!({}), KeyTool);
    let registry = Registry::builder().tool(key_tool).build().expect("valid");
    let (server_io, client_io) = tokio::io::duplex(64 * 1024);
    let server = tokio::spawn(McpService::new(registry).serve(server_io));
    let client = ().serve(client_io).await.expect("handshake");
    let _server = server.await.expect("task").expect("served");
    let key_sent = async |key: serde_json::Value| {
        let mut request = CallToolRequestParams::new("key");
        request
            .meta_or_default()
            .insert(IDEMPOTENCY_KEY_META.to_owned(), key);
        let answer = client.peer().call_tool(request).await.expect("answered");
        text_of(&answer)
    };

    assert_eq!(key_sent("run-7:call_1".into()).await, "run-7:call_1");
    // What is not a key is ignored: the call runs without one.
    for not_a_key in [
        serde_json::json!("no-colon"),
        serde_json::json!(":call"),
        serde_json::json!("run\u{1b}[2J:call"),
        serde_json::json!(format!("{}:call", "r".repeat(300))),
        serde_json::json!(7),
    ] {
        assert_eq!(key_sent(not_a_key.clone()).await, "none", "{not_a_key}");
    }
    let plain = client
        .peer()
        .call_tool(CallToolRequestParams::new("key"))
        .await
        .expect("answered");
    assert_eq!(text_of(&plain), "none");
}
