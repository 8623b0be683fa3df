//! The OpenAI-compatible provider against a fault-injecting chat-completions server on loopback.
//!
//! Real sockets, real time, but no real waiting: the provider's sleeps go to a recorder, so each
//! test asserts the exact delays asked for. Every scripted response says `Connection: close`, so
//! each request arrives on a fresh connection and a scripted reset can sit anywhere in a script.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_errors::classify::{find_in_chain, is_overload_error};
use agent_errors::openai::{
    OpenAiBuilder, OpenAiConfigError, OpenAiError, OpenAiModel, TOOL_ERROR_PREFIX,
};
use agent_errors::provider::StatusError;
use agent_errors::retry::RetrySchedule;
use agent_errors::{BoxError, ErrorKind, HttpError, classify::classify};
use agent_errors::{
    ChatModel, ChatRequest, Message, ToolCall, ToolResult,
    llm::{CallSource, ToolSpec},
};
use agent_errors::{
    llm::{RequestOptions, ResponseFormat, ToolChoice},
    stream::StreamEvent,
};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};

const MS: fn(u64) -> Duration = Duration::from_millis;
const SECS: fn(u64) -> Duration = Duration::from_secs;

/// What the server does with one request.
enum Reply {
    /// Accept the connection and reset it without answering.
    Reset,
    /// Read the request and never answer.
    Hang,
    /// Answer with this status, headers and body.
    Answer {
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: String,
    },
}

impl Reply {
    fn json(status: u16, body: Value) -> Reply {
        Reply::Answer {
            status,
            headers: vec![("content-type", "application/json".to_owned())],
            body: body.to_string(),
        }
    }

    fn raw(status: u16, body: &str) -> Reply {
        Reply::Answer {
            status,
            headers: Vec::new(),
            body: body.to_owned(),
        }
    }

    fn text(text: &str) -> Reply {
        Reply::json(
            200,
            json!({
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "choices": [{
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop"
                }]
            }),
        )
    }

    fn error(status: u16, code: &str, message: &str) -> Reply {
        Reply::json(
            status,
            json!({"error": {"message": message, "type": "error", "code": code}}),
        )
    }

    /// A streamed answer of one text delta.
    fn sse_text(text: &str) -> Reply {
        let chunk =
            json!({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": "stop"}]});
        Reply::Answer {
            status: 200,
            headers: vec![("content-type", "text/event-stream".to_owned())],
            body: format!("data: {chunk}\n\ndata: [DONE]\n\n"),
        }
    }

    fn with_header(mut self, name: &'static str, value: &str) -> Reply {
        if let Reply::Answer { headers, .. } = &mut self {
            headers.push((name, value.to_owned()));
        }
        self
    }
}

/// One request as the server saw it; `body` is `None` for a connection that was reset.
#[derive(Debug, Clone)]
struct Seen {
    body: Option<Value>,
    authorization: Option<String>,
}

#[derive(Default)]
struct Script {
    replies: Mutex<VecDeque<Reply>>,
    seen: Mutex<Vec<Seen>>,
}

impl Script {
    fn take_reset(&self) -> bool {
        let mut replies = self.replies.lock().unwrap();
        if matches!(replies.front(), Some(Reply::Reset)) {
            replies.pop_front();
            self.seen.lock().unwrap().push(Seen {
                body: None,
                authorization: None,
            });
            true
        } else {
            false
        }
    }
}

/// Hands connections to axum, except those the script says to reset.
struct FaultyListener {
    inner: TcpListener,
    script: Arc<Script>,
}

impl axum::serve::Listener for FaultyListener {
    type Io = TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (TcpStream, SocketAddr) {
        loop {
            let Ok((stream, addr)) = self.inner.accept().await else {
                continue;
            };
            if self.script.take_reset() {
                // Zero linger turns the close into a RST: the client sees a reset, not an EOF.
                let _ = stream.set_zero_linger();
                drop(stream);
                continue;
            }
            return (stream, addr);
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

async fn completions(
    State(script): State<Arc<Script>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    script.seen.lock().unwrap().push(Seen {
        body: serde_json::from_slice(&body).ok(),
        authorization: headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
    });
    let reply = script.replies.lock().unwrap().pop_front();
    match reply {
        Some(Reply::Answer {
            status,
            headers,
            body,
        }) => {
            let mut response = (StatusCode::from_u16(status).unwrap(), body).into_response();
            for (name, value) in headers {
                response.headers_mut().insert(
                    HeaderName::from_static(name),
                    HeaderValue::from_str(&value).unwrap(),
                );
            }
            response
                .headers_mut()
                .insert("connection", HeaderValue::from_static("close"));
            response
        }
        Some(Reply::Hang) => std::future::pending::<Response>().await,
        Some(Reply::Reset) | None => {
            (StatusCode::IM_A_TEAPOT, "unscripted request").into_response()
        }
    }
}

struct FaultServer {
    script: Arc<Script>,
    base_url: String,
}

impl FaultServer {
    async fn start(replies: impl IntoIterator<Item = Reply>) -> FaultServer {
        let script = Arc::new(Script::default());
        script.replies.lock().unwrap().extend(replies);
        let inner = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}/v1", inner.local_addr().unwrap());
        let app = Router::new()
            .route("/v1/chat/completions", post(completions))
            .with_state(script.clone());
        let listener = FaultyListener {
            inner,
            script: script.clone(),
        };
        tokio::spawn(async move { axum::serve(listener, app).await });
        FaultServer { script, base_url }
    }

    fn seen(&self) -> Vec<Seen> {
        self.script.seen.lock().unwrap().clone()
    }

    fn requests(&self) -> usize {
        self.script.seen.lock().unwrap().len()
    }
}

/// Records the delays the provider asks for and returns at once.
#[derive(Clone, Default)]
struct Sleeps(Arc<Mutex<Vec<Duration>>>);

impl Sleeps {
    fn recorder(&self) -> impl Fn(Duration) -> std::future::Ready<()> + Send + Sync + use<> {
        let log = self.0.clone();
        move |delay: Duration| {
            log.lock().unwrap().push(delay);
            std::future::ready(())
        }
    }

    fn taken(&self) -> Vec<Duration> {
        self.0.lock().unwrap().clone()
    }
}

fn builder(server: &FaultServer, sleeps: &Sleeps) -> OpenAiBuilder {
    OpenAiModel::builder()
        .base_url(&server.base_url)
        .model("test-model")
        .api_key("sk-test")
        .timeout(SECS(10))
        .sleeper(sleeps.recorder())
}

fn ask() -> ChatRequest {
    ChatRequest::new(vec![Message::user("hi")], vec![])
}

fn status_of(result: Result<agent_errors::ChatResponse, OpenAiError>) -> u16 {
    match result {
        Err(OpenAiError::Status(e)) => e.status(),
        other => panic!("expected a status error, got {other:?}"),
    }
}

#[tokio::test]
async fn offers_tools_and_sends_the_conversation_in_openai_format() {
    let server = FaultServer::start([Reply::json(
        200,
        json!({"choices": [{"message": {
            "role": "assistant",
            "content": null,
            "tool_calls": [{"id": "call_9", "type": "function",
                            "function": {"name": "count_keys", "arguments": "{\"json\":\"{}\"}"}}]
        }}]}),
    )])
    .await;
    let sleeps = Sleeps::default();
    let model = builder(&server, &sleeps).build().unwrap();

    let schema =
        json!({"type": "object", "properties": {"json": {"type": "string"}}, "required": ["json"]});
    let earlier = ToolCall::new("call_1", "count_keys", r#"{"json":"{\"a\":1}"}"#);
    let request = ChatRequest::new(
        vec![
            Message::system("Count keys."),
            Message::user("How many keys?"),
            Message::assistant(None, vec![earlier.clone()]),
            Message::Tool(ToolResult::error(
                &earlier,
                "invalid_args: expected an object",
            )),
            Message::Tool(ToolResult::ok(&earlier, "1")),
        ],
        vec![ToolSpec {
            name: "count_keys".into(),
            description: "Counts the top-level keys of a JSON object.".into(),
            parameters: schema.clone(),
        }],
    )
    .with_max_tokens(Some(512));

    let reply = model.complete(&request).await.unwrap();
    assert_eq!(reply.text, None);
    assert_eq!(
        reply.tool_calls,
        vec![ToolCall::new("call_9", "count_keys", r#"{"json":"{}"}"#)]
    );

    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].authorization.as_deref(), Some("Bearer sk-test"));
    let body = seen[0].body.clone().unwrap();
    assert_eq!(body["model"], "test-model");
    assert_eq!(body["max_tokens"], 512);
    assert_eq!(
        body["tools"],
        json!([{"type": "function", "function": {
            "name": "count_keys",
            "description": "Counts the top-level keys of a JSON object.",
            "parameters": schema
        }}])
    );
    assert_eq!(
        body["messages"],
        json!([
            {"role": "system", "content": "Count keys."},
            {"role": "user", "content": "How many keys?"},
            {"role": "assistant", "content": null, "tool_calls": [{
                "id": "call_1", "type": "function",
                "function": {"name": "count_keys", "arguments": r#"{"json":"{\"a\":1}"}"#}
            }]},
            {"role": "tool", "tool_call_id": "call_1",
             "content": format!("{TOOL_ERROR_PREFIX}invalid_args: expected an object")},
            {"role": "tool", "tool_call_id": "call_1", "content": "1"}
        ])
    );
    assert!(sleeps.taken().is_empty());
}

#[tokio::test]
async fn broken_tool_arguments_pass_through_untouched() {
    let broken = r#"{"json": "{\"a\": 1"#;
    let server = FaultServer::start([Reply::json(
        200,
        json!({"choices": [{"message": {"role": "assistant", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "count_keys", "arguments": broken}}
        ]}}]}),
    )])
    .await;
    let model = builder(&server, &Sleeps::default()).build().unwrap();

    let reply = model.complete(&ask()).await.unwrap();
    assert_eq!(reply.tool_calls[0].arguments, broken);
    assert_eq!(server.requests(), 1);
}

#[tokio::test]
async fn a_reset_connection_is_retried_after_250ms() {
    let server = FaultServer::start([Reply::Reset, Reply::text("hello")]).await;
    let sleeps = Sleeps::default();
    let model = builder(&server, &sleeps).build().unwrap();

    let reply = model.complete(&ask()).await.unwrap();
    assert_eq!(reply.text.as_deref(), Some("hello"));
    assert_eq!(server.requests(), 2);
    assert_eq!(sleeps.taken(), [MS(250)]);
}

#[tokio::test]
async fn resets_that_outlast_the_retries_return_the_connection_error() {
    let server = FaultServer::start([
        Reply::Reset,
        Reply::Reset,
        Reply::Reset,
        Reply::text("late"),
    ])
    .await;
    let sleeps = Sleeps::default();
    let model = builder(&server, &sleeps).build().unwrap();

    let error = model.complete(&ask()).await.unwrap_err();
    let OpenAiError::Connection { source } = &error else {
        panic!("expected a connection error, got {error:?}");
    };
    assert!(!source.is_timeout());
    assert_eq!(server.requests(), 3);
    assert_eq!(sleeps.taken(), [MS(250), MS(500)]);
}

#[tokio::test]
async fn service_unavailable_then_ok() {
    let server = FaultServer::start([
        Reply::error(503, "unavailable", "try again"),
        Reply::text("ok"),
    ])
    .await;
    let sleeps = Sleeps::default();
    let model = builder(&server, &sleeps).build().unwrap();

    assert_eq!(
        model.complete(&ask()).await.unwrap().text.as_deref(),
        Some("ok")
    );
    assert_eq!(server.requests(), 2);
    assert_eq!(sleeps.taken(), [MS(250)]);
}

#[tokio::test]
async fn inside_a_run_each_transport_retry_is_an_event_on_the_report() {
    let server = FaultServer::start([
        Reply::error(503, "unavailable", "try again"),
        Reply::error(429, "rate_limited", "slow down").with_header("retry-after", "2"),
        Reply::text("ok"),
    ])
    .await;
    let sleeps = Sleeps::default();
    let model = builder(&server, &sleeps).build().unwrap();
    let agent = agent_errors::Agent::builder("a")
        .model(model)
        .build()
        .unwrap();
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let counted = metrics::set_default_local_recorder(&recorder);

    let outcome = agent.run_with_report("hi").await;

    drop(counted);
    assert_eq!(outcome.result.unwrap(), "ok");
    let key = "agent_errors.recoveries{error.type=quota,layer=transport,outcome=recovered}";
    assert!(
        matches!(
            crate::capture::metrics_of(&recorder).get(key),
            Some(metrics_util::debugging::DebugValue::Counter(1))
        ),
        "the transport recovered from the 429"
    );
    let retry = |attempt, delay, kind| agent_errors::Event::LlmRetry {
        layer: agent_errors::observe::ModelLayer::Transport,
        attempt,
        delay,
        kind,
    };
    assert_eq!(
        outcome.report.events,
        [
            retry(1, MS(250), classify(&HttpError::new(503, "")).kind),
            retry(2, SECS(2), ErrorKind::Quota),
        ]
    );
}

#[tokio::test]
async fn after_three_attempts_the_last_error_comes_back_unchanged() {
    let server = FaultServer::start([
        Reply::error(503, "unavailable", "first"),
        Reply::error(502, "bad_gateway", "second"),
        Reply::error(500, "server_error", "third").with_header("x-request-id", "req-3"),
        Reply::text("never asked"),
    ])
    .await;
    let sleeps = Sleeps::default();
    let model = builder(&server, &sleeps).build().unwrap();

    let error = model.chat(&ask()).await.unwrap_err();
    let openai = error
        .downcast_ref::<OpenAiError>()
        .expect("the provider's own error type");
    let OpenAiError::Status(status) = openai else {
        panic!("expected a status error, got {openai:?}");
    };
    assert_eq!(status.status(), 500);
    assert_eq!(status.header("X-Request-Id"), Some("req-3"));
    assert_eq!(status.code(), Some("server_error"));
    assert!(status.body().contains("third"));

    assert!(
        std::error::Error::source(openai).is_some_and(|s| s.is::<StatusError>()),
        "the status error is the provider error's source()"
    );
    let http =
        find_in_chain::<HttpError>(openai).expect("an HttpError below it for the classifier");
    assert_eq!(http.status(), 500);
    assert_eq!(http.message(), "third");
    assert_eq!(http.header("x-request-id"), Some("req-3"));

    assert_eq!(server.requests(), 3);
    assert_eq!(sleeps.taken(), [MS(250), MS(500)]);
}

#[tokio::test]
async fn rate_limit_waits_as_long_as_retry_after_says() {
    let server = FaultServer::start([
        Reply::error(
            429,
            "rate_limit_exceeded",
            "Rate limit reached for requests",
        )
        .with_header("retry-after", "2"),
        Reply::text("ok"),
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
async fn an_absurd_retry_after_is_capped() {
    let server = FaultServer::start([
        Reply::error(503, "unavailable", "maintenance").with_header("retry-after", "86400"),
        Reply::error(503, "unavailable", "maintenance").with_header("retry-after", "86400"),
        Reply::text("ok"),
    ])
    .await;
    let sleeps = Sleeps::default();
    let model = builder(&server, &sleeps)
        .max_retry_after(SECS(5))
        .build()
        .unwrap();

    model.complete(&ask()).await.unwrap();
    assert_eq!(sleeps.taken(), [SECS(5), SECS(5)]);
}

#[tokio::test]
async fn rate_limits_fail_fast_for_background_calls() {
    let server = FaultServer::start([
        Reply::error(429, "rate_limit_exceeded", "Rate limit reached")
            .with_header("retry-after", "2"),
        Reply::text("never asked"),
    ])
    .await;
    let sleeps = Sleeps::default();
    let model = builder(&server, &sleeps).build().unwrap();

    let request = ask().with_source(CallSource::BACKGROUND);
    assert_eq!(status_of(model.complete(&request).await), 429);
    assert_eq!(server.requests(), 1);
    assert!(sleeps.taken().is_empty());
}

fn overflow_body(max: u32, input: u32, completion: u32) -> Reply {
    Reply::error(
        400,
        "context_length_exceeded",
        &format!(
            "This model's maximum context length is {max} tokens. However, you requested {} tokens \
             ({input} in the messages, {completion} in the completion). Please reduce the length \
             of the messages or completion.",
            input + completion
        ),
    )
}

#[tokio::test]
async fn context_overflow_is_retried_once_with_the_room_left() {
    let server =
        FaultServer::start([overflow_body(8192, 5000, 4000), Reply::text("short answer")]).await;
    let sleeps = Sleeps::default();
    let model = builder(&server, &sleeps).build().unwrap();

    let request = ask().with_max_tokens(Some(4000));
    let reply = model.complete(&request).await.unwrap();
    assert_eq!(reply.text.as_deref(), Some("short answer"));

    let seen = server.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].body.as_ref().unwrap()["max_tokens"], 4000);
    assert_eq!(seen[1].body.as_ref().unwrap()["max_tokens"], 8192 - 5000);
    assert!(
        sleeps.taken().is_empty(),
        "a fixed request needs no backoff"
    );
}

#[tokio::test]
async fn context_overflow_is_retried_only_once() {
    let server = FaultServer::start([
        overflow_body(32768, 20000, 16000),
        overflow_body(32768, 20000, 12768),
        Reply::text("never asked"),
    ])
    .await;
    let model = builder(&server, &Sleeps::default()).build().unwrap();

    let request = ask().with_max_tokens(Some(16000));
    assert_eq!(status_of(model.complete(&request).await), 400);
    assert_eq!(server.requests(), 2);
}

#[tokio::test]
async fn context_overflow_below_the_floor_fails_with_the_original_error() {
    let server =
        FaultServer::start([overflow_body(8192, 6000, 4000), Reply::text("never asked")]).await;
    let model = builder(&server, &Sleeps::default()).build().unwrap();

    let error = model
        .complete(&ask().with_max_tokens(Some(4000)))
        .await
        .unwrap_err();
    let OpenAiError::Status(status) = &error else {
        panic!("expected the 400, got {error:?}");
    };
    assert_eq!(status.status(), 400);
    assert_eq!(status.code(), Some("context_length_exceeded"));
    assert_eq!(server.requests(), 1);
}

#[tokio::test]
async fn the_floor_is_configurable() {
    let server = FaultServer::start([overflow_body(8192, 6000, 4000), Reply::text("brief")]).await;
    let model = builder(&server, &Sleeps::default())
        .max_tokens_floor(1000)
        .build()
        .unwrap();

    model
        .complete(&ask().with_max_tokens(Some(4000)))
        .await
        .unwrap();
    assert_eq!(server.seen()[1].body.as_ref().unwrap()["max_tokens"], 2192);
}

#[tokio::test]
async fn an_exhausted_quota_is_not_retried() {
    let server = FaultServer::start([
        Reply::error(
            429,
            "insufficient_quota",
            "You exceeded your current quota, please check your plan and billing details.",
        )
        .with_header("retry-after", "1"),
        Reply::text("never asked"),
    ])
    .await;
    let sleeps = Sleeps::default();
    let model = builder(&server, &sleeps).build().unwrap();

    let error = model.complete(&ask()).await.unwrap_err();
    assert!(matches!(&error, OpenAiError::Status(e) if e.code() == Some("insufficient_quota")));
    assert_eq!(server.requests(), 1);
    assert!(sleeps.taken().is_empty());
}

/// A 429 whose message says nothing about quotas: only the body's `code` says the account is
/// out of credit, which no wait refills.
#[tokio::test]
async fn a_quota_named_only_in_the_bodys_code_is_never_retried() {
    let server = FaultServer::start([
        Reply::error(429, "insufficient_quota", "Request failed."),
        Reply::text("never asked"),
    ])
    .await;
    let sleeps = Sleeps::default();
    let model = agent_errors::llm::PersistentRetry::new(builder(&server, &sleeps).build().unwrap())
        .backoff(RetrySchedule::default().with_initial(MS(1)).with_max(MS(1)));

    let error = model.chat(&ask()).await.unwrap_err();

    assert_eq!(server.requests(), 1);
    let http = find_in_chain::<HttpError>(error.as_ref()).expect("the status is in the chain");
    assert_eq!(http.code(), Some("insufficient_quota"));
    let class = classify(error.as_ref());
    assert_eq!(class.kind, ErrorKind::Quota);
    assert!(!class.is_retryable());
}

fn overloaded() -> Reply {
    Reply::json(
        529,
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    )
}

#[tokio::test]
async fn overload_is_retried_for_the_main_agent() {
    let server = FaultServer::start([overloaded(), overloaded(), Reply::text("made it")]).await;
    let sleeps = Sleeps::default();
    let model = builder(&server, &sleeps).build().unwrap();

    let reply = model
        .complete(&ask().with_source(CallSource::MAIN_AGENT))
        .await
        .unwrap();
    assert_eq!(reply.text.as_deref(), Some("made it"));
    assert_eq!(server.requests(), 3);
    assert_eq!(sleeps.taken(), [MS(250), MS(500)]);
}

#[tokio::test]
async fn overload_fails_fast_for_background_calls() {
    let server = FaultServer::start([overloaded(), Reply::text("never asked")]).await;
    let sleeps = Sleeps::default();
    let model = builder(&server, &sleeps).build().unwrap();

    let request = ask().with_source(CallSource::BACKGROUND);
    assert_eq!(status_of(model.complete(&request).await), 529);
    assert_eq!(server.requests(), 1);
    assert!(sleeps.taken().is_empty());
}

#[tokio::test]
async fn the_foreground_allowlist_is_explicit() {
    let server = FaultServer::start([overloaded(), overloaded(), Reply::text("ok")]).await;
    let sleeps = Sleeps::default();
    let model = builder(&server, &sleeps)
        .foreground([CallSource::new("user_request")])
        .build()
        .unwrap();

    assert_eq!(
        status_of(model.complete(&ask()).await),
        529,
        "main_agent was taken off the list"
    );
    assert_eq!(server.requests(), 1);
    let request = ask().with_source(CallSource::new("user_request"));
    model.complete(&request).await.unwrap();
    assert_eq!(server.requests(), 3);
    assert_eq!(sleeps.taken(), [MS(250)]);
}

#[tokio::test]
async fn a_timeout_is_not_retried() {
    let server = FaultServer::start([Reply::Hang, Reply::text("never asked")]).await;
    let sleeps = Sleeps::default();
    let model = builder(&server, &sleeps).timeout(MS(200)).build().unwrap();

    let error = model.complete(&ask()).await.unwrap_err();
    let OpenAiError::Timeout { timeout, source } = &error else {
        panic!("expected a timeout, got {error:?}");
    };
    assert_eq!(*timeout, MS(200));
    assert!(source.is_timeout());
    assert_eq!(server.requests(), 1);
    assert!(sleeps.taken().is_empty());
}

#[tokio::test]
async fn a_completion_without_choices_is_an_error() {
    let server = FaultServer::start([Reply::json(200, json!({"choices": []}))]).await;
    let model = builder(&server, &Sleeps::default()).build().unwrap();

    assert!(matches!(
        model.complete(&ask()).await,
        Err(OpenAiError::NoChoices { .. })
    ));
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
async fn unauthorized_refreshes_the_key_and_retries_once() {
    let server = FaultServer::start([
        Reply::error(401, "invalid_api_key", "Incorrect API key provided"),
        Reply::text("first"),
        Reply::text("second"),
    ])
    .await;
    let calls = Arc::new(AtomicU32::new(0));
    let model = builder(&server, &Sleeps::default())
        .api_key("sk-old")
        .credential_refresh(counting_refresh(&calls, Ok("sk-fresh")))
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
    let keys: Vec<_> = server.seen().into_iter().map(|s| s.authorization).collect();
    assert_eq!(
        keys,
        [
            Some("Bearer sk-old".to_owned()),
            Some("Bearer sk-fresh".to_owned()),
            Some("Bearer sk-fresh".to_owned())
        ]
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_second_401_is_returned_after_one_refresh() {
    let server = FaultServer::start([
        Reply::error(401, "invalid_api_key", "no"),
        Reply::error(401, "invalid_api_key", "still no"),
        Reply::text("never asked"),
    ])
    .await;
    let calls = Arc::new(AtomicU32::new(0));
    let model = builder(&server, &Sleeps::default())
        .credential_refresh(counting_refresh(&calls, Ok("sk-fresh")))
        .build()
        .unwrap();

    assert_eq!(status_of(model.complete(&ask()).await), 401);
    assert_eq!(server.requests(), 2);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn without_a_refresh_hook_a_401_is_final() {
    let server = FaultServer::start([
        Reply::error(401, "invalid_api_key", "no"),
        Reply::text("never asked"),
    ])
    .await;
    let model = builder(&server, &Sleeps::default()).build().unwrap();

    assert_eq!(status_of(model.complete(&ask()).await), 401);
    assert_eq!(server.requests(), 1);
}

#[tokio::test]
async fn a_failing_refresh_hook_returns_the_401() {
    let server = FaultServer::start([
        Reply::error(401, "invalid_api_key", "no"),
        Reply::text("never asked"),
    ])
    .await;
    let calls = Arc::new(AtomicU32::new(0));
    let model = builder(&server, &Sleeps::default())
        .credential_refresh(counting_refresh(&calls, Err("vault unreachable")))
        .build()
        .unwrap();

    assert_eq!(status_of(model.complete(&ask()).await), 401);
    assert_eq!(server.requests(), 1);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn x_should_retry_false_stops_retries() {
    let server = FaultServer::start([
        Reply::error(503, "unavailable", "down").with_header("x-should-retry", "false"),
        Reply::text("never asked"),
    ])
    .await;
    let sleeps = Sleeps::default();
    let model = builder(&server, &sleeps).build().unwrap();

    assert_eq!(status_of(model.complete(&ask()).await), 503);
    assert_eq!(server.requests(), 1);
    assert!(sleeps.taken().is_empty());
}

#[tokio::test]
async fn transport_retry_can_be_turned_off() {
    let server = FaultServer::start([
        Reply::error(503, "unavailable", "down"),
        Reply::text("never asked"),
    ])
    .await;
    let model = builder(&server, &Sleeps::default())
        .transport_retry(RetrySchedule::attempts(1).unwrap())
        .build()
        .unwrap();

    assert_eq!(status_of(model.complete(&ask()).await), 503);
    assert_eq!(server.requests(), 1);
}

#[tokio::test]
async fn other_client_errors_are_final() {
    let server = FaultServer::start([
        Reply::error(
            400,
            "invalid_request_error",
            "Invalid value for 'temperature'",
        ),
        Reply::error(404, "model_not_found", "The model does not exist"),
        Reply::text("never asked"),
    ])
    .await;
    let sleeps = Sleeps::default();
    let model = builder(&server, &sleeps).build().unwrap();

    assert_eq!(status_of(model.complete(&ask()).await), 400);
    assert_eq!(status_of(model.complete(&ask()).await), 404);
    assert_eq!(server.requests(), 2);
    assert!(sleeps.taken().is_empty());
}

#[tokio::test]
async fn configured_from_variables_with_the_key_optional() {
    let server = FaultServer::start([Reply::text("local")]).await;
    let vars = [
        ("OPENAI_BASE_URL", format!("{}/", server.base_url)),
        ("AGENT_ERRORS_MODEL", "llama3.1".to_owned()),
        ("OPENAI_API_KEY", String::new()),
    ];
    let lookup = |name: &str| {
        vars.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.clone())
    };
    let model = OpenAiBuilder::from_vars(lookup).build().unwrap();

    assert_eq!(model.url(), format!("{}/chat/completions", server.base_url));
    assert_eq!(model.name(), "llama3.1");
    model.complete(&ask()).await.unwrap();
    let seen = server.seen();
    assert_eq!(
        seen[0].authorization, None,
        "an empty key sends no Authorization header"
    );
    assert_eq!(seen[0].body.as_ref().unwrap()["model"], "llama3.1");
}

#[test]
fn configuration_errors_are_typed() {
    let no_model = OpenAiBuilder::from_vars(|_| None).build();
    assert!(matches!(no_model, Err(OpenAiConfigError::MissingModel)));

    let bad_url = OpenAiModel::builder()
        .model("m")
        .base_url("localhost:11434/v1")
        .build();
    assert!(matches!(
        bad_url,
        Err(OpenAiConfigError::InvalidBaseUrl { .. })
    ));

    let builder = OpenAiModel::builder()
        .model("gpt-4o-mini")
        .api_key("sk-secret");
    assert!(
        !format!("{builder:?}").contains("sk-secret"),
        "Debug never shows the key"
    );
    let default = builder.build().unwrap();
    assert_eq!(default.url(), "https://api.openai.com/v1/chat/completions");
    assert!(
        !format!("{default:?}").contains("sk-secret"),
        "Debug never shows the key"
    );
}

#[tokio::test]
async fn status_errors_are_found_by_walking_the_chain() {
    let server = FaultServer::start([overloaded()]).await;
    let model = builder(&server, &Sleeps::default()).build().unwrap();

    let error = model
        .chat(&ask().with_source(CallSource::BACKGROUND))
        .await
        .unwrap_err();
    let http = find_in_chain::<HttpError>(&*error).expect("an HttpError in the chain");
    assert_eq!(http.status(), 529);
    assert_eq!(http.message(), "Overloaded");
    assert!(is_overload_error(&*error));
}

#[tokio::test]
async fn the_classifier_reads_provider_errors_by_status_and_type() {
    let server = FaultServer::start([
        Reply::error(429, "rate_limit_exceeded", "Rate limit reached")
            .with_header("retry-after", "20"),
        Reply::Reset,
        Reply::Hang,
    ])
    .await;
    let model = builder(&server, &Sleeps::default())
        .transport_retry(RetrySchedule::attempts(1).unwrap())
        .timeout(MS(200))
        .build()
        .unwrap();

    let limited = model.chat(&ask()).await.unwrap_err();
    let c = classify(&*limited);
    assert_eq!(
        (c.kind, c.status, c.retry_after),
        (ErrorKind::Quota, Some(429), Some(SECS(20)))
    );

    let reset = model.chat(&ask()).await.unwrap_err();
    assert!(matches!(
        reset.downcast_ref(),
        Some(OpenAiError::Connection { .. })
    ));
    assert!(classify(&*reset).is_retryable(), "{:?}", classify(&*reset));

    let timed_out = model.chat(&ask()).await.unwrap_err();
    assert!(matches!(
        timed_out.downcast_ref(),
        Some(OpenAiError::Timeout { .. })
    ));
    assert_eq!(classify(&*timed_out).kind, ErrorKind::Timeout);
}

#[test]
fn credentials_in_the_base_url_and_the_key_never_show() {
    // A key of no well-known shape: only its registration can hide it.
    let key = "plainkey-8f2a9c1e77d0";
    let builder = OpenAiModel::builder()
        .base_url("https://bob:hunter2hunter2@llm.example.com/v1?api_key=abcdef0123456789")
        .api_key(key)
        .model("m");
    let shown = format!("{builder:?}");
    assert!(
        !shown.contains("hunter2hunter2") && !shown.contains("abcdef0123456789"),
        "{shown}"
    );
    let model = builder.build().unwrap();
    let shown = format!("{model:?} {}", model.url());
    assert!(
        !shown.contains("hunter2hunter2") && !shown.contains("abcdef0123456789"),
        "{shown}"
    );
    let bad = OpenAiModel::builder()
        .base_url("ftp://bob:hunter2hunter2@host/")
        .model("m")
        .build()
        .unwrap_err();
    assert!(!bad.to_string().contains("hunter2hunter2"), "{bad}");
    let upstream = format!("upstream said: key {key} was refused");
    let redacted = agent_errors::redact::redact(&upstream);
    assert!(!redacted.contains(key), "{redacted}");
}

fn count_keys_spec() -> ToolSpec {
    ToolSpec {
        name: "count_keys".into(),
        description: "Counts keys.".into(),
        parameters: json!({"type": "object", "properties": {"json": {"type": "string"}}}),
    }
}

fn answer_schema() -> Value {
    json!({"type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"]})
}

fn every_option() -> RequestOptions {
    RequestOptions::new()
        .temperature(0.25)
        .top_p(0.5)
        .stop(["END", "STOP"])
        .seed(7)
        .tool_choice(ToolChoice::Tool("count_keys".into()))
        .parallel_tool_calls(false)
        .response_format(ResponseFormat::JsonSchema {
            name: "Answer".into(),
            schema: answer_schema(),
            strict: true,
        })
}

/// The body's fields other than the model, the messages and the tools.
fn option_fields(body: &Value) -> Value {
    let mut fields = body.as_object().unwrap().clone();
    for key in ["model", "messages", "tools", "stream", "stream_options"] {
        fields.remove(key);
    }
    Value::Object(fields)
}

fn every_option_on_the_wire() -> Value {
    json!({
        "temperature": 0.25,
        "top_p": 0.5,
        "stop": ["END", "STOP"],
        "seed": 7,
        "tool_choice": {"type": "function", "function": {"name": "count_keys"}},
        "parallel_tool_calls": false,
        "response_format": {"type": "json_schema", "json_schema": {
            "name": "Answer", "schema": answer_schema(), "strict": true
        }}
    })
}

#[tokio::test]
async fn request_options_are_sent_as_chat_completion_fields() {
    let server = FaultServer::start([Reply::text("{\"count\": 2}")]).await;
    let model = builder(&server, &Sleeps::default()).build().unwrap();
    let request = ChatRequest::new(vec![Message::user("hi")], vec![count_keys_spec()])
        .with_options(every_option());

    model.complete(&request).await.unwrap();

    let body = server.seen()[0].body.clone().unwrap();
    assert_eq!(option_fields(&body), every_option_on_the_wire());
}

#[tokio::test]
async fn a_streamed_request_sends_the_same_options() {
    let server = FaultServer::start([Reply::sse_text("{\"count\": 2}")]).await;
    let model = builder(&server, &Sleeps::default()).build().unwrap();
    let request = ChatRequest::new(vec![Message::user("hi")], vec![count_keys_spec()])
        .with_options(every_option());

    let events: Vec<_> = model.stream(&request).await.unwrap().collect().await;
    assert!(matches!(&events[0], Ok(StreamEvent::TextDelta(t)) if t == "{\"count\": 2}"));

    let body = server.seen()[0].body.clone().unwrap();
    assert_eq!(body["stream"], true);
    assert_eq!(option_fields(&body), every_option_on_the_wire());
}

#[tokio::test]
async fn unset_options_are_not_sent_and_tool_options_need_tools() {
    let server = FaultServer::start([Reply::text("a"), Reply::text("b")]).await;
    let model = builder(&server, &Sleeps::default()).build().unwrap();

    model.complete(&ask()).await.unwrap();
    model
        .complete(&ask().with_options(every_option()))
        .await
        .unwrap();

    let seen = server.seen();
    assert_eq!(option_fields(seen[0].body.as_ref().unwrap()), json!({}));
    // Without tools on offer, servers refuse `tool_choice` and `parallel_tool_calls`.
    let mut expected = every_option_on_the_wire();
    let expected_fields = expected.as_object_mut().unwrap();
    expected_fields.remove("tool_choice");
    expected_fields.remove("parallel_tool_calls");
    assert_eq!(option_fields(seen[1].body.as_ref().unwrap()), expected);
}

/// One answer of a [`RawServer`]: the status, the `Content-Length` it announces, and what it
/// then writes (possibly less than announced, then it closes the connection).
struct RawReply {
    status: u16,
    announced: usize,
    body: Vec<u8>,
    /// Keep the connection open, silent, after the body until the client closes it.
    hold: bool,
}

impl RawReply {
    /// `len` bytes of filler, announced in full.
    fn huge(status: u16, len: usize) -> RawReply {
        RawReply {
            status,
            announced: len,
            body: vec![b'x'; len],
            hold: false,
        }
    }

    /// `body`, announced as `announced` bytes: the connection closes before the body is whole.
    fn cut_short(body: &str, announced: usize) -> RawReply {
        RawReply {
            status: 200,
            announced,
            body: body.as_bytes().to_vec(),
            hold: false,
        }
    }
}

/// A loopback server written on the socket: it reports, per connection, how many body bytes it
/// wrote before the client closed the connection (`Err`) or all of them (`Ok`).
struct RawServer {
    base_url: String,
    written: tokio::sync::mpsc::UnboundedReceiver<Result<usize, usize>>,
}

impl RawServer {
    async fn start(replies: Vec<RawReply>) -> RawServer {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
        let (report, written) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            for reply in replies {
                let (mut socket, _) = listener.accept().await.unwrap();
                read_request(&mut socket).await;
                let head = format!(
                    "HTTP/1.1 {} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    reply.status, reply.announced
                );
                socket.write_all(head.as_bytes()).await.unwrap();
                let mut sent = 0;
                let mut outcome = Ok(reply.body.len());
                for chunk in reply.body.chunks(64 * 1024) {
                    if socket.write_all(chunk).await.is_err() {
                        outcome = Err(sent);
                        break;
                    }
                    sent += chunk.len();
                }
                let _ = report.send(outcome);
                if reply.hold {
                    let _ = socket.read(&mut [0u8; 1]).await;
                }
            }
        });
        RawServer { base_url, written }
    }

    /// What the server wrote on its next connection.
    async fn next_written(&mut self) -> Result<usize, usize> {
        tokio::time::timeout(SECS(30), self.written.recv())
            .await
            .expect("the server is still writing: the client did not drop the connection")
            .expect("the server answered")
    }
}

/// Reads one request: its head and as much body as it announces.
async fn read_request(socket: &mut TcpStream) {
    use tokio::io::AsyncReadExt;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = socket.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf);
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if buf.len() >= end + 4 + length {
                return;
            }
        }
    }
}

fn raw_model(server: &RawServer) -> OpenAiBuilder {
    OpenAiModel::builder()
        .base_url(&server.base_url)
        .model("test-model")
        .timeout(SECS(30))
        .sleeper(|_| std::future::ready(()))
}

const HUGE: usize = 64 * 1024 * 1024;

#[tokio::test]
async fn an_answer_over_the_size_cap_is_an_error_and_is_not_read_whole() {
    let mut server = RawServer::start(vec![RawReply::huge(200, HUGE)]).await;
    let model = raw_model(&server)
        .max_response_bytes(1024 * 1024)
        .build()
        .unwrap();

    let error = model.complete(&ask()).await.unwrap_err();
    assert!(
        matches!(error, OpenAiError::ResponseTooLarge { limit, .. } if limit == 1024 * 1024),
        "got {error:?}"
    );
    let written = server.next_written().await;
    assert!(
        matches!(written, Err(n) if n < HUGE),
        "the server wrote {written:?} of {HUGE} bytes"
    );
    // Asking again would bring the same answer.
    assert_eq!(classify(&error).kind, ErrorKind::Validation);
}

#[tokio::test]
async fn a_huge_error_body_is_cut_and_classified_by_its_status() {
    let mut server = RawServer::start(vec![RawReply::huge(400, HUGE)]).await;
    let model = raw_model(&server).build().unwrap();

    let error = model.complete(&ask()).await.unwrap_err();
    let OpenAiError::Status(status) = &error else {
        panic!("expected a status error, got {error:?}");
    };
    assert_eq!(status.status(), 400);
    assert_eq!(status.body().len(), 64 * 1024);
    assert_eq!(classify(&error).kind, ErrorKind::Validation);
    let written = server.next_written().await;
    assert!(
        matches!(written, Err(n) if n < HUGE),
        "the server wrote {written:?} of {HUGE} bytes"
    );
}

#[tokio::test]
async fn a_huge_error_body_of_a_streamed_request_is_cut_too() {
    let mut server = RawServer::start(vec![RawReply::huge(401, HUGE)]).await;
    let model = raw_model(&server).build().unwrap();

    let error = model.stream(&ask()).await.err().expect("a 401");
    assert_eq!(error.status(), Some(401));
    let written = server.next_written().await;
    assert!(
        matches!(written, Err(n) if n < HUGE),
        "the server wrote {written:?} of {HUGE} bytes"
    );
}

#[tokio::test]
async fn a_200_cut_short_or_not_json_is_retried() {
    let server = FaultServer::start([
        Reply::raw(200, "{\"choices\": [ {\"message\""),
        Reply::raw(200, "<html><body>502 Bad Gateway</body></html>"),
        Reply::text("ok"),
    ])
    .await;
    let sleeps = Sleeps::default();
    let model = builder(&server, &sleeps).build().unwrap();

    let reply = model.complete(&ask()).await.unwrap();
    assert_eq!(reply.text.as_deref(), Some("ok"));
    assert_eq!(server.requests(), 3);
    assert_eq!(sleeps.taken(), [MS(250), MS(500)]);
}

#[tokio::test]
async fn broken_answers_that_outlast_the_retries_end_as_a_retryable_error() {
    let server = FaultServer::start([
        Reply::raw(200, "{\"choices\": [ {\"message\""),
        Reply::raw(200, ""),
        Reply::raw(200, "{\"choices\": [ {\"mess"),
        Reply::text("never asked"),
    ])
    .await;
    let model = builder(&server, &Sleeps::default()).build().unwrap();

    let error = model.complete(&ask()).await.unwrap_err();
    assert!(
        matches!(&error, OpenAiError::BrokenResponse { body, .. } if body == "{\"choices\": [ {\"mess"),
        "got {error:?}"
    );
    assert_eq!(server.requests(), 3);
    let classification = classify(&error);
    assert_eq!(classification.kind, ErrorKind::Transient);
    assert!(classification.is_retryable());
}

#[tokio::test]
async fn a_connection_dropped_mid_body_is_retried_and_ends_retryable() {
    let body = "{\"choices\": [{\"message\": {\"content\": \"hel";
    let mut server = RawServer::start(vec![
        RawReply::cut_short(body, 1000),
        RawReply::cut_short(body, 1000),
        RawReply::cut_short(body, 1000),
    ])
    .await;
    let model = raw_model(&server).build().unwrap();

    let error = model.complete(&ask()).await.unwrap_err();
    assert!(
        matches!(&error, OpenAiError::Connection { .. }),
        "got {error:?}"
    );
    assert!(classify(&error).is_retryable(), "{:?}", classify(&error));
    for _ in 0..3 {
        assert_eq!(server.next_written().await, Ok(body.len()));
    }
}

#[tokio::test]
async fn valid_json_of_the_wrong_shape_is_not_retried() {
    let server = FaultServer::start([
        Reply::json(200, json!({"choices": "none today"})),
        Reply::text("never asked"),
    ])
    .await;
    let model = builder(&server, &Sleeps::default()).build().unwrap();

    let error = model.complete(&ask()).await.unwrap_err();
    assert!(
        matches!(&error, OpenAiError::InvalidResponse { .. }),
        "got {error:?}"
    );
    assert_eq!(server.requests(), 1);
    assert_eq!(classify(&error).kind, ErrorKind::Validation);
}

#[tokio::test]
async fn a_stalled_error_body_of_a_streamed_request_ends_at_the_timeout() {
    let stalled = RawReply {
        status: 400,
        announced: 1000,
        body: b"{\"error\": {\"message\": \"bad".to_vec(),
        hold: true,
    };
    let server = RawServer::start(vec![stalled]).await;
    let model = raw_model(&server).timeout(MS(300)).build().unwrap();

    let request = ask();
    let asked = tokio::time::timeout(SECS(10), model.stream(&request));
    let error = asked
        .await
        .expect("the stalled body was waited for past the timeout")
        .err()
        .expect("a 400");
    let OpenAiError::Status(status) = &error else {
        panic!("expected a status error, got {error:?}");
    };
    assert_eq!(status.status(), 400);
    assert_eq!(status.body(), "");
}

/// A run with a retry allowance of N: the tool's retry rung, the provider's transport and
/// `on_llm_error` all keep failing, and between them they make exactly N retries (every request
/// the server saw and every tool call, less the first call of each), never more.
#[tokio::test]
async fn every_layer_of_a_run_spends_one_retry_allowance() {
    use agent_errors::policy::RetryAction;
    use agent_errors::testing::{Fault, FaultyTool, echo_tool};
    use agent_errors::{
        Agent, Limits, LlmErrorDecision,
        policy::{Action, Ladder, Policy, PolicyKey},
    };

    const ALLOWANCE: usize = 7;
    let asks_for_the_tool = Reply::json(
        200,
        json!({
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": null, "tool_calls": [{
                    "id": "call_1", "type": "function",
                    "function": {"name": "flaky", "arguments": "{\"text\": \"a\"}"}
                }]},
                "finish_reason": "tool_calls"
            }]
        }),
    );
    let busy = (0..60).map(|_| Reply::raw(503, "service unavailable"));
    let server = FaultServer::start(std::iter::once(asks_for_the_tool).chain(busy)).await;
    let sleeps = Sleeps::default();
    let model = builder(&server, &sleeps).build().unwrap();
    let tool = FaultyTool::new(echo_tool("flaky"))
        .then_always(Fault::error(|| HttpError::new(503, "busy")));
    let no_wait = RetryAction {
        max_attempts: 3.try_into().unwrap(),
        initial: Some(Duration::ZERO),
        max: None,
        when_safe: false,
    };
    let agent = Agent::builder("a")
        .model(model)
        .tool(tool.tool())
        .on_tool_error(
            "flaky",
            Policy::new().on(
                PolicyKey::Execution,
                Ladder::new([Action::Retry(no_wait), Action::Escalate]),
            ),
        )
        .on_llm_error(|_, _| LlmErrorDecision::retry(20, Duration::ZERO))
        .limits(Limits::default().with_max_retries(ALLOWANCE as u32))
        .build()
        .unwrap();

    let error = agent.run("go").await.unwrap_err();

    assert!(
        error.model_error().is_some(),
        "the model kept failing: {error}"
    );
    let calls = server.requests() + tool.calls() as usize;
    // First calls: the tool's, the first model turn's and the second model turn's.
    assert_eq!(
        calls - 3,
        ALLOWANCE,
        "{} requests, {} tool calls",
        server.requests(),
        tool.calls()
    );
    assert_eq!(
        tool.calls(),
        3,
        "the tool rung retried first, as far as its policy goes"
    );
    assert!(
        !sleeps.taken().is_empty(),
        "the transport retried too, inside on_llm_error's retries"
    );
}
