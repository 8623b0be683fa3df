//! The Anthropic Messages API provider against a scripted loopback server (`support::loopback`).
//!
//! Real sockets, so real time: the provider's retry sleeps go to a recorder and each test
//! asserts the exact delays asked for; the stream limits are a few hundred milliseconds.

use crate::support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_errors::anthropic::{
    AnthropicBuilder, AnthropicConfigError, AnthropicError, AnthropicModel,
};
use agent_errors::classify::{find_in_chain, is_overload_error};
use agent_errors::prelude::*;
use agent_errors::retry::RetrySchedule;
use agent_errors::stream::{StreamAccumulator, StreamError, StreamInterrupted};
use agent_errors::{
    ChatRequest, ChatResponse, ErrorKind, Message, RunOptions, ToolCall, ToolResult,
    classify::classify,
    llm::{CallSource, FinishReason, RequestOptions, ResponseFormat, ToolChoice, ToolSpec, Usage},
    run::RunDelta,
    stream::{ChatStream, StreamEvent},
};
use futures_util::StreamExt;
use serde_json::{Value, json};
use support::loopback::{Loopback, Part, Reply, Sleeps};

const MS: fn(u64) -> Duration = Duration::from_millis;
const SECS: fn(u64) -> Duration = Duration::from_secs;

/// A key of no well-known shape: only its registration with the redactor can hide it.
const KEY: &str = "plainkey-anthropic-5e1f0c2b9d";

fn message(content: Value, stop_reason: &str) -> Reply {
    Reply::json(
        200,
        json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
            "content": content, "stop_reason": stop_reason, "stop_sequence": null,
            "usage": {"input_tokens": 12, "output_tokens": 3}
        }),
    )
}

fn text(text: &str) -> Reply {
    message(json!([{"type": "text", "text": text}]), "end_turn")
}

fn error(status: u16, kind: &str, text: &str) -> Reply {
    Reply::json(
        status,
        json!({"type": "error", "error": {"type": kind, "message": text}, "request_id": "req_1"}),
    )
}

fn overloaded() -> Reply {
    error(529, "overloaded_error", "Overloaded")
}

fn builder(server: &Loopback, sleeps: &Sleeps) -> AnthropicBuilder {
    AnthropicModel::builder()
        .base_url(&server.url)
        .model("claude-test")
        .api_key(KEY)
        .timeout(SECS(10))
        .sleeper(sleeps.recorder())
}

fn ask() -> ChatRequest {
    ChatRequest::new(vec![Message::user("hi")], vec![])
}

fn status_of(result: Result<ChatResponse, AnthropicError>) -> u16 {
    match result {
        Err(AnthropicError::Status(e)) => e.status(),
        other => panic!("expected a status error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_plain_answer_with_the_headers_the_api_requires() {
    let server = Loopback::start([message(
        json!([
            {"type": "text", "text": "Hello, "},
            {"type": "thinking", "thinking": "not part of the answer", "signature": "s"},
            {"type": "text", "text": "world"}
        ]),
        "end_turn",
    )])
    .await;
    let sleeps = Sleeps::default();
    let model = builder(&server, &sleeps).build().unwrap();

    let request = ChatRequest::new(
        vec![
            Message::system("Be brief."),
            Message::user("Say hello."),
            Message::system("Never shout."),
        ],
        vec![],
    );
    let reply = model.complete(&request).await.unwrap();
    assert_eq!(reply.text.as_deref(), Some("Hello, world"));
    assert_eq!(reply.finish_reason, Some(FinishReason::Stop));
    assert_eq!(reply.usage, Some(Usage::new(12, 3)));
    assert!(reply.tool_calls.is_empty());

    let seen = &server.seen()[0];
    assert_eq!(seen.header("x-api-key"), Some(KEY));
    assert_eq!(seen.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(seen.header("authorization"), None);
    assert_eq!(
        seen.body,
        json!({
            "model": "claude-test",
            "max_tokens": 4096,
            "system": "Be brief.\n\nNever shout.",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Say hello."}]}]
        })
    );
    assert!(sleeps.taken().is_empty());
    assert_eq!(model.name(), "claude-test");
    assert_eq!(model.provider_name(), Some("anthropic"));
}

#[derive(Debug, thiserror::Error)]
#[error("cannot divide {0} by zero")]
struct DivideByZero(i64);

/// Divide a by b.
#[tool(on_error(execution = escalate))]
async fn divide(a: i64, b: i64) -> Result<i64, DivideByZero> {
    if b == 0 {
        Err(DivideByZero(a))
    } else {
        Ok(a / b)
    }
}

#[tokio::test]
async fn tool_calls_round_trip_with_is_error_on_the_failed_result() {
    let server = Loopback::start([
        message(
            json!([
                {"type": "text", "text": "Dividing both."},
                {"type": "tool_use", "id": "toolu_1", "name": "divide", "input": {"a": 6, "b": 3}},
                {"type": "tool_use", "id": "toolu_2", "name": "divide", "input": {"a": 1, "b": 0}}
            ]),
            "tool_use",
        ),
        text("6/3 is 2; 1/0 has no answer."),
    ])
    .await;
    let model = builder(&server, &Sleeps::default()).build().unwrap();
    let agent = Agent::builder("divider")
        .model(model)
        .system_prompt("Use the divide tool.")
        .tools(tools![divide])
        .build()
        .unwrap();

    let outcome = agent.run_with_report("What are 6/3 and 1/0?").await;
    assert_eq!(outcome.result.unwrap(), "6/3 is 2; 1/0 has no answer.");
    assert_eq!(outcome.report.tool_calls, 2);

    let first = server.body(0);
    assert_eq!(first["system"], "Use the divide tool.");
    let tool = &first["tools"][0];
    assert_eq!(tool["name"], "divide");
    assert_eq!(tool["description"], "Divide a by b.");
    assert_eq!(tool["input_schema"]["properties"]["a"]["type"], "integer");
    assert!(tool.get("parameters").is_none() && first.get("tool_choice").is_none());

    let second = server.body(1);
    let messages = second["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3, "{messages:#?}");
    assert_eq!(
        messages[1],
        json!({"role": "assistant", "content": [
            {"type": "text", "text": "Dividing both."},
            {"type": "tool_use", "id": "toolu_1", "name": "divide", "input": {"a": 6, "b": 3}},
            {"type": "tool_use", "id": "toolu_2", "name": "divide", "input": {"a": 1, "b": 0}}
        ]})
    );
    let results = messages[2]["content"].as_array().unwrap();
    assert_eq!(
        messages[2]["role"], "user",
        "both results share one user turn"
    );
    assert_eq!(results.len(), 2);
    assert_eq!(
        results[0],
        json!({"type": "tool_result", "tool_use_id": "toolu_1", "content": "2", "is_error": false})
    );
    assert_eq!(results[1]["type"], "tool_result");
    assert_eq!(results[1]["tool_use_id"], "toolu_2");
    assert_eq!(results[1]["is_error"], true);
    assert!(
        results[1]["content"]
            .as_str()
            .unwrap()
            .contains("cannot divide 1 by zero"),
        "{results:#?}"
    );
}

#[tokio::test]
async fn arguments_that_are_not_an_object_are_sent_wrapped_never_broken() {
    let server = Loopback::start([text("ok")]).await;
    let model = builder(&server, &Sleeps::default()).build().unwrap();
    let broken = ToolCall::new("toolu_1", "divide", r#"{"a": 1, "b""#);
    let empty = ToolCall::new("toolu_2", "now", "");
    let request = ChatRequest::new(
        vec![
            Message::user("go"),
            Message::assistant(None, vec![broken.clone(), empty.clone()]),
            Message::Tool(ToolResult::error(
                &broken,
                "invalid_args: EOF while parsing",
            )),
            Message::Tool(ToolResult::ok(&empty, "12:00")),
        ],
        vec![],
    );
    model.complete(&request).await.unwrap();
    assert_eq!(
        server.body(0)["messages"][1]["content"],
        json!([
            {"type": "tool_use", "id": "toolu_1", "name": "divide",
             "input": {"raw_arguments": r#"{"a": 1, "b""#}},
            {"type": "tool_use", "id": "toolu_2", "name": "now", "input": {}}
        ])
    );
}

fn divide_spec() -> ToolSpec {
    ToolSpec {
        name: "divide".into(),
        description: "Divide a by b.".into(),
        parameters: json!({"type": "object", "properties": {"a": {"type": "integer"}}}),
    }
}

#[tokio::test]
async fn request_options_are_mapped_to_the_messages_api() {
    let server = Loopback::start([text("{}"), text("ok"), text("ok"), text("ok")]).await;
    let model = builder(&server, &Sleeps::default()).build().unwrap();
    let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}},
                        "required": ["n"], "additionalProperties": false});
    let with_tools = |options: RequestOptions| {
        ChatRequest::new(vec![Message::user("go")], vec![divide_spec()]).with_options(options)
    };

    let all = RequestOptions::new()
        .temperature(0.2)
        .top_p(0.9)
        .stop(["END", "STOP"])
        .seed(7)
        .tool_choice(ToolChoice::Required)
        .parallel_tool_calls(false)
        .response_format(ResponseFormat::JsonSchema {
            name: "count".into(),
            schema: schema.clone(),
            strict: true,
        });
    model
        .complete(&with_tools(all).with_max_tokens(Some(100)))
        .await
        .unwrap();
    let body = server.body(0);
    assert_eq!(body["max_tokens"], 100);
    assert_eq!(body["temperature"], 0.2, "sent as written, not widened");
    assert_eq!(body["top_p"], 0.9);
    assert_eq!(body["stop_sequences"], json!(["END", "STOP"]));
    assert_eq!(
        body["tool_choice"],
        json!({"type": "any", "disable_parallel_tool_use": true})
    );
    assert_eq!(
        body["output_config"],
        json!({"format": {"type": "json_schema", "schema": schema}})
    );
    assert!(body.get("seed").is_none(), "the API has no seed");

    let named = RequestOptions::new().tool_choice(ToolChoice::Tool("divide".into()));
    model.complete(&with_tools(named)).await.unwrap();
    assert_eq!(
        server.body(1)["tool_choice"],
        json!({"type": "tool", "name": "divide"})
    );

    let none = RequestOptions::new()
        .tool_choice(ToolChoice::None)
        .parallel_tool_calls(false)
        .response_format(ResponseFormat::JsonObject);
    model.complete(&with_tools(none)).await.unwrap();
    let body = server.body(2);
    assert_eq!(body["tool_choice"], json!({"type": "none"}));
    assert!(
        body.get("output_config").is_none(),
        "no 'any JSON object' mode"
    );

    let without_tools = ask().with_options(
        RequestOptions::new()
            .tool_choice(ToolChoice::Auto)
            .parallel_tool_calls(false),
    );
    model.complete(&without_tools).await.unwrap();
    let body = server.body(3);
    assert!(body.get("tool_choice").is_none() && body.get("tools").is_none());
    assert!(body.get("stop_sequences").is_none() && body.get("temperature").is_none());
}

#[tokio::test]
async fn an_overload_is_retried_for_the_main_agent_then_succeeds() {
    let server = Loopback::start([overloaded(), overloaded(), text("made it")]).await;
    let sleeps = Sleeps::default();
    let model = builder(&server, &sleeps).build().unwrap();

    let reply = model.complete(&ask()).await.unwrap();
    assert_eq!(reply.text.as_deref(), Some("made it"));
    assert_eq!(server.requests(), 3);
    assert_eq!(sleeps.taken(), [MS(250), MS(500)]);
}

#[tokio::test]
async fn an_overload_fails_fast_for_background_calls_as_a_529() {
    let server = Loopback::start([overloaded(), text("never asked")]).await;
    let sleeps = Sleeps::default();
    let model = builder(&server, &sleeps).build().unwrap();

    let error = model
        .chat(&ask().with_source(CallSource::BACKGROUND))
        .await
        .unwrap_err();
    assert_eq!(server.requests(), 1);
    assert!(sleeps.taken().is_empty());
    assert!(is_overload_error(&*error));
    let http = find_in_chain::<HttpError>(&*error).unwrap();
    assert_eq!((http.status(), http.message()), (529, "Overloaded"));
    let Some(AnthropicError::Status(status)) = error.downcast_ref() else {
        panic!("expected a status error, got {error:?}");
    };
    assert_eq!(status.code(), Some("overloaded_error"));
}

#[tokio::test]
async fn a_rate_limit_waits_as_long_as_retry_after_says() {
    let server = Loopback::start([
        error(
            429,
            "rate_limit_error",
            "Number of requests has exceeded your rate limit",
        )
        .with_header("retry-after", "2"),
        text("ok"),
    ])
    .await;
    let sleeps = Sleeps::default();
    let model = builder(&server, &sleeps).build().unwrap();

    assert_eq!(
        model.complete(&ask()).await.unwrap().text.as_deref(),
        Some("ok")
    );
    assert_eq!(server.requests(), 2);
    assert_eq!(sleeps.taken(), [SECS(2)]);
}

#[tokio::test]
async fn a_context_overflow_shrinks_max_tokens_once_when_that_helps() {
    let overflow = error(
        400,
        "invalid_request_error",
        "input length and `max_tokens` exceed context limit: 195000 + 8192 > 200000, decrease \
         input length or `max_tokens` and try again",
    );
    let server = Loopback::start([overflow, text("short answer")]).await;
    let sleeps = Sleeps::default();
    let model = builder(&server, &sleeps).max_tokens(8192).build().unwrap();

    let reply = model.complete(&ask()).await.unwrap();
    assert_eq!(reply.text.as_deref(), Some("short answer"));
    assert_eq!(server.body(0)["max_tokens"], 8192);
    assert_eq!(server.body(1)["max_tokens"], 5000);
    assert!(
        sleeps.taken().is_empty(),
        "a fixed request needs no backoff"
    );
}

#[tokio::test]
async fn a_prompt_too_long_for_the_window_is_surfaced_with_its_numbers() {
    let server = Loopback::start([
        error(
            400,
            "invalid_request_error",
            "prompt is too long: 208656 tokens > 200000 maximum",
        ),
        text("never asked"),
    ])
    .await;
    let model = builder(&server, &Sleeps::default()).build().unwrap();

    let error = model.complete(&ask()).await.unwrap_err();
    let AnthropicError::Status(status) = &error else {
        panic!("expected the 400, got {error:?}");
    };
    assert_eq!(status.status(), 400);
    assert_eq!(status.code(), Some("invalid_request_error"));
    let overflow = status
        .context_overflow()
        .expect("read as a context overflow");
    assert_eq!(
        (overflow.max_context, overflow.input_tokens),
        (200000, 208656)
    );
    assert_eq!(server.requests(), 1, "no smaller max_tokens can help");
    assert_eq!(classify(&error).kind, ErrorKind::Validation);
}

fn counting_refresh(
    calls: &Arc<AtomicU32>,
    key: Result<&'static str, &'static str>,
) -> impl Fn() -> std::future::Ready<Result<String, BoxError>> + Send + Sync + 'static {
    let calls = calls.clone();
    move || {
        calls.fetch_add(1, Ordering::SeqCst);
        std::future::ready(key.map(str::to_owned).map_err(BoxError::from))
    }
}

#[tokio::test]
async fn unauthorized_refreshes_the_key_once_and_keeps_it() {
    let fresh = "freshkey-anthropic-7c1d93aa0e";
    let server = Loopback::start([
        error(401, "authentication_error", "invalid x-api-key"),
        text("first"),
        text("second"),
    ])
    .await;
    let calls = Arc::new(AtomicU32::new(0));
    let model = builder(&server, &Sleeps::default())
        .credential_refresh(counting_refresh(&calls, Ok(fresh)))
        .build()
        .unwrap();

    assert_eq!(
        model.complete(&ask()).await.unwrap().text.as_deref(),
        Some("first")
    );
    assert_eq!(
        model.complete(&ask()).await.unwrap().text.as_deref(),
        Some("second")
    );
    let keys: Vec<_> = server
        .seen()
        .iter()
        .map(|s| s.header("x-api-key").map(str::to_owned))
        .collect();
    assert_eq!(
        keys,
        [Some(KEY.into()), Some(fresh.into()), Some(fresh.into())]
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let shown = agent_errors::redact::redact(&format!("upstream refused {fresh}")).into_owned();
    assert!(
        !shown.contains(fresh),
        "the refreshed key is redacted: {shown}"
    );
}

#[tokio::test]
async fn a_second_401_is_returned_after_one_refresh() {
    let server = Loopback::start([
        error(401, "authentication_error", "invalid x-api-key"),
        error(401, "authentication_error", "invalid x-api-key"),
        text("never asked"),
    ])
    .await;
    let calls = Arc::new(AtomicU32::new(0));
    let model = builder(&server, &Sleeps::default())
        .credential_refresh(counting_refresh(&calls, Ok("freshkey-anthropic-0000aaaa")))
        .build()
        .unwrap();

    assert_eq!(status_of(model.complete(&ask()).await), 401);
    assert_eq!(server.requests(), 2);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_exhausted_credit_balance_is_not_retried() {
    let server = Loopback::start([
        error(
            400,
            "invalid_request_error",
            "Your credit balance is too low to access the Anthropic API. Please go to Plans & \
             Billing to upgrade or purchase credits.",
        ),
        error(429, "rate_limit_error", "Your credit balance is too low.")
            .with_header("retry-after", "1"),
        text("never asked"),
    ])
    .await;
    let sleeps = Sleeps::default();
    let model = builder(&server, &sleeps).build().unwrap();

    for expected in [400, 429] {
        let error = model.chat(&ask()).await.unwrap_err();
        let c = classify(&*error);
        assert_eq!(c.kind, ErrorKind::Quota, "{expected}");
        assert!(!c.is_retryable(), "{expected}");
        assert_eq!(c.status, Some(expected));
    }
    assert_eq!(server.requests(), 2);
    assert!(sleeps.taken().is_empty());
}

#[tokio::test]
async fn error_types_are_read_into_the_classification() {
    let cases = [
        (403, "permission_error", ErrorKind::Auth),
        (404, "not_found_error", ErrorKind::NotFound),
        (413, "request_too_large", ErrorKind::Validation),
        (400, "invalid_request_error", ErrorKind::Validation),
    ];
    let server = Loopback::start(
        cases
            .iter()
            .map(|(status, kind, _)| error(*status, kind, "no")),
    )
    .await;
    let sleeps = Sleeps::default();
    let model = builder(&server, &sleeps).build().unwrap();
    for (status, kind, expected) in cases {
        let error = model.chat(&ask()).await.unwrap_err();
        let Some(AnthropicError::Status(e)) = error.downcast_ref() else {
            panic!("expected a status error, got {error:?}");
        };
        assert_eq!((e.status(), e.code()), (status, Some(kind)));
        assert_eq!(classify(&*error).kind, expected, "{kind}");
    }
    assert_eq!(server.requests(), 4, "none of them is retried");
    assert!(sleeps.taken().is_empty());
}

#[tokio::test]
async fn finish_reasons_and_usage_with_cache_tokens() {
    let with_usage = |stop: &str| {
        Reply::json(
            200,
            json!({"content": [{"type": "text", "text": "x"}], "stop_reason": stop,
                   "usage": {"input_tokens": 3, "cache_creation_input_tokens": 100,
                             "cache_read_input_tokens": 1000, "output_tokens": 9}}),
        )
    };
    let reasons = [
        ("end_turn", FinishReason::Stop),
        ("stop_sequence", FinishReason::Stop),
        ("max_tokens", FinishReason::Length),
        ("tool_use", FinishReason::ToolCalls),
        ("refusal", FinishReason::Refusal),
        ("pause_turn", FinishReason::Other("pause_turn".into())),
    ];
    let server = Loopback::start(reasons.iter().map(|(stop, _)| with_usage(stop))).await;
    let model = builder(&server, &Sleeps::default()).build().unwrap();
    for (stop, expected) in reasons {
        let reply = model.complete(&ask()).await.unwrap();
        assert_eq!(reply.finish_reason, Some(expected), "{stop}");
        assert_eq!(reply.usage, Some(Usage::new(1103, 9)));
    }
}

#[tokio::test]
async fn the_key_and_the_base_url_credentials_never_show() {
    let server = Loopback::start([error(
        401,
        "authentication_error",
        &format!("invalid x-api-key: {KEY}"),
    )])
    .await;
    let builder = builder(&server, &Sleeps::default());
    let shown = format!("{builder:?}");
    assert!(!shown.contains(KEY), "{shown}");
    let model = builder.build().unwrap();
    assert!(!format!("{model:?}").contains(KEY));

    let error = model.chat(&ask()).await.unwrap_err();
    let shown = format!("{error:?} {error} {:?}", classify(&*error));
    assert!(!shown.contains(KEY), "{shown}");
    let Some(AnthropicError::Status(status)) = error.downcast_ref() else {
        panic!("expected a status error, got {error:?}");
    };
    assert!(
        status.body().contains(KEY),
        "the raw body stays available, as untrusted text"
    );

    let url = "https://bob:hunter2hunter2@llm.example.com?api_key=abcdef0123456789";
    let builder = AnthropicModel::builder().base_url(url).model("m");
    let model = builder.build().unwrap();
    let shown = format!("{model:?} {}", model.url());
    assert!(
        !shown.contains("hunter2hunter2") && !shown.contains("abcdef0123456789"),
        "{shown}"
    );
    let bad = AnthropicModel::builder()
        .base_url("ftp://bob:hunter2hunter2@host/")
        .model("m")
        .build()
        .unwrap_err();
    assert!(matches!(bad, AnthropicConfigError::InvalidBaseUrl { .. }));
    assert!(!bad.to_string().contains("hunter2hunter2"), "{bad}");
}

/// A 200 whose body is not a message (here an error object a gateway passed through) is an
/// invalid answer, never an empty one the agent would take for the model's final word.
#[tokio::test]
async fn a_success_status_without_a_message_is_an_invalid_answer() {
    let server = Loopback::start([
        Reply::json(
            200,
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ),
        Reply::json(200, json!({})),
    ])
    .await;
    let model = builder(&server, &Sleeps::default()).build().unwrap();
    for _ in 0..2 {
        let result = model.complete(&ask()).await;
        assert!(
            matches!(result, Err(AnthropicError::InvalidResponse { .. })),
            "{result:?}"
        );
    }
}

/// The provider's message is what an error's text shows (`HTTP 500: ...`): escape sequences
/// and the key never reach a log through it; the raw body stays on `body()`.
#[tokio::test]
async fn an_error_message_is_shown_scrubbed_and_the_body_kept_raw() {
    let hostile = format!("\u{1b}]0;pwned\u{7}boom\u{1b}[2J with key {KEY}\nsecond line");
    let server = Loopback::start([error(400, "invalid_request_error", &hostile)]).await;
    let model = builder(&server, &Sleeps::default()).build().unwrap();
    let Err(AnthropicError::Status(status)) = model.complete(&ask()).await else {
        panic!("expected a status error");
    };
    let shown = status.http().to_string();
    assert!(
        !shown.contains('\u{1b}') && !shown.contains(KEY) && !shown.contains('\n'),
        "{shown:?}"
    );
    assert!(
        shown.contains("boom") && shown.contains("second line"),
        "{shown}"
    );
    assert!(status.body().contains(KEY) && status.body().contains(r"\u001b"));
}

/// reqwest puts the request's URL in its errors; credentials in the base URL must not reach a
/// log through a connection error's message or `Debug`.
#[tokio::test]
async fn a_connection_error_does_not_show_the_base_url_credentials() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let model = AnthropicModel::builder()
        .base_url(format!(
            "http://bob:hunter2hunter2@127.0.0.1:{port}/?api_key=abcdef0123456789"
        ))
        .model("m")
        .sleeper(Sleeps::default().recorder())
        .build()
        .unwrap();
    let error = model.chat(&ask()).await.unwrap_err();
    assert!(matches!(
        error.downcast_ref(),
        Some(AnthropicError::Connection { .. })
    ));
    let mut shown = format!("{error:?}");
    let mut level: Option<&(dyn std::error::Error + 'static)> = Some(&*error);
    while let Some(e) = level {
        shown.push_str(&format!(" / {e}"));
        level = e.source();
    }
    assert!(
        !shown.contains("hunter2hunter2") && !shown.contains("abcdef0123456789"),
        "{shown}"
    );
}

#[tokio::test]
async fn configured_from_variables_with_the_key_optional() {
    let server = Loopback::start([text("local")]).await;
    let vars = [
        ("ANTHROPIC_BASE_URL", format!("{}/", server.url)),
        ("AGENT_ERRORS_MODEL", "claude-local".to_owned()),
        ("ANTHROPIC_API_KEY", String::new()),
    ];
    let lookup = |name: &str| {
        vars.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.clone())
    };
    let model = AnthropicBuilder::from_vars(lookup).build().unwrap();
    assert_eq!(model.url(), format!("{}/v1/messages", server.url));
    model.complete(&ask()).await.unwrap();
    let seen = &server.seen()[0];
    assert_eq!(seen.header("x-api-key"), None, "an empty key sends none");
    assert_eq!(seen.body["model"], "claude-local");

    assert!(matches!(
        AnthropicBuilder::from_vars(|_| None).build(),
        Err(AnthropicConfigError::MissingModel)
    ));
    assert!(matches!(
        AnthropicModel::builder().model("m").max_tokens(0).build(),
        Err(AnthropicConfigError::ZeroMaxTokens)
    ));
    assert!(matches!(
        AnthropicModel::builder()
            .model("m")
            .header("bad header", "x")
            .build(),
        Err(AnthropicConfigError::InvalidHeader { .. })
    ));
}

// Streaming.

fn event(name: &str, data: Value) -> Part {
    Part::Raw(format!("event: {name}\ndata: {data}\n\n"))
}

fn start(input: u64) -> Part {
    event(
        "message_start",
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
            "role": "assistant", "content": [], "model": "claude-test", "stop_reason": null,
            "usage": {"input_tokens": input, "output_tokens": 1}}}),
    )
}

fn ping() -> Part {
    event("ping", json!({"type": "ping"}))
}

fn text_block(index: usize) -> Part {
    event(
        "content_block_start",
        json!({"type": "content_block_start", "index": index,
               "content_block": {"type": "text", "text": ""}}),
    )
}

fn text_delta(index: usize, text: &str) -> Part {
    event(
        "content_block_delta",
        json!({"type": "content_block_delta", "index": index,
               "delta": {"type": "text_delta", "text": text}}),
    )
}

fn tool_block(index: usize, id: &str, name: &str) -> Part {
    event(
        "content_block_start",
        json!({"type": "content_block_start", "index": index,
               "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
    )
}

fn json_delta(index: usize, partial: &str) -> Part {
    event(
        "content_block_delta",
        json!({"type": "content_block_delta", "index": index,
               "delta": {"type": "input_json_delta", "partial_json": partial}}),
    )
}

fn block_stop(index: usize) -> Part {
    event(
        "content_block_stop",
        json!({"type": "content_block_stop", "index": index}),
    )
}

fn message_delta(stop_reason: &str, output: u64) -> Part {
    event(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop_reason,
               "stop_sequence": null}, "usage": {"output_tokens": output}}),
    )
}

fn message_stop() -> Part {
    event("message_stop", json!({"type": "message_stop"}))
}

fn overloaded_event() -> Part {
    event(
        "error",
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    )
}

/// A whole streamed text answer.
fn streamed_text(text: &str) -> Reply {
    Reply::Stream(vec![
        start(10),
        text_block(0),
        text_delta(0, text),
        block_stop(0),
        message_delta("end_turn", 2),
        message_stop(),
    ])
}

fn stream_model(server: &Loopback) -> AnthropicModel {
    builder(server, &Sleeps::default())
        .first_event_timeout(MS(300))
        .stream_idle_timeout(MS(300))
        .transport_retry(
            RetrySchedule::attempts(2)
                .unwrap()
                .with_initial(MS(1))
                .with_jitter(0.0),
        )
        .build()
        .unwrap()
}

/// For a test that sends megabytes: time limits a loaded machine cannot hit.
fn patient_stream_model(server: &Loopback) -> AnthropicModel {
    let limit = SECS(60);
    let builder = builder(server, &Sleeps::default()).timeout(limit);
    let builder = builder
        .first_event_timeout(limit)
        .stream_idle_timeout(limit);
    builder.build().unwrap()
}

/// Reads a whole stream as the agent does: events, then the first error.
async fn drain(mut stream: ChatStream<'_>) -> (Vec<StreamEvent>, Option<BoxError>) {
    let mut events = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(event) => events.push(event),
            Err(error) => return (events, Some(error)),
        }
    }
    (events, None)
}

/// The cause of a stream that ended before its final event; fails on any other error.
fn end_cause(error: &Option<BoxError>) -> &(dyn std::error::Error + 'static) {
    match stream_error(error) {
        StreamError::EndedEarly { source } => &**source,
        other => panic!("expected the stream to end early, got {other:?}"),
    }
}

fn eof(cause: &(dyn std::error::Error + 'static)) -> bool {
    cause
        .downcast_ref::<std::io::Error>()
        .is_some_and(|e| e.kind() == std::io::ErrorKind::UnexpectedEof)
}

fn stream_error(error: &Option<BoxError>) -> &StreamError {
    error
        .as_ref()
        .and_then(|e| e.downcast_ref::<StreamError>())
        .unwrap_or_else(|| panic!("expected a stream error, got {error:?}"))
}

#[tokio::test]
async fn streamed_text_arrives_as_deltas_with_usage_and_finish() {
    let server = Loopback::start([Reply::Stream(vec![
        start(25),
        ping(),
        text_block(0),
        text_delta(0, "Hel"),
        ping(),
        text_delta(0, "lo"),
        block_stop(0),
        message_delta("end_turn", 7),
        message_stop(),
    ])])
    .await;
    let (events, error) = drain(stream_model(&server).stream(&ask()).await.unwrap()).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(
        events,
        [
            StreamEvent::TextDelta("Hel".into()),
            StreamEvent::TextDelta("lo".into()),
            StreamEvent::Usage(Usage::new(25, 7)),
            StreamEvent::Finish(FinishReason::Stop),
        ]
    );
    let seen = &server.seen()[0];
    assert_eq!(seen.body["stream"], true);
    assert_eq!(seen.header("x-api-key"), Some(KEY));
    assert_eq!(seen.header("anthropic-version"), Some("2023-06-01"));
}

#[tokio::test]
async fn streamed_tool_calls_split_across_many_fragments_are_joined() {
    let mut parts = vec![
        start(40),
        text_block(0),
        text_delta(0, "Adding."),
        block_stop(0),
        tool_block(1, "toolu_1", "add"),
    ];
    parts.extend(
        ["", "{\"", "a\":", " 1,", " \"b\"", ": 2}"]
            .iter()
            .map(|piece| json_delta(1, piece)),
    );
    parts.extend([
        block_stop(1),
        tool_block(2, "toolu_2", "now"),
        json_delta(2, ""),
        block_stop(2),
        message_delta("tool_use", 30),
        message_stop(),
    ]);
    let server = Loopback::start([Reply::Stream(parts)]).await;
    let (events, error) = drain(stream_model(&server).stream(&ask()).await.unwrap()).await;
    assert!(error.is_none(), "{error:?}");
    assert!(events.contains(&StreamEvent::ToolCallFinished { index: 1 }));
    let mut answer = StreamAccumulator::new();
    events.iter().for_each(|e| answer.push(e));
    let response = answer.into_response();
    assert_eq!(response.text.as_deref(), Some("Adding."));
    assert_eq!(
        response.tool_calls,
        [
            ToolCall::new("toolu_1", "add", r#"{"a": 1, "b": 2}"#),
            ToolCall::new("toolu_2", "now", "{}")
        ]
    );
    assert_eq!(response.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(response.usage, Some(Usage::new(40, 30)));
}

#[tokio::test]
async fn a_streamed_length_finish_is_reported() {
    let server = Loopback::start([Reply::Stream(vec![
        start(5),
        text_block(0),
        text_delta(0, "The answer is"),
        message_delta("max_tokens", 4096),
        message_stop(),
    ])])
    .await;
    let (events, _) = drain(stream_model(&server).stream(&ask()).await.unwrap()).await;
    assert_eq!(
        events[1..],
        [
            StreamEvent::Usage(Usage::new(5, 4096)),
            StreamEvent::Finish(FinishReason::Length)
        ]
    );
}

#[tokio::test]
async fn a_stream_dropped_before_any_content_is_retried() {
    let server =
        Loopback::start([Reply::Stream(vec![start(5), ping()]), streamed_text("ok")]).await;
    let (events, error) = drain(stream_model(&server).stream(&ask()).await.unwrap()).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(events[0], StreamEvent::TextDelta("ok".into()));
    assert_eq!(server.requests(), 2);
}

#[tokio::test]
async fn a_drop_after_some_events_is_an_error_inside_the_stream() {
    let server = Loopback::start([Reply::Stream(vec![
        start(5),
        text_block(0),
        text_delta(0, "Hel"),
        text_delta(0, "lo"),
    ])])
    .await;
    let (events, error) = drain(stream_model(&server).stream(&ask()).await.unwrap()).await;
    assert_eq!(events.len(), 2);
    assert!(eof(end_cause(&error)), "{error:?}");
    assert_eq!(
        classify(&**error.as_ref().unwrap()).kind,
        ErrorKind::Transient
    );
    assert_eq!(
        server.requests(),
        1,
        "output began: the provider does not retry"
    );
}

#[tokio::test]
async fn a_stream_truncated_mid_event_is_not_complete() {
    let server = Loopback::start([Reply::Stream(vec![
        start(5),
        text_block(0),
        text_delta(0, "Hel"),
        Part::Raw(
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"ind".into(),
        ),
    ])])
    .await;
    let (_, error) = drain(stream_model(&server).stream(&ask()).await.unwrap()).await;
    assert!(eof(end_cause(&error)), "{error:?}");
}

#[tokio::test]
async fn a_read_error_after_output_began_ends_the_stream_early_with_the_transport_error() {
    let server = Loopback::start([Reply::Stream(vec![
        start(5),
        text_block(0),
        text_delta(0, "Hel"),
        Part::Pause(MS(100)),
        Part::Reset,
    ])])
    .await;
    let (events, error) = drain(stream_model(&server).stream(&ask()).await.unwrap()).await;
    assert_eq!(events, [StreamEvent::TextDelta("Hel".into())]);
    let cause = end_cause(&error);
    assert!(cause.is::<reqwest::Error>(), "{cause:?}");
    assert!(classify(&**error.as_ref().unwrap()).is_retryable());
    assert_eq!(
        server.requests(),
        1,
        "output began: the provider does not retry"
    );
}

#[tokio::test]
async fn a_read_error_before_any_content_is_retried_and_then_a_stream_error() {
    let reset = || Reply::Stream(vec![start(5), ping(), Part::Pause(MS(100)), Part::Reset]);
    let server = Loopback::start([reset(), reset()]).await;
    let error = stream_model(&server).stream(&ask()).await.err().unwrap();
    assert_eq!(server.requests(), 2);
    let AnthropicError::Stream(StreamError::EndedEarly { source }) = &error else {
        panic!("expected the stream to end early, got {error:?}");
    };
    assert!(source.is::<reqwest::Error>(), "{source:?}");
}

/// A server that sends a delta every 100 ms, well inside the 300 ms idle limit, for 1.5 s.
fn drip() -> Reply {
    let mut parts = vec![start(5), text_block(0)];
    for _ in 0..15 {
        parts.extend([text_delta(0, "."), Part::Pause(MS(100))]);
    }
    parts.extend([block_stop(0), message_delta("end_turn", 15), message_stop()]);
    Reply::Stream(parts)
}

fn drip_model(server: &Loopback, deadline: Option<Duration>) -> AnthropicModel {
    builder(server, &Sleeps::default())
        .first_event_timeout(MS(300))
        .stream_idle_timeout(MS(300))
        .stream_deadline(deadline)
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_stream_that_drips_inside_the_idle_limit_ends_at_its_deadline() {
    let server = Loopback::start([drip()]).await;
    let model = drip_model(&server, Some(MS(600)));
    let (_, error) = drain(model.stream(&ask()).await.unwrap()).await;
    let cause = end_cause(&error);
    assert!(
        matches!(cause.downcast_ref(), Some(StreamError::DeadlineExceeded { deadline, .. }) if *deadline == MS(600)),
        "{cause:?}"
    );
    assert_eq!(
        classify(&**error.as_ref().unwrap()).kind,
        ErrorKind::Timeout
    );

    let server = Loopback::start([drip()]).await;
    let (events, error) = drain(drip_model(&server, None).stream(&ask()).await.unwrap()).await;
    assert!(error.is_none(), "no deadline, asked for: {error:?}");
    assert_eq!(
        events.last(),
        Some(&StreamEvent::Finish(FinishReason::Stop))
    );
}

/// The provider's error keeps the errors it wraps in its `source()` chain, so a caller looking
/// for a stream or status error by type finds it, and classification reads what is below.
#[tokio::test]
async fn the_stream_and_status_errors_a_provider_error_wraps_are_in_its_chain() {
    use agent_errors::provider::StatusError;
    use std::error::Error as _;

    let server = Loopback::start([
        Reply::Stream(vec![Part::Hang]),
        Reply::Stream(vec![Part::Hang]),
    ])
    .await;
    let failed = stream_model(&server).stream(&ask()).await.err().unwrap();
    assert!(failed.source().is_some_and(|s| s.is::<StreamError>()));
    assert!(matches!(
        find_in_chain::<StreamError>(&failed),
        Some(StreamError::FirstEventTimeout { .. })
    ));
    assert_eq!(classify(&failed).kind, ErrorKind::Timeout);

    let server = Loopback::start([error(400, "invalid_request_error", "bad request")]).await;
    let model = builder(&server, &Sleeps::default()).build().unwrap();
    let refused = model.complete(&ask()).await.unwrap_err();
    assert!(refused.source().is_some_and(|s| s.is::<StatusError>()));
    assert_eq!(
        find_in_chain::<StatusError>(&refused).map(StatusError::status),
        Some(400)
    );
    assert_eq!(
        find_in_chain::<HttpError>(&refused).map(HttpError::status),
        Some(400)
    );
    assert_eq!(classify(&refused).kind, ErrorKind::Validation);
}

#[tokio::test]
async fn a_malformed_event_is_its_own_error() {
    let server = Loopback::start([Reply::Stream(vec![
        start(5),
        text_block(0),
        text_delta(0, "Hel"),
        Part::Raw("event: content_block_delta\ndata: {oops\n\n".into()),
    ])])
    .await;
    let (_, error) = drain(stream_model(&server).stream(&ask()).await.unwrap()).await;
    assert!(matches!(
        stream_error(&error),
        StreamError::Malformed { data, .. } if data == "{oops"
    ));
}

#[tokio::test]
async fn events_after_message_stop_are_not_read() {
    let server = Loopback::start([Reply::Stream(vec![
        start(5),
        text_block(0),
        text_delta(0, "ok"),
        block_stop(0),
        message_delta("end_turn", 2),
        message_stop(),
        overloaded_event(),
        text_delta(0, "late"),
    ])])
    .await;
    let (events, error) = drain(stream_model(&server).stream(&ask()).await.unwrap()).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(
        events,
        [
            StreamEvent::TextDelta("ok".into()),
            StreamEvent::Usage(Usage::new(5, 2)),
            StreamEvent::Finish(FinishReason::Stop),
        ]
    );
}

/// A server that never stops sending text: the stream ends once it has sent more than any real
/// answer (64 MiB), instead of growing the caller's answer until memory runs out.
#[tokio::test]
async fn an_endless_stream_ends_early_at_its_cap() {
    const CAP: usize = 64 * 1024 * 1024;
    let chunk = "x".repeat(200 * 1024);
    let mut parts = vec![start(5), text_block(0)];
    parts.extend((0..CAP / chunk.len() + 8).map(|_| text_delta(0, &chunk)));
    parts.push(message_stop());
    let server = Loopback::start([Reply::Stream(parts)]).await;
    let (events, error) = drain(patient_stream_model(&server).stream(&ask()).await.unwrap()).await;
    let cause = end_cause(&error);
    assert!(
        matches!(cause.downcast_ref(), Some(StreamError::TooLarge { limit, .. }) if *limit == CAP),
        "{cause:?}"
    );
    let text: usize = events
        .iter()
        .map(|e| match e {
            StreamEvent::TextDelta(t) => t.len(),
            _ => 0,
        })
        .sum();
    assert!(text > CAP / 2 && text <= CAP, "{text} bytes of text read");
}

#[tokio::test]
async fn a_stall_after_output_began_is_a_timeout() {
    let server = Loopback::start([Reply::Stream(vec![
        start(5),
        text_block(0),
        text_delta(0, "Hel"),
        Part::Hang,
    ])])
    .await;
    let (_, error) = drain(stream_model(&server).stream(&ask()).await.unwrap()).await;
    let cause = end_cause(&error);
    assert!(
        matches!(cause.downcast_ref(), Some(StreamError::Stalled { .. })),
        "{cause:?}"
    );
    assert_eq!(
        classify(&**error.as_ref().unwrap()).kind,
        ErrorKind::Timeout
    );
}

#[tokio::test]
async fn pings_alone_do_not_keep_a_stalled_stream_alive() {
    let mut parts = vec![start(5), text_block(0), text_delta(0, "Hel")];
    for _ in 0..4 {
        parts.extend([Part::Pause(MS(150)), ping()]);
    }
    let server = Loopback::start([Reply::Stream(parts)]).await;
    let (_, error) = drain(stream_model(&server).stream(&ask()).await.unwrap()).await;
    let cause = end_cause(&error);
    assert!(
        matches!(cause.downcast_ref(), Some(StreamError::Stalled { .. })),
        "{cause:?}"
    );
}

#[tokio::test]
async fn a_slow_first_event_is_a_timeout_and_retried() {
    let server = Loopback::start([
        Reply::Stream(vec![Part::Pause(MS(1000)), start(5)]),
        streamed_text("ok"),
    ])
    .await;
    let (events, _) = drain(stream_model(&server).stream(&ask()).await.unwrap()).await;
    assert_eq!(events[0], StreamEvent::TextDelta("ok".into()));
    assert_eq!(server.requests(), 2);
}

#[tokio::test]
async fn slow_first_events_that_outlast_the_retries_are_a_timeout() {
    let server = Loopback::start([
        Reply::Stream(vec![Part::Hang]),
        Reply::Stream(vec![Part::Hang]),
    ])
    .await;
    let error = stream_model(&server).stream(&ask()).await.err().unwrap();
    assert!(matches!(
        error,
        AnthropicError::Stream(StreamError::FirstEventTimeout { .. })
    ));
    assert_eq!(classify(&error).kind, ErrorKind::Timeout);
}

#[tokio::test]
async fn an_overload_event_before_any_content_is_retried_like_a_529() {
    let server = Loopback::start([
        Reply::Stream(vec![start(5), ping(), overloaded_event()]),
        streamed_text("ok"),
    ])
    .await;
    let (events, error) = drain(stream_model(&server).stream(&ask()).await.unwrap()).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(events[0], StreamEvent::TextDelta("ok".into()));
    assert_eq!(server.requests(), 2);

    let server = Loopback::start([Reply::Stream(vec![start(5), overloaded_event()])]).await;
    let error = stream_model(&server)
        .stream(&ask().with_source(CallSource::BACKGROUND))
        .await
        .err()
        .unwrap();
    let AnthropicError::Stream(StreamError::ErrorEvent { error_type, http }) = &error else {
        panic!("expected an error event, got {error:?}");
    };
    assert_eq!(
        (error_type.as_str(), http.status()),
        ("overloaded_error", 529)
    );
    assert_eq!(server.requests(), 1, "background work is not retried");
}

#[tokio::test]
async fn an_overload_event_after_output_began_reaches_on_llm_error_as_interrupted() {
    let server = Loopback::start([
        Reply::Stream(vec![
            start(5),
            text_block(0),
            text_delta(0, "Hel"),
            overloaded_event(),
        ]),
        Reply::Stream(vec![
            start(5),
            text_block(0),
            text_delta(0, "Hello"),
            block_stop(0),
            message_delta("end_turn", 1),
            message_stop(),
        ]),
    ])
    .await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    let agent = Agent::builder("streamer")
        .model(stream_model(&server))
        .on_llm_error(move |error, _| {
            let cut = error
                .downcast_ref::<StreamInterrupted>()
                .expect("a typed interruption");
            let cause = cut.cause.downcast_ref::<StreamError>().map(|e| match e {
                StreamError::ErrorEvent { error_type, http } => (error_type.clone(), http.status()),
                other => panic!("expected an error event, got {other:?}"),
            });
            assert!(is_overload_error(error));
            assert_eq!(classify(error).status, Some(529));
            log.lock().unwrap().push((cut.partial_text.clone(), cause));
            LlmErrorDecision::retry(2, MS(1))
        })
        .build()
        .unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    let outcome = agent.run_with("hi", RunOptions::new().stream_to(tx)).await;
    assert_eq!(outcome.result.unwrap(), "Hello");
    assert_eq!(outcome.report.usage, Usage::new(5, 1));
    assert_eq!(
        *seen.lock().unwrap(),
        [("Hel".to_owned(), Some(("overloaded_error".to_owned(), 529)))]
    );
    assert_eq!(server.requests(), 2);
    let mut deltas = Vec::new();
    while let Ok(delta) = rx.try_recv() {
        deltas.push(delta);
    }
    assert_eq!(
        deltas[..3],
        [
            RunDelta::Model(StreamEvent::TextDelta("Hel".into())),
            RunDelta::TurnRestarted {
                turn: 1,
                failed_attempt: 1
            },
            RunDelta::Model(StreamEvent::TextDelta("Hello".into())),
        ]
    );
}

#[tokio::test]
async fn bodies_are_read_only_up_to_a_cap() {
    let huge_answer = format!(
        r#"{{"content": [{{"type": "text", "text": "{}"}}], "stop_reason": "end_turn"}}"#,
        "a".repeat(9 * 1024 * 1024)
    );
    let huge_error = format!(
        r#"{{"type": "error", "error": {{"type": "api_error", "message": "{}"}}}}"#,
        "b".repeat(1024 * 1024)
    );
    let answer = |status: u16, body: String| Reply::Answer {
        status,
        headers: vec![("content-type".into(), "application/json".into())],
        body,
    };
    let server = Loopback::start([answer(200, huge_answer), answer(500, huge_error)]).await;
    let model = builder(&server, &Sleeps::default())
        .transport_retry(RetrySchedule::attempts(1).unwrap())
        .build()
        .unwrap();

    let error = model.complete(&ask()).await.unwrap_err();
    assert!(
        matches!(error, AnthropicError::ResponseTooLarge { limit } if limit == 8 * 1024 * 1024),
        "{error:?}"
    );
    let error = model.complete(&ask()).await.unwrap_err();
    let AnthropicError::Status(status) = &error else {
        panic!("expected a status error, got {error:?}");
    };
    assert_eq!(status.status(), 500);
    assert_eq!(status.body().len(), 64 * 1024, "the body is cut at 64 KiB");
    assert!(
        status.http().message().len() <= 1003,
        "the message is cut too"
    );
}

fn answer_200(body: &str) -> Reply {
    Reply::Answer {
        status: 200,
        headers: vec![("content-type".into(), "application/json".into())],
        body: body.to_owned(),
    }
}

#[tokio::test]
async fn a_200_that_broke_off_or_is_not_json_is_retried_as_transient() {
    let cut_short = r#"{"id": "msg_1", "type": "message", "content": [{"type": "te"#;
    let server = Loopback::start([
        answer_200("<html>502 Bad Gateway</html>"),
        answer_200(cut_short),
        text("whole"),
    ])
    .await;
    let sleeps = Sleeps::default();
    let model = builder(&server, &sleeps).build().unwrap();
    let answer = model.complete(&ask()).await.unwrap();
    assert_eq!(answer.text.as_deref(), Some("whole"));
    assert_eq!(server.requests(), 3);
    assert_eq!(sleeps.taken(), [MS(250), MS(500)]);

    let server = Loopback::start((0..3).map(|_| answer_200(cut_short))).await;
    let model = builder(&server, &Sleeps::default()).build().unwrap();
    let error = model.chat(&ask()).await.unwrap_err();
    assert!(
        matches!(
            error.downcast_ref(),
            Some(AnthropicError::BrokenResponse { .. })
        ),
        "{error:?}"
    );
    assert_eq!(classify(&*error).kind, ErrorKind::Transient);
    assert!(
        classify(&*error).is_retryable(),
        "on_llm_error may retry it"
    );
}

#[tokio::test]
async fn a_200_of_valid_json_in_the_wrong_shape_is_not_retried() {
    let server = Loopback::start([answer_200(r#"{"content": "not a list"}"#), text("never")]).await;
    let sleeps = Sleeps::default();
    let model = builder(&server, &sleeps).build().unwrap();
    let error = model.complete(&ask()).await.unwrap_err();
    assert!(
        matches!(error, AnthropicError::InvalidResponse { .. }),
        "{error:?}"
    );
    assert_eq!(server.requests(), 1);
    assert!(sleeps.taken().is_empty());
}
