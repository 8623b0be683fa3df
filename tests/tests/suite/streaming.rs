//! Streamed answers: the OpenAI provider against a raw loopback SSE server that breaks on
//! demand (real sockets, short real limits), and the agent loop on in-process streams under
//! paused time.

use crate::support;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_errors::classify::{find_in_chain, is_overload_error};
use agent_errors::openai::{OpenAiBuilder, OpenAiError, OpenAiModel};
use agent_errors::retry::RetrySchedule;
use agent_errors::stream::{StreamError, StreamInterrupted, stream_of};
use agent_errors::testing::Reply;
use agent_errors::{
    Agent, BoxError, ChatModel, ChatRequest, ChatResponse, ErrorKind, LlmErrorDecision, Message,
    RunError, RunOptions, ToolCall,
    call::BoxFuture,
    classify::classify,
    llm::{FinishReason, Truncated, Usage},
    run::RunDelta,
    stream::{ChatStream, StreamEvent},
};
use futures_util::StreamExt;
use serde_json::{Value, json};
use support::loopback::{Loopback, Part, Reply as LoopReply};

const MS: fn(u64) -> Duration = Duration::from_millis;

fn data(value: Value) -> Part {
    Part::Raw(format!("data: {value}\n\n"))
}

fn done() -> Part {
    Part::Raw("data: [DONE]\n\n".to_owned())
}

fn text_chunk(text: &str) -> Part {
    data(json!({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]}))
}

fn finish(reason: &str) -> Part {
    data(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]}))
}

fn usage(prompt: u64, completion: u64) -> Part {
    data(
        json!({"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion}}),
    )
}

/// The shared loopback server, answering each connection with the next script (200,
/// text/event-stream).
struct SseServer(Loopback);

impl SseServer {
    async fn start(scripts: Vec<Vec<Part>>) -> SseServer {
        SseServer(Loopback::start(scripts.into_iter().map(LoopReply::Stream)).await)
    }

    fn model(&self) -> OpenAiModel {
        self.builder().build().unwrap()
    }

    /// For a test that sends megabytes: time limits a loaded machine cannot hit.
    fn patient(&self) -> OpenAiModel {
        let limit = Duration::from_secs(60);
        let builder = self.builder().first_event_timeout(limit);
        builder.stream_idle_timeout(limit).build().unwrap()
    }

    fn builder(&self) -> OpenAiBuilder {
        OpenAiModel::builder()
            .base_url(format!("{}/v1", self.0.url))
            .model("m")
            .first_event_timeout(MS(300))
            .stream_idle_timeout(MS(300))
            .sleeper(|_| async {})
            .transport_retry(
                RetrySchedule::attempts(2)
                    .unwrap()
                    .with_initial(MS(1))
                    .with_jitter(0.0),
            )
    }

    fn requests(&self) -> usize {
        self.0.requests()
    }
}

fn ask() -> ChatRequest {
    ChatRequest::new(vec![Message::user("hi")], vec![])
}

/// Reads a whole stream as the agent does: events, then the first error.
async fn drain(stream: ChatStream<'_>) -> (Vec<StreamEvent>, Option<BoxError>) {
    let mut stream = stream;
    let mut events = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(event) => events.push(event),
            Err(error) => return (events, Some(error)),
        }
    }
    (events, None)
}

#[tokio::test]
async fn text_usage_and_finish_arrive_and_the_request_asks_for_a_stream() {
    let server = SseServer::start(vec![vec![
        data(json!({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})),
        text_chunk("Hel"),
        text_chunk("lo"),
        finish("stop"),
        usage(12, 2),
        done(),
    ]])
    .await;
    let (events, error) = drain(server.model().stream(&ask()).await.unwrap()).await;
    assert!(error.is_none());
    assert_eq!(
        events,
        [
            StreamEvent::TextDelta("Hel".into()),
            StreamEvent::TextDelta("lo".into()),
            StreamEvent::Finish(FinishReason::Stop),
            StreamEvent::Usage(Usage::new(12, 2)),
        ]
    );
    let body = server.0.body(0);
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
}

#[tokio::test]
async fn tool_calls_split_across_many_fragments_are_joined() {
    let mut script = vec![data(
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "id": "call_a", "type": "function", "function": {"name": "add", "arguments": ""}}
        ]}}]}),
    )];
    for piece in ["{\"", "a\":", " 1,", " \"b\"", ": 2}"] {
        script.push(data(
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": 0, "function": {"arguments": piece}}
            ]}}]}),
        ));
    }
    script.push(data(
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 1, "id": "call_b", "function": {"name": "neg", "arguments": "{\"x\":3}"}}
        ]}}]}),
    ));
    script.extend([finish("tool_calls"), done()]);
    let server = SseServer::start(vec![script]).await;
    let (events, error) = drain(server.model().stream(&ask()).await.unwrap()).await;
    assert!(error.is_none());
    let mut answer = agent_errors::stream::StreamAccumulator::new();
    events.iter().for_each(|e| answer.push(e));
    let response = answer.into_response();
    assert_eq!(
        response.tool_calls,
        [
            ToolCall::new("call_a", "add", r#"{"a": 1, "b": 2}"#),
            ToolCall::new("call_b", "neg", r#"{"x":3}"#)
        ]
    );
    assert_eq!(response.finish_reason, Some(FinishReason::ToolCalls));
}

#[tokio::test]
async fn a_stream_dropped_before_its_first_event_is_retried() {
    let server =
        SseServer::start(vec![vec![], vec![text_chunk("ok"), finish("stop"), done()]]).await;
    let (events, error) = drain(server.model().stream(&ask()).await.unwrap()).await;
    assert!(error.is_none());
    assert_eq!(events[0], StreamEvent::TextDelta("ok".into()));
    assert_eq!(server.requests(), 2);
}

#[tokio::test]
async fn a_slow_first_event_is_a_timeout_and_retried() {
    let server = SseServer::start(vec![
        vec![Part::Pause(MS(1000)), text_chunk("late")],
        vec![text_chunk("ok"), finish("stop"), done()],
    ])
    .await;
    let (events, _) = drain(server.model().stream(&ask()).await.unwrap()).await;
    assert_eq!(events[0], StreamEvent::TextDelta("ok".into()));
    assert_eq!(server.requests(), 2);
}

#[tokio::test]
async fn slow_first_events_that_outlast_the_retries_are_a_timeout() {
    let server = SseServer::start(vec![vec![Part::Hang], vec![Part::Hang]]).await;
    let error = server.model().stream(&ask()).await.err().unwrap();
    assert!(matches!(
        error,
        OpenAiError::Stream(StreamError::FirstEventTimeout { .. })
    ));
    assert_eq!(classify(&error).kind, ErrorKind::Timeout);
}

/// The cause of a stream that ended before its final event; fails on any other error.
fn end_cause(error: &Option<BoxError>) -> &(dyn std::error::Error + 'static) {
    match error.as_ref().and_then(|e| e.downcast_ref::<StreamError>()) {
        Some(StreamError::EndedEarly { source }) => &**source,
        _ => panic!("expected the stream to end early, got {error:?}"),
    }
}

fn eof(cause: &(dyn std::error::Error + 'static)) -> bool {
    cause
        .downcast_ref::<std::io::Error>()
        .is_some_and(|e| e.kind() == std::io::ErrorKind::UnexpectedEof)
}

#[tokio::test]
async fn a_drop_after_output_began_is_an_error_inside_the_stream() {
    let server = SseServer::start(vec![vec![text_chunk("Hel"), text_chunk("lo")]]).await;
    let (events, error) = drain(server.model().stream(&ask()).await.unwrap()).await;
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
    let server = SseServer::start(vec![vec![
        text_chunk("Hel"),
        Part::Raw("data: {\"choices\": [{\"delta\": {\"cont".into()),
    ]])
    .await;
    let (_, error) = drain(server.model().stream(&ask()).await.unwrap()).await;
    assert!(eof(end_cause(&error)), "{error:?}");
}

#[tokio::test]
async fn a_read_error_after_output_began_ends_the_stream_early_with_the_transport_error() {
    let server = SseServer::start(vec![vec![
        text_chunk("Hel"),
        Part::Pause(MS(100)),
        Part::Reset,
    ]])
    .await;
    let (events, error) = drain(server.model().stream(&ask()).await.unwrap()).await;
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
async fn a_read_error_before_output_is_retried_and_then_a_stream_error() {
    let reset = vec![
        Part::Raw(": hi\n\n".into()),
        Part::Pause(MS(100)),
        Part::Reset,
    ];
    let server = SseServer::start(vec![reset.clone(), reset]).await;
    let error = server.model().stream(&ask()).await.err().unwrap();
    assert_eq!(server.requests(), 2);
    let OpenAiError::Stream(StreamError::EndedEarly { source }) = &error else {
        panic!("expected the stream to end early, got {error:?}");
    };
    assert!(source.is::<reqwest::Error>(), "{source:?}");
}

/// A server that never stops sending text: the stream ends once it has sent more than any real
/// answer (64 MiB), instead of growing the caller's answer until memory runs out.
#[tokio::test]
async fn an_endless_stream_ends_early_at_its_cap() {
    const CAP: usize = 64 * 1024 * 1024;
    let chunk = text_chunk(&"x".repeat(200 * 1024));
    let mut script = vec![chunk.clone(); CAP / (200 * 1024) + 8];
    script.push(done());
    let server = SseServer::start(vec![script]).await;
    let (events, error) = drain(server.patient().stream(&ask()).await.unwrap()).await;
    let cause = end_cause(&error);
    assert!(
        matches!(cause.downcast_ref(), Some(StreamError::TooLarge { limit, .. }) if *limit == CAP),
        "{cause:?}"
    );
    assert!(events.len() > 100, "{} events read", events.len());
}

#[tokio::test]
async fn a_malformed_chunk_is_its_own_error() {
    let server = SseServer::start(vec![vec![
        text_chunk("Hel"),
        Part::Raw("data: {oops\n\n".into()),
    ]])
    .await;
    let (_, error) = drain(server.model().stream(&ask()).await.unwrap()).await;
    assert!(matches!(
        error.unwrap().downcast_ref::<StreamError>(),
        Some(StreamError::Malformed { data, .. }) if data == "{oops"
    ));
}

#[tokio::test]
async fn a_stall_after_output_began_is_a_timeout() {
    let server = SseServer::start(vec![vec![text_chunk("Hel"), Part::Hang]]).await;
    let (_, error) = drain(server.model().stream(&ask()).await.unwrap()).await;
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

/// A server that sends a delta every 100 ms, well inside the 300 ms idle limit, for 1.5 s.
fn drip() -> Vec<Part> {
    let mut script = Vec::new();
    for _ in 0..15 {
        script.extend([text_chunk("."), Part::Pause(MS(100))]);
    }
    script.extend([finish("stop"), done()]);
    script
}

#[tokio::test]
async fn a_stream_that_drips_inside_the_idle_limit_ends_at_its_deadline() {
    let server = SseServer::start(vec![drip()]).await;
    let model = server.builder().stream_deadline(MS(600)).build().unwrap();
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

    let server = SseServer::start(vec![drip()]).await;
    let model = server.builder().stream_deadline(None).build().unwrap();
    let (events, error) = drain(model.stream(&ask()).await.unwrap()).await;
    assert!(error.is_none(), "no deadline, asked for: {error:?}");
    assert_eq!(
        events.last(),
        Some(&StreamEvent::Finish(FinishReason::Stop))
    );
}

#[tokio::test]
async fn an_overload_event_inside_a_200_stream_is_read_as_a_529() {
    let overloaded = data(json!({"error": {"type": "overloaded_error", "message": "Overloaded"}}));
    let server = SseServer::start(vec![
        vec![overloaded.clone()],
        vec![text_chunk("Hel"), overloaded],
    ])
    .await;
    let (_, error) = drain(server.model().stream(&ask()).await.unwrap()).await;
    assert_eq!(server.requests(), 2, "before output: retried like a 529");
    let error = error.unwrap();
    assert!(is_overload_error(&*error));
    let http = find_in_chain::<agent_errors::HttpError>(&*error).unwrap();
    assert_eq!(http.status(), 529);
}

#[tokio::test]
async fn the_agent_streams_deltas_and_a_broken_stream_reaches_on_llm_error() {
    let server = SseServer::start(vec![
        vec![text_chunk("Hel")],
        vec![text_chunk("Hello"), finish("stop"), usage(5, 1), done()],
    ])
    .await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    let agent = Agent::builder("streamer")
        .model(server.model())
        .on_llm_error(move |error, _| {
            let cut = error.downcast_ref::<StreamInterrupted>().unwrap();
            log.lock().unwrap().push(cut.partial_text.clone());
            LlmErrorDecision::retry(2, MS(1))
        })
        .build()
        .unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    let outcome = agent.run_with("hi", RunOptions::new().stream_to(tx)).await;
    assert_eq!(outcome.result.unwrap(), "Hello");
    assert_eq!(outcome.report.usage, Usage::new(5, 1));
    assert_eq!(*seen.lock().unwrap(), ["Hel"]);
    let mut deltas = Vec::new();
    while let Ok(delta) = rx.try_recv() {
        deltas.push(delta);
    }
    assert_eq!(
        deltas,
        [
            RunDelta::Model(StreamEvent::TextDelta("Hel".into())),
            RunDelta::TurnRestarted {
                turn: 1,
                failed_attempt: 1
            },
            RunDelta::Model(StreamEvent::TextDelta("Hello".into())),
            RunDelta::Model(StreamEvent::Finish(FinishReason::Stop)),
            RunDelta::Model(StreamEvent::Usage(Usage::new(5, 1))),
        ]
    );
}

/// A model whose streams are scripted in process: paused time drives it.
struct StreamScript(Mutex<VecDeque<Vec<Result<StreamEvent, BoxError>>>>);

impl ChatModel for StreamScript {
    fn chat<'a>(&'a self, _: &'a ChatRequest) -> BoxFuture<'a, Result<ChatResponse, BoxError>> {
        Box::pin(async { Err("this model only streams".into()) })
    }

    fn chat_stream<'a>(
        &'a self,
        _: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChatStream<'a>, BoxError>> {
        let events = self.0.lock().unwrap().pop_front().unwrap_or_default();
        Box::pin(async move { Ok(stream_of(events)) })
    }
}

#[tokio::test(start_paused = true)]
async fn a_broken_tool_call_stream_never_runs_the_tool_and_rethrows_interrupted() {
    let model = StreamScript(Mutex::new(VecDeque::from([vec![
        Ok(StreamEvent::ToolCallStarted {
            index: 0,
            id: "c".into(),
            name: "rm".into(),
        }),
        Ok(StreamEvent::ToolCallDelta {
            index: 0,
            arguments: "{\"path\":".into(),
        }),
        Err(Box::new(StreamError::EndedEarly {
            source: "the connection closed".into(),
        }) as BoxError),
    ]])));
    let agent = Agent::builder("a").model(model).build().unwrap();
    let (tx, _rx) = tokio::sync::mpsc::channel(64);
    let outcome = agent.run_with("go", RunOptions::new().stream_to(tx)).await;
    let error = outcome.result.unwrap_err().into_model_error().unwrap();
    let cut = error.downcast_ref::<StreamInterrupted>().unwrap();
    assert_eq!(
        cut.partial_tool_calls,
        [ToolCall::new("c", "rm", "{\"path\":")]
    );
    assert_eq!(outcome.report.tool_calls, 0);
}

#[tokio::test(start_paused = true)]
async fn a_length_finish_goes_to_on_llm_error_and_usage_is_summed() {
    let cut = ChatResponse::text("The answer is")
        .with_finish_reason(FinishReason::Length)
        .with_usage(Usage::new(10, 100));
    let whole = ChatResponse::text("The answer is 42.")
        .with_finish_reason(FinishReason::Stop)
        .with_usage(Usage::new(10, 5));
    let model = agent_errors::testing::ScriptedModel::new()
        .reply(Reply::response(cut.clone()))
        .reply(Reply::response(whole));
    let agent = Agent::builder("a")
        .model(model)
        .on_llm_error(|error, _| {
            assert!(error.downcast_ref::<Truncated>().is_some());
            LlmErrorDecision::retry(2, MS(10))
        })
        .build()
        .unwrap();
    let outcome = agent.run_with_report("q").await;
    assert_eq!(outcome.result.unwrap(), "The answer is 42.");
    assert_eq!(outcome.report.usage, Usage::new(20, 105));

    let model = agent_errors::testing::ScriptedModel::new().reply(Reply::response(cut));
    let agent = Agent::builder("a").model(model).build().unwrap();
    let error = agent
        .run("q")
        .await
        .unwrap_err()
        .into_model_error()
        .unwrap();
    assert_eq!(
        error
            .downcast_ref::<Truncated>()
            .unwrap()
            .partial
            .text
            .as_deref(),
        Some("The answer is")
    );
}

#[tokio::test(start_paused = true)]
async fn a_refusal_is_its_own_outcome() {
    let refusal =
        ChatResponse::text("I can't help with that.").with_finish_reason(FinishReason::Refusal);
    let model = agent_errors::testing::ScriptedModel::new().reply(Reply::response(refusal));
    let agent = Agent::builder("a").model(model).build().unwrap();
    match agent.run("q").await.unwrap_err() {
        RunError::Refused { text, reason } => {
            assert_eq!(text, "I can't help with that.");
            assert_eq!(reason, FinishReason::Refusal);
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// A hostile server streams 100k tool calls, their indices out of order and with gaps, and
/// repeats the finish reason: every call keeps its own id and arguments, in the order the calls
/// started, and each is finished once.
#[tokio::test]
async fn a_hundred_thousand_tool_calls_out_of_order_and_with_gaps_decode_whole() {
    const CALLS: usize = 100_000;
    // 7919 is prime and 100,000 is 2^5 * 5^5, so `k * 7919 % CALLS` visits every k once.
    let index = |k: usize| 3 * (k * 7919 % CALLS);
    let chunk = |call: Value| {
        format!(
            "data: {}\n\n",
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]})
        )
    };
    let mut body = String::new();
    for k in 0..CALLS {
        let i = index(k);
        body.push_str(&chunk(json!({"index": i, "id": format!("call_{i}"),
            "function": {"name": "lookup", "arguments": ""}})));
        body.push_str(&chunk(
            json!({"index": i, "function": {"arguments": format!("{{\"n\":{i}}}")}}),
        ));
    }
    let server = SseServer::start(vec![vec![
        Part::Raw(body),
        finish("tool_calls"),
        finish("tool_calls"),
        done(),
    ]])
    .await;
    let (events, error) = drain(server.patient().stream(&ask()).await.unwrap()).await;
    assert!(error.is_none(), "{error:?}");
    let mut finished: Vec<usize> = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolCallFinished { index } => Some(*index),
            _ => None,
        })
        .collect();
    finished.sort_unstable();
    let mut every: Vec<usize> = (0..CALLS).map(index).collect();
    every.sort_unstable();
    assert_eq!(finished, every, "each call is finished once");
    let mut answer = agent_errors::stream::StreamAccumulator::new();
    events.iter().for_each(|e| answer.push(e));
    let calls = answer.into_response().tool_calls;
    assert_eq!(calls.len(), CALLS);
    for (k, call) in calls.iter().enumerate() {
        let i = index(k);
        assert_eq!(
            (&*call.id, call.arguments.as_str()),
            (
                format!("call_{i}").as_str(),
                format!("{{\"n\":{i}}}").as_str()
            )
        );
    }
}

/// The provider's error keeps the errors it wraps in its `source()` chain, so a caller looking
/// for a stream or status error by type finds it, and classification reads what is below.
#[tokio::test]
async fn the_stream_and_status_errors_a_provider_error_wraps_are_in_its_chain() {
    use agent_errors::HttpError;
    use agent_errors::provider::StatusError;
    use std::error::Error as _;

    let server = SseServer::start(vec![vec![Part::Hang], vec![Part::Hang]]).await;
    let error = server.model().stream(&ask()).await.err().unwrap();
    assert!(error.source().is_some_and(|s| s.is::<StreamError>()));
    assert!(matches!(
        find_in_chain::<StreamError>(&error),
        Some(StreamError::FirstEventTimeout { .. })
    ));
    assert_eq!(classify(&error).kind, ErrorKind::Timeout);

    let refusal = json!({"error": {"message": "bad request", "type": "invalid_request_error"}});
    let server = Loopback::start([LoopReply::json(400, refusal)]).await;
    let model = OpenAiModel::builder()
        .base_url(format!("{}/v1", server.url))
        .model("m")
        .build()
        .unwrap();
    let error = model.complete(&ask()).await.unwrap_err();
    assert!(error.source().is_some_and(|s| s.is::<StatusError>()));
    assert_eq!(
        find_in_chain::<StatusError>(&error).map(StatusError::status),
        Some(400)
    );
    assert_eq!(
        find_in_chain::<HttpError>(&error).map(HttpError::status),
        Some(400)
    );
    assert_eq!(classify(&error).kind, ErrorKind::Validation);
}

/// Two text deltas and a stop, as a provider streams "Hello".
fn hello_stream() -> Vec<Result<StreamEvent, BoxError>> {
    vec![
        Ok(StreamEvent::TextDelta("Hel".into())),
        Ok(StreamEvent::TextDelta("lo".into())),
        Ok(StreamEvent::Finish(FinishReason::Stop)),
    ]
}

/// What an agent streaming through `model` sends its listener, and its answer.
async fn streamed_through(model: impl ChatModel) -> (String, Vec<RunDelta>) {
    let agent = Agent::builder("a").model(model).build().unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    let outcome = agent.run_with("hi", RunOptions::new().stream_to(tx)).await;
    let mut deltas = Vec::new();
    while let Ok(delta) = rx.try_recv() {
        deltas.push(delta);
    }
    (outcome.result.unwrap(), deltas)
}

#[tokio::test(start_paused = true)]
async fn a_fallback_model_streams_its_primarys_stream_as_it_comes() {
    use agent_errors::llm::FallbackModel;
    let primary = StreamScript(Mutex::new(VecDeque::from([hello_stream()])));
    let fallback = agent_errors::testing::ScriptedModel::new().text("from the fallback");
    let (answer, deltas) = streamed_through(FallbackModel::new(primary, fallback)).await;
    assert_eq!(answer, "Hello");
    assert_eq!(
        deltas[..2],
        [
            RunDelta::Model(StreamEvent::TextDelta("Hel".into())),
            RunDelta::Model(StreamEvent::TextDelta("lo".into())),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_persistent_retry_model_streams_its_models_stream_as_it_comes() {
    use agent_errors::llm::PersistentRetry;
    let model = StreamScript(Mutex::new(VecDeque::from([hello_stream()])));
    let (answer, deltas) = streamed_through(PersistentRetry::new(model)).await;
    assert_eq!(answer, "Hello");
    assert_eq!(
        deltas[0],
        RunDelta::Model(StreamEvent::TextDelta("Hel".into()))
    );
}
