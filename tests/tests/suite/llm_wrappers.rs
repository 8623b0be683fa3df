//! Model fallback and persistent retry, under paused time: every sleep is real tokio
//! time, so elapsed time and heartbeats are asserted exactly, and the tests take no time.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_errors::Event;
use agent_errors::breaker::BreakerState;
use agent_errors::classify::classify;
use agent_errors::llm::{FallbackModel, Heartbeat, PersistentRetry};
use agent_errors::observe::{EventLog, ModelLayer};
use agent_errors::retry::RetrySchedule;
use agent_errors::{BoxError, ChatResponse, HttpError};
use agent_errors::{ChatModel, ChatRequest, Message, llm::CallSource};
use tokio::time::Instant;

/// `futures_util::future::BoxFuture`, which `ChatModel::chat` returns.
type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

const SECS: fn(u64) -> Duration = Duration::from_secs;
const HOUR: Duration = Duration::from_secs(3600);

type Reply = Result<ChatResponse, BoxError>;

/// A model that answers from a queue, then with `otherwise` forever; counts its calls.
struct Scripted {
    name: &'static str,
    queue: Mutex<VecDeque<Reply>>,
    otherwise: fn() -> Reply,
    calls: AtomicU32,
}

impl Scripted {
    fn new(name: &'static str, queue: Vec<Reply>, otherwise: fn() -> Reply) -> Arc<Scripted> {
        Arc::new(Scripted {
            name,
            queue: Mutex::new(queue.into()),
            otherwise,
            calls: AtomicU32::new(0),
        })
    }

    fn calls(&self) -> u32 {
        self.calls.load(Ordering::SeqCst)
    }
}

impl ChatModel for Scripted {
    fn chat<'a>(&'a self, _: &'a ChatRequest) -> BoxFuture<'a, Result<ChatResponse, BoxError>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let reply = self
            .queue
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or_else(self.otherwise);
        Box::pin(std::future::ready(reply))
    }

    fn name(&self) -> &str {
        self.name
    }
}

fn overloaded() -> Reply {
    Err(HttpError::new(529, "Overloaded").into())
}

fn unavailable() -> Reply {
    Err(HttpError::new(503, "Service Unavailable").into())
}

fn text(t: &str) -> Reply {
    Ok(ChatResponse::text(t))
}

fn unexpected() -> Reply {
    panic!("the model was called more often than scripted")
}

fn ask(source: CallSource) -> ChatRequest {
    ChatRequest::new(vec![Message::user("hi")], vec![]).with_source(source)
}

fn no_jitter() -> RetrySchedule {
    RetrySchedule::default().with_jitter(0.0)
}

#[tokio::test(start_paused = true)]
async fn falls_back_after_n_consecutive_overloads() {
    let primary = Scripted::new(
        "big",
        vec![overloaded(), overloaded(), overloaded()],
        unexpected,
    );
    let fallback = Scripted::new("small", vec![text("from small")], unexpected);
    let log = Arc::new(EventLog::new());
    let model = FallbackModel::new(primary.clone(), fallback.clone())
        .after(3)
        .unwrap()
        .backoff(no_jitter())
        .event_log(log.clone());

    let start = Instant::now();
    let reply = model.chat(&ask(CallSource::MAIN_AGENT)).await.unwrap();

    assert_eq!(reply.text.as_deref(), Some("from small"));
    assert_eq!((primary.calls(), fallback.calls()), (3, 1));
    assert_eq!(
        start.elapsed(),
        Duration::from_millis(500 + 1000),
        "two backoffs between three overloads"
    );
    let overloaded = classify(&HttpError::new(529, "Overloaded")).kind;
    let retry = |attempt, delay| Event::LlmRetry {
        layer: ModelLayer::FallbackModel,
        attempt,
        delay,
        kind: overloaded,
    };
    assert_eq!(
        log.snapshot(),
        [
            retry(1, Duration::from_millis(500)),
            retry(2, Duration::from_millis(1000)),
            Event::LlmCircuit {
                model: "big".into(),
                state: BreakerState::Open,
            },
            Event::LlmFallback {
                from: "big".into(),
                to: "small".into(),
                trigger: "overload",
                attempts: 3,
                kind: overloaded,
            }
        ]
    );
    assert_eq!(model.name(), "big");
}

#[tokio::test(start_paused = true)]
async fn a_primary_that_recovers_in_time_keeps_the_request() {
    let primary = Scripted::new(
        "big",
        vec![overloaded(), overloaded(), text("big after all")],
        unexpected,
    );
    let fallback = Scripted::new("small", vec![], unexpected);
    let log = Arc::new(EventLog::new());
    let model = FallbackModel::new(primary.clone(), fallback.clone())
        .after(3)
        .unwrap()
        .backoff(no_jitter())
        .event_log(log.clone());

    let start = Instant::now();
    let reply = model.chat(&ask(CallSource::MAIN_AGENT)).await.unwrap();

    assert_eq!(reply.text.as_deref(), Some("big after all"));
    assert_eq!((primary.calls(), fallback.calls()), (3, 0));
    assert_eq!(start.elapsed(), Duration::from_millis(1500));
    let names: Vec<&str> = log.snapshot().iter().map(Event::name).collect();
    assert_eq!(
        names,
        ["llm_retry", "llm_retry"],
        "two retries and no switch"
    );
}

#[tokio::test(start_paused = true)]
async fn the_count_is_per_request() {
    let primary = Scripted::new(
        "big",
        vec![overloaded(), text("one"), overloaded(), text("two")],
        unexpected,
    );
    let fallback = Scripted::new("small", vec![], unexpected);
    let model = FallbackModel::new(primary.clone(), fallback.clone())
        .after(2)
        .unwrap()
        .backoff(no_jitter());

    for expected in ["one", "two"] {
        let reply = model.chat(&ask(CallSource::MAIN_AGENT)).await.unwrap();
        assert_eq!(reply.text.as_deref(), Some(expected));
    }
    assert_eq!(
        fallback.calls(),
        0,
        "overloads in different requests are not consecutive"
    );
}

#[tokio::test(start_paused = true)]
async fn background_calls_go_to_the_fallback_at_the_first_overload() {
    let primary = Scripted::new("big", vec![overloaded()], unexpected);
    let fallback = Scripted::new("small", vec![text("title")], unexpected);
    let model = FallbackModel::new(primary.clone(), fallback.clone())
        .after(3)
        .unwrap();

    let start = Instant::now();
    let reply = model.chat(&ask(CallSource::BACKGROUND)).await.unwrap();

    assert_eq!(reply.text.as_deref(), Some("title"));
    assert_eq!((primary.calls(), fallback.calls()), (1, 1));
    assert_eq!(
        start.elapsed(),
        Duration::ZERO,
        "no load added to an overloaded primary"
    );
}

#[tokio::test(start_paused = true)]
async fn retry_after_replaces_the_backoff_between_overloads() {
    let busy = || -> Reply {
        Err(HttpError::new(529, "Overloaded")
            .with_header("retry-after", "7")
            .into())
    };
    let primary = Scripted::new("big", vec![busy(), text("ok")], unexpected);
    let model = FallbackModel::new(primary.clone(), Scripted::new("small", vec![], unexpected))
        .after(3)
        .unwrap();

    let start = Instant::now();
    model.chat(&ask(CallSource::MAIN_AGENT)).await.unwrap();
    assert_eq!(start.elapsed(), SECS(7));
}

#[tokio::test(start_paused = true)]
async fn overloaded_in_the_text_counts_and_the_fallback_error_is_returned_as_is() {
    let primary = Scripted::new(
        "big",
        vec![
            Err("upstream model is overloaded".into()),
            Err("upstream model is overloaded".into()),
        ],
        unexpected,
    );
    let fallback = Scripted::new(
        "small",
        vec![Err(HttpError::new(404, "no such model").into())],
        unexpected,
    );
    let model = FallbackModel::new(primary.clone(), fallback.clone())
        .after(2)
        .unwrap()
        .backoff(no_jitter());

    let error = model.chat(&ask(CallSource::MAIN_AGENT)).await.unwrap_err();
    assert_eq!(
        error.downcast_ref::<HttpError>().map(HttpError::status),
        Some(404)
    );
    assert_eq!((primary.calls(), fallback.calls()), (2, 1));
}

#[tokio::test(start_paused = true)]
async fn other_primary_errors_are_returned_without_falling_back() {
    let primary = Scripted::new("big", vec![unavailable()], unexpected);
    let fallback = Scripted::new("small", vec![], unexpected);
    let model = FallbackModel::new(primary.clone(), fallback.clone());

    let error = model.chat(&ask(CallSource::MAIN_AGENT)).await.unwrap_err();
    assert_eq!(
        error.downcast_ref::<HttpError>().map(HttpError::status),
        Some(503)
    );
    assert_eq!((primary.calls(), fallback.calls()), (1, 0));
}

/// Records heartbeats.
fn beats() -> (
    Arc<Mutex<Vec<Heartbeat>>>,
    impl Fn(&Heartbeat) + Send + Sync + 'static,
) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let sink = log.clone();
    (log, move |beat: &Heartbeat| {
        sink.lock().unwrap().push(beat.clone())
    })
}

#[tokio::test(start_paused = true)]
async fn persistent_retry_waits_out_retry_after_in_30s_chunks() {
    let busy = || -> Reply {
        Err(HttpError::new(529, "Overloaded")
            .with_header("retry-after", "90")
            .into())
    };
    let inner = Scripted::new("big", vec![busy(), busy(), text("finally")], unexpected);
    let (heartbeats, on_beat) = beats();
    let log = Arc::new(EventLog::new());
    let model = PersistentRetry::new(inner.clone())
        .on_heartbeat(on_beat)
        .event_log(log.clone());

    let start = Instant::now();
    let reply = model.chat(&ask(CallSource::BACKGROUND)).await.unwrap();

    assert_eq!(reply.text.as_deref(), Some("finally"));
    assert_eq!(inner.calls(), 3);
    assert_eq!(start.elapsed(), SECS(180));
    let heartbeats = heartbeats.lock().unwrap().clone();
    assert_eq!(heartbeats.len(), 6, "90 s is three chunks of 30 s, twice");
    let summary: Vec<_> = heartbeats
        .iter()
        .map(|b| {
            (
                b.attempt,
                b.waited.as_secs(),
                b.remaining.as_secs(),
                b.elapsed.as_secs(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (1, 30, 60, 30),
            (1, 60, 30, 60),
            (1, 90, 0, 90),
            (2, 30, 60, 120),
            (2, 60, 30, 150),
            (2, 90, 0, 180)
        ]
    );
    let overloaded = classify(&HttpError::new(529, "Overloaded")).kind;
    let retry = |attempt| Event::LlmRetry {
        layer: ModelLayer::PersistentRetry,
        attempt,
        delay: SECS(90),
        kind: overloaded,
    };
    assert_eq!(log.snapshot(), [retry(1), retry(2)]);
}

#[tokio::test(start_paused = true)]
async fn persistent_retry_stops_before_a_wait_that_would_pass_the_cap() {
    let inner = Scripted::new("big", vec![], unavailable);
    let (heartbeats, on_beat) = beats();
    let model = PersistentRetry::new(inner.clone())
        .max_duration(SECS(600))
        .backoff(
            RetrySchedule::default()
                .with_initial(SECS(1))
                .with_max(SECS(60))
                .with_jitter(0.0),
        )
        .on_heartbeat(on_beat);

    let start = Instant::now();
    let error = model.chat(&ask(CallSource::MAIN_AGENT)).await.unwrap_err();

    // Waits 1, 2, 4, 8, 16, 32, then 60 s eight times: the 15th call fails at 543 s and a
    // ninth 60 s wait would end at 603 s, past the 600 s cap.
    assert_eq!(start.elapsed(), SECS(543));
    assert_eq!(inner.calls(), 15);
    assert_eq!(heartbeats.lock().unwrap().len(), 5 + 2 + 8 * 2);
    assert_eq!(
        error.downcast_ref::<HttpError>().map(HttpError::status),
        Some(503)
    );
}

#[tokio::test(start_paused = true)]
async fn persistent_retry_is_capped_at_six_hours_by_default() {
    let hourly = || -> Reply {
        Err(HttpError::new(529, "Overloaded")
            .with_header("retry-after", "3600")
            .into())
    };
    let inner = Scripted::new("big", vec![], hourly);
    let (heartbeats, on_beat) = beats();
    let model = PersistentRetry::new(inner.clone()).on_heartbeat(on_beat);

    let start = Instant::now();
    model.chat(&ask(CallSource::MAIN_AGENT)).await.unwrap_err();

    assert_eq!(start.elapsed(), 6 * HOUR);
    assert_eq!(inner.calls(), 7, "calls at 0 h, 1 h, ... 6 h");
    assert_eq!(heartbeats.lock().unwrap().len(), 6 * 120);
}

#[tokio::test(start_paused = true)]
async fn persistent_retry_does_not_start_a_wait_longer_than_the_cap() {
    let inner = Scripted::new(
        "big",
        vec![Err(HttpError::new(503, "maintenance")
            .with_header("retry-after", "25200")
            .into())],
        unexpected,
    );
    let model = PersistentRetry::new(inner.clone());

    let start = Instant::now();
    model.chat(&ask(CallSource::MAIN_AGENT)).await.unwrap_err();
    assert_eq!((inner.calls(), start.elapsed()), (1, Duration::ZERO));
}

#[tokio::test(start_paused = true)]
async fn persistent_retry_returns_what_waiting_cannot_fix_at_once() {
    let cases: [fn() -> Reply; 4] = [
        || Err(HttpError::new(400, "Invalid value for 'temperature'").into()),
        || Err(HttpError::new(401, "Incorrect API key provided").into()),
        || {
            Err(HttpError::new(
                429,
                "You exceeded your current quota, please check your plan and billing details.",
            )
            .into())
        },
        || {
            Err(HttpError::new(503, "down")
                .with_header("x-should-retry", "false")
                .into())
        },
    ];
    for case in cases {
        let inner = Scripted::new("big", vec![case()], unexpected);
        let (heartbeats, on_beat) = beats();
        let model = PersistentRetry::new(inner.clone()).on_heartbeat(on_beat);

        let start = Instant::now();
        let error = model.chat(&ask(CallSource::MAIN_AGENT)).await.unwrap_err();
        let expected = case().unwrap_err();
        assert_eq!(
            error.downcast_ref::<HttpError>(),
            expected.downcast_ref::<HttpError>(),
            "the original error comes back"
        );
        assert_eq!((inner.calls(), start.elapsed()), (1, Duration::ZERO));
        assert!(heartbeats.lock().unwrap().is_empty());
    }
}

#[tokio::test(start_paused = true)]
async fn persistent_retry_rides_out_rate_limits_with_backoff() {
    let limited =
        || -> Reply { Err(HttpError::new(429, "Rate limit reached for requests").into()) };
    let inner = Scripted::new("big", vec![limited(), limited(), text("ok")], unexpected);
    let model = PersistentRetry::new(inner.clone()).backoff(no_jitter());

    let start = Instant::now();
    model.chat(&ask(CallSource::BACKGROUND)).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(500 + 1000));
    assert_eq!(inner.calls(), 3);
}

#[tokio::test(start_paused = true)]
async fn inside_an_agent_run_the_switch_lands_on_the_runs_report() {
    let primary = Scripted::new("big", vec![], overloaded);
    let fallback = Scripted::new("small", vec![text("answered by small")], unexpected);
    let model = FallbackModel::new(primary.clone(), fallback.clone())
        .after(2)
        .unwrap()
        .backoff(no_jitter());
    let agent = agent_errors::Agent::builder("a")
        .model(model)
        .build()
        .unwrap();

    let outcome = agent.run_with_report("hi").await;

    assert_eq!(outcome.result.unwrap(), "answered by small");
    let switches: Vec<&Event> = outcome.report.named("llm_fallback").collect();
    assert_eq!(
        switches,
        [&Event::LlmFallback {
            from: "big".into(),
            to: "small".into(),
            trigger: "overload",
            attempts: 2,
            kind: classify(&HttpError::new(529, "Overloaded")).kind,
        }]
    );
}

#[tokio::test(start_paused = true)]
async fn inside_a_run_persistent_retry_stops_when_the_runs_retries_are_spent() {
    let inner = Scripted::new("m", vec![], unavailable);
    let agent = agent_errors::Agent::builder("a")
        .model(PersistentRetry::new(inner.clone()).backoff(no_jitter()))
        .limits(agent_errors::Limits::default().with_max_retries(3))
        .build()
        .unwrap();

    let err = agent.run("hi").await.unwrap_err();

    assert!(err.model_error().is_some(), "{err}");
    assert_eq!(
        inner.calls(),
        4,
        "the first call and the 3 retries the run allows"
    );
}

#[tokio::test(start_paused = true)]
async fn inside_a_run_with_no_retries_left_an_overloaded_primary_falls_back_at_once() {
    let primary = Scripted::new("big", vec![], overloaded);
    let fallback = Scripted::new("small", vec![text("answered by small")], unexpected);
    let model = FallbackModel::new(primary.clone(), fallback.clone())
        .after(3)
        .unwrap();
    let agent = agent_errors::Agent::builder("a")
        .model(model)
        .limits(agent_errors::Limits::default().with_max_retries(0))
        .build()
        .unwrap();

    assert_eq!(agent.run("hi").await.unwrap(), "answered by small");
    assert_eq!(
        primary.calls(),
        1,
        "a switch is not a retry, but calling again is"
    );
    assert_eq!(fallback.calls(), 1);
}
