//! Every attempt visible: each attempt made after a failure, at every layer (the tool ladder,
//! `on_llm_error`, `FallbackModel`, `PersistentRetry`), is one event on the run's report with its
//! number, the wait before the next, the failure's kind and, for a fallback, from, to and why;
//! the same fields on the `tracing` event inside the call's span; and one count by layer, action
//! and kind. The transport's and rig's layers are tested beside their servers (`openai.rs`,
//! `rig.rs`).

use std::time::Duration;

use agent_errors::breaker::BreakerState;
use agent_errors::classify::classify;
use agent_errors::llm::{FallbackModel, FallbackOn, PersistentRetry};
use agent_errors::observe::ModelLayer;
use agent_errors::retry::RetrySchedule;
use agent_errors::testing::{FaultyTool, ScriptedModel, echo_tool};
use agent_errors::{
    Agent, AgentBuilder, ErrorKind, Event, Fix, HttpError, LlmErrorDecision,
    build::FixerDef,
    policy::{Action, Policy, PolicyKey, RetryAction},
};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use tracing_subscriber::layer::SubscriberExt;

use crate::capture::{Capture, metrics_of, serial};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn kind_of(error: HttpError) -> ErrorKind {
    classify(&error).kind
}

/// One turn of three calls: `fetch` fails once (503) and is retried after about 100 ms,
/// `parse` is called with bad arguments and re-run with a fixer's, `primary` answers 404 and
/// falls back to `backup`.
fn three_recoveries() -> Agent {
    let model = ScriptedModel::named("analyst")
        .tool_calls(THREE_CALLS)
        .text("done");
    with_three_recoveries(model).build().unwrap()
}

const THREE_CALLS: [(&str, &str); 3] = [
    ("fetch", r#"{"text":"a"}"#),
    ("parse", r#"{"txt":"b"}"#),
    ("primary", r#"{"text":"c"}"#),
];

/// An agent of `model` with [`three_recoveries`]'s tools and policies.
fn with_three_recoveries(model: impl agent_errors::ChatModel + 'static) -> AgentBuilder {
    let fetch = FaultyTool::new(echo_tool("fetch")).fail_times(1, || HttpError::new(503, "busy"));
    let primary =
        FaultyTool::new(echo_tool("primary")).fail_times(9, || HttpError::new(404, "gone"));
    let repair = FixerDef::from_fn("repair", |_| Ok(Fix::Args(r#"{"text":"fixed"}"#.into())));
    let retry = RetryAction {
        max_attempts: 3.try_into().unwrap(),
        initial: Some(ms(100)),
        max: None,
        when_safe: false,
    };
    Agent::builder("observed")
        .model(model)
        .tools([
            fetch.tool(),
            echo_tool("parse"),
            primary.tool(),
            echo_tool("backup"),
        ])
        .fixer(repair)
        .on_tool_error(
            "fetch",
            Policy::new().on(PolicyKey::Execution, Action::Retry(retry)),
        )
        .on_tool_error(
            "parse",
            Policy::new().on(PolicyKey::InvalidArgs, Action::fix("repair", 1).unwrap()),
        )
        .on_tool_error(
            "primary",
            Policy::new().on(PolicyKey::Execution, Action::fallback("backup")),
        )
}

#[tokio::test(start_paused = true)]
async fn each_attempt_on_a_tool_ladder_is_an_event_with_its_number_and_kind() {
    let outcome = three_recoveries().run_with_report("go").await;
    assert_eq!(outcome.result.unwrap(), "done");

    let mut events = outcome
        .report
        .events
        .iter()
        .filter(|e| e.name() != "tool_fixed");
    let Some(Event::ToolRetry {
        tool,
        attempt: 1,
        kind: ErrorKind::Transient,
        delay,
    }) = events.next()
    else {
        panic!("{:?}", outcome.report.events);
    };
    assert_eq!(tool, "fetch");
    assert!(
        (ms(75)..=ms(125)).contains(delay),
        "100 ms, jittered: {delay:?}"
    );
    assert_eq!(
        events.collect::<Vec<_>>(),
        [
            &Event::ToolRerun {
                tool: "parse".into(),
                fixer: "repair".into(),
                attempt: 1,
                kind: ErrorKind::Validation,
            },
            &Event::FellBack {
                tool: "primary".into(),
                to: "backup".into(),
                attempt: 1,
                kind: ErrorKind::NotFound,
            },
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn the_attempt_events_are_in_the_calls_one_span_with_the_conventions_names() {
    let _serial = serial().await;
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    let _guard = crate::support::subscriber::set_default(subscriber);
    // Every callsite registered before the interest cache is rebuilt (a test on another thread
    // with no subscriber may have been first to reach one): the run under test is the second.
    three_recoveries().run("go").await.unwrap();
    tracing::callsite::rebuild_interest_cache();
    let before = capture.spans().len();

    three_recoveries().run("go").await.unwrap();

    let spans = capture.spans().split_off(before);
    let tool = |name: &str| {
        let found: Vec<_> = spans
            .iter()
            .filter(|s| s.name == "execute_tool")
            .filter(|s| s.fields.get("gen_ai.tool.name").map(String::as_str) == Some(name))
            .collect();
        assert_eq!(found.len(), 1, "one span for the call of {name}");
        found[0].clone()
    };
    let field = |fields: &std::collections::BTreeMap<String, String>, name: &str| {
        fields.get(name).cloned().unwrap_or_default()
    };
    let fetch = tool("fetch");
    assert_eq!(fetch.events, ["tool_retry"]);
    let retry = &fetch.event_fields[0];
    assert_eq!(field(retry, "gen_ai.tool.name"), "fetch");
    assert_eq!(field(retry, "agent_errors.attempt"), "1");
    assert_eq!(field(retry, "error.type"), "transient");
    let delay: u64 = field(retry, "agent_errors.delay_ms").parse().unwrap();
    assert!((75..=125).contains(&delay), "100 ms, jittered: {delay}");

    let parse = tool("parse");
    assert_eq!(parse.events, ["tool_rerun", "tool_fixed"]);
    assert_eq!(
        field(&parse.event_fields[0], "agent_errors.fixer"),
        "repair"
    );
    assert_eq!(field(&parse.event_fields[0], "error.type"), "validation");

    let primary = tool("primary");
    assert_eq!(primary.events, ["fell_back"]);
    let fell_back = &primary.event_fields[0];
    assert_eq!(field(fell_back, "agent_errors.fallback.to"), "backup");
    assert_eq!(field(fell_back, "agent_errors.attempt"), "1");
    assert_eq!(field(fell_back, "error.type"), "not_found");
}

#[tokio::test(start_paused = true)]
async fn an_on_llm_error_retry_names_its_layer_and_the_failures_kind() {
    let agent = Agent::builder("a")
        .model(
            ScriptedModel::new()
                .error(HttpError::new(503, "busy"))
                .error(HttpError::new(429, "slow down"))
                .text("ok"),
        )
        .on_llm_error(|_, _| LlmErrorDecision::retry(3, ms(200)))
        .build()
        .unwrap();

    let outcome = agent.run_with_report("hi").await;

    assert_eq!(outcome.result.unwrap(), "ok");
    assert_eq!(
        outcome.report.events,
        [
            Event::LlmRetry {
                layer: ModelLayer::OnLlmError,
                attempt: 1,
                delay: ms(200),
                kind: kind_of(HttpError::new(503, "busy")),
            },
            Event::LlmRetry {
                layer: ModelLayer::OnLlmError,
                attempt: 2,
                delay: ms(400),
                kind: ErrorKind::Quota,
            },
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_fallback_model_reports_each_retry_of_its_primary_and_why_it_switched() {
    let overloaded = || HttpError::new(529, "overloaded");
    let fallback = FallbackModel::new(
        ScriptedModel::named("big").errors(3, overloaded),
        ScriptedModel::named("small").text("done"),
    )
    .backoff(RetrySchedule::default().with_jitter(0.0));
    let agent = Agent::builder("a").model(fallback).build().unwrap();

    let outcome = agent.run_with_report("hi").await;

    assert_eq!(outcome.result.unwrap(), "done");
    let kind = kind_of(overloaded());
    let retry = |attempt, delay| Event::LlmRetry {
        layer: ModelLayer::FallbackModel,
        attempt,
        delay,
        kind,
    };
    assert_eq!(
        outcome.report.events,
        [
            retry(1, ms(500)),
            retry(2, ms(1000)),
            // The third overload opened the primary's circuit: the next run would skip it.
            Event::LlmCircuit {
                model: "big".into(),
                state: BreakerState::Open,
            },
            Event::LlmFallback {
                from: "big".into(),
                to: "small".into(),
                trigger: "overload",
                attempts: 3,
                kind,
            },
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_fallback_on_a_bad_credential_says_so_after_one_call() {
    let fallback = FallbackModel::new(
        ScriptedModel::named("big").error(HttpError::new(401, "bad key")),
        ScriptedModel::named("small").text("done"),
    )
    .on([FallbackOn::AuthOrConfig]);
    let agent = Agent::builder("a").model(fallback).build().unwrap();

    let outcome = agent.run_with_report("hi").await;

    assert_eq!(outcome.result.unwrap(), "done");
    assert_eq!(
        outcome.report.events,
        [Event::LlmFallback {
            from: "big".into(),
            to: "small".into(),
            trigger: "auth_or_config",
            attempts: 1,
            kind: ErrorKind::Auth,
        }]
    );
}

#[tokio::test(start_paused = true)]
async fn a_persistent_retry_names_its_layer_and_the_failures_kind() {
    let model = PersistentRetry::new(
        ScriptedModel::new()
            .error(HttpError::new(503, "down"))
            .text("back"),
    )
    .backoff(RetrySchedule::default().with_jitter(0.0));
    let agent = Agent::builder("a").model(model).build().unwrap();

    let outcome = agent.run_with_report("hi").await;

    assert_eq!(outcome.result.unwrap(), "back");
    assert_eq!(
        outcome.report.events,
        [Event::LlmRetry {
            layer: ModelLayer::PersistentRetry,
            attempt: 1,
            delay: ms(500),
            kind: kind_of(HttpError::new(503, "down")),
        }]
    );
}

#[tokio::test(start_paused = true)]
async fn attempts_are_counted_by_layer_action_and_kind() {
    let _serial = serial().await;
    let recorder = DebuggingRecorder::new();
    let _guard = metrics::set_default_local_recorder(&recorder);
    let fallback = FallbackModel::new(
        // Overloaded on each of its two calls of each of the three requests.
        ScriptedModel::named("big").errors(6, || HttpError::new(529, "overloaded")),
        ScriptedModel::named("small")
            .error(HttpError::new(503, "busy"))
            .tool_calls(THREE_CALLS)
            .text("done"),
    )
    .after(2)
    .unwrap()
    // Each request asks the primary again: its retries are what is counted.
    .forget();
    let agent = with_three_recoveries(fallback)
        .on_llm_error(|_, _| LlmErrorDecision::retry(2, Duration::ZERO))
        .build()
        .unwrap();

    agent.run("go").await.unwrap();

    let metrics = metrics_of(&recorder);
    let attempts = |layer: &str, action: &str, kind: &str| {
        let key =
            format!("agent_errors.attempts{{action={action},error.type={kind},layer={layer}}}");
        match metrics.get(&key) {
            Some(DebugValue::Counter(n)) => *n,
            other => panic!("{key}: {other:?} in {:#?}", metrics.keys()),
        }
    };
    let overload = kind_of(HttpError::new(529, "overloaded"));
    assert_eq!(attempts("tool", "retry", "transient"), 1);
    assert_eq!(attempts("tool", "fix", "validation"), 1);
    assert_eq!(attempts("tool", "fallback", "not_found"), 1);
    assert_eq!(attempts("fallback_model", "retry", overload.as_str()), 3);
    assert_eq!(attempts("fallback_model", "fallback", overload.as_str()), 3);
    let busy = kind_of(HttpError::new(503, "busy"));
    assert_eq!(attempts("on_llm_error", "retry", busy.as_str()), 1);
    let recoveries = |layer: &str, outcome: &str, kind: &str| {
        let key =
            format!("agent_errors.recoveries{{error.type={kind},layer={layer},outcome={outcome}}}");
        match metrics.get(&key) {
            Some(DebugValue::Counter(n)) => *n,
            other => panic!("{key}: {other:?} in {:#?}", metrics.keys()),
        }
    };
    for kind in ["transient", "validation", "not_found"] {
        assert_eq!(recoveries("tool", "recovered", kind), 1, "{kind}");
    }
    let gave_up = recoveries("fallback_model", "gave_up", overload.as_str());
    assert_eq!(
        gave_up, 3,
        "the primary gave up on each request, and the fallback answered"
    );
    assert_eq!(recoveries("on_llm_error", "recovered", busy.as_str()), 1);
    let key = "agent_errors.model.fallbacks{gen_ai.request.model=big,to=small,trigger=overload}";
    assert!(
        matches!(metrics.get(key), Some(DebugValue::Counter(3))),
        "{:#?}",
        metrics.keys()
    );
}
