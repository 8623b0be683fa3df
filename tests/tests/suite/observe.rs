//! What a run looks like from outside: its span tree, its metrics, and its live event stream.

use std::num::NonZeroU32;
use std::time::Duration;

use agent_errors::observe::Missed;
use agent_errors::testing::{FaultyTool, ScriptedModel, echo_tool};
use agent_errors::{
    Agent, Event, Fix, HttpError, LlmErrorDecision, RunOptions,
    breaker::{Admission, BreakerStore, MemoryStore},
    build::FixerDef,
    policy::{Action, Policy, PolicyKey},
};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use tracing_subscriber::layer::SubscriberExt;

use crate::capture::{Capture, metrics_of, serial};

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// One turn of three calls: `fetch` fails once and is retried, `parse` is called with bad
/// arguments and fixed, `primary` fails and falls back to `backup`. The first model call fails
/// and is retried too.
fn recovering_agent() -> Agent {
    let fetch = FaultyTool::new(echo_tool("fetch")).fail_times(1, || HttpError::new(503, "busy"));
    let primary =
        FaultyTool::new(echo_tool("primary")).fail_times(9, || HttpError::new(404, "gone"));
    let repair = FixerDef::from_fn("repair", |_| Ok(Fix::Args(r#"{"text":"fixed"}"#.into())));
    let model = ScriptedModel::named("analyst")
        .error(HttpError::new(503, "model busy"))
        .tool_calls([
            ("fetch", r#"{"text":"a"}"#),
            ("parse", r#"{"txt":"b"}"#),
            ("primary", r#"{"text":"c"}"#),
        ])
        .text("done");
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
            Policy::new().on(PolicyKey::Execution, Action::retry(3).unwrap()),
        )
        .on_tool_error(
            "parse",
            Policy::new().on(PolicyKey::InvalidArgs, Action::fix("repair", 1).unwrap()),
        )
        .on_tool_error(
            "primary",
            Policy::new().on(PolicyKey::Execution, Action::fallback("backup")),
        )
        .on_llm_error(|_, _| LlmErrorDecision::retry(2, secs(1)).unwrap())
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_run_is_one_span_tree_with_recovery_events_in_the_spans_they_happened_in() {
    let _serial = serial().await;
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    let _guard = crate::support::subscriber::set_default(subscriber);
    tracing::callsite::rebuild_interest_cache();

    let outcome = recovering_agent().run_with_report("go").await;
    assert_eq!(outcome.result.unwrap(), "done");

    let spans = capture.spans();
    let shape: Vec<(&str, Option<usize>)> =
        spans.iter().map(|s| (s.name.as_str(), s.parent)).collect();
    assert_eq!(
        shape,
        [
            ("invoke_agent", None),
            ("chat", Some(0)),
            ("execute_tool", Some(0)),
            ("execute_tool", Some(0)),
            ("execute_tool", Some(0)),
            ("chat", Some(0)),
        ]
    );
    let field = |i: usize, name: &str| spans[i].fields.get(name).map(String::as_str);
    assert_eq!(field(0, "otel.name"), Some("invoke_agent observed"));
    assert_eq!(field(0, "gen_ai.operation.name"), Some("invoke_agent"));
    assert_eq!(field(0, "gen_ai.agent.name"), Some("observed"));
    assert_eq!(field(0, "error.type"), None, "the run succeeded");
    assert_eq!(field(1, "otel.name"), Some("chat analyst"));
    assert_eq!(field(1, "gen_ai.operation.name"), Some("chat"));
    assert_eq!(field(1, "gen_ai.request.model"), Some("analyst"));
    assert_eq!(
        spans[1].events,
        ["llm_retry"],
        "the model retry is inside its chat span"
    );

    let tools: Vec<_> = (2..5)
        .map(|i| {
            assert_eq!(field(i, "gen_ai.operation.name"), Some("execute_tool"));
            assert_eq!(
                field(i, "error.type"),
                None,
                "recovered calls are not errors"
            );
            let name = field(i, "gen_ai.tool.name").unwrap();
            assert_eq!(
                field(i, "otel.name"),
                Some(&*format!("execute_tool {name}"))
            );
            assert!(field(i, "gen_ai.tool.call.id").is_some());
            (name, spans[i].events.clone())
        })
        .collect();
    assert_eq!(
        tools,
        [
            ("fetch", vec!["tool_retry".to_owned()]),
            (
                "parse",
                vec!["tool_rerun".to_owned(), "tool_fixed".to_owned()]
            ),
            ("primary", vec!["fell_back".to_owned()]),
        ]
    );
    assert!(
        spans
            .iter()
            .all(|s| !s.fields.contains_key("gen_ai.tool.call.arguments"))
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_tool_call_and_a_failed_run_carry_their_error_type() {
    let _serial = serial().await;
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    let _guard = crate::support::subscriber::set_default(subscriber);
    tracing::callsite::rebuild_interest_cache();
    let token = FaultyTool::new(echo_tool("fetch")).fail_times(1, || HttpError::new(401, "no"));
    let agent = Agent::builder("a")
        .model(ScriptedModel::new().tool_call("fetch", r#"{"text":"a"}"#))
        .tool(token.tool())
        .build()
        .unwrap();

    assert!(agent.run("go").await.is_err());

    let spans = capture.spans();
    let tool = spans.iter().find(|s| s.name == "execute_tool").unwrap();
    assert_eq!(tool.fields["error.type"], "auth");
    assert_eq!(tool.fields["otel.status_code"], "ERROR");
    assert_eq!(spans[0].fields["error.type"], "terminated");
}

#[tokio::test(start_paused = true)]
async fn recovery_is_counted_per_tool_and_calls_are_timed() {
    let _serial = serial().await;
    let recorder = DebuggingRecorder::new();
    let _guard = metrics::set_default_local_recorder(&recorder);

    let outcome = recovering_agent().run_with_report("go").await;
    assert!(outcome.result.is_ok());

    let metrics = metrics_of(&recorder);
    let counter = |key: &str| match metrics.get(key) {
        Some(DebugValue::Counter(n)) => *n,
        other => panic!("{key}: {other:?} in {:#?}", metrics.keys()),
    };
    let samples = |key: &str| match metrics.get(key) {
        Some(DebugValue::Histogram(values)) => values.iter().map(|v| v.0).collect::<Vec<_>>(),
        other => panic!("{key}: {other:?} in {:#?}", metrics.keys()),
    };
    for tool in ["fetch", "parse", "primary"] {
        let key = format!("agent_errors.tool.calls{{gen_ai.tool.name={tool},outcome=ok}}");
        assert_eq!(counter(&key), 1);
        let key = format!("gen_ai.execute_tool.duration{{gen_ai.tool.name={tool}}}");
        assert_eq!(samples(&key).len(), 1);
    }
    assert_eq!(
        counter("agent_errors.tool.retries{error.type=transient,gen_ai.tool.name=fetch}"),
        1
    );
    assert_eq!(
        counter("agent_errors.tool.fixes{fixer=repair,gen_ai.tool.name=parse}"),
        1
    );
    assert_eq!(
        counter("agent_errors.tool.fallbacks{gen_ai.tool.name=primary,to=backup}"),
        1
    );
    assert_eq!(
        counter("agent_errors.model.retries{gen_ai.request.model=analyst}"),
        1
    );
    assert_eq!(
        counter("agent_errors.model.calls{gen_ai.request.model=analyst}"),
        2
    );
    let chat =
        "gen_ai.client.operation.duration{gen_ai.operation.name=chat,gen_ai.request.model=analyst}";
    let chat = samples(chat);
    assert_eq!(chat.len(), 2);
    assert_eq!(
        chat[0], 1.0,
        "the first turn waited out its one-second retry"
    );
    assert_eq!(
        samples("gen_ai.invoke_agent.duration{gen_ai.agent.name=observed}").len(),
        1
    );
    assert!(
        !metrics
            .keys()
            .any(|k| k.starts_with("agent_errors.run.stops"))
    );
}

#[tokio::test(start_paused = true)]
async fn live_streams_get_every_event_in_order_tagged_with_its_run() {
    let _serial = serial().await;
    let agent = recovering_agent();
    let mut everything = agent.subscribe();
    let (options, mut this_run) = RunOptions::new().events(16);

    let outcome = agent.run_with("go", options).await;

    let mut live = Vec::new();
    while let Some(item) = this_run.recv().await {
        live.push(item.expect("nothing missed"));
    }
    let events: Vec<Event> = live.iter().map(|e| e.event.clone()).collect();
    assert_eq!(events, outcome.report.events);
    assert_eq!(events.len(), 5, "{events:?}");
    let run = live[0].run;
    assert!(live.iter().all(|e| e.run == run));
    for expected in &live {
        assert_eq!(everything.try_recv(), Some(Ok(expected.clone())));
    }
    assert_eq!(everything.try_recv(), None);
}

#[tokio::test(start_paused = true)]
async fn a_consumer_that_falls_behind_misses_the_oldest_events_and_is_told() {
    let _serial = serial().await;
    let flaky = FaultyTool::new(echo_tool("fetch")).fail_times(4, || HttpError::new(503, "busy"));
    let agent = Agent::builder("a")
        .model(
            ScriptedModel::new()
                .tool_call("fetch", r#"{"text":"a"}"#)
                .text("done"),
        )
        .tool(flaky.tool())
        .on_tool_error(
            "fetch",
            Policy::new().on(PolicyKey::Execution, Action::retry(5).unwrap()),
        )
        .build()
        .unwrap();
    let (options, mut slow) = RunOptions::new().events(2);

    // Nobody reads while the run goes on: it finishes all the same.
    let outcome = agent.run_with("go", options).await;
    assert_eq!(outcome.result.unwrap(), "done");
    assert_eq!(outcome.report.count("tool_retry"), 4);

    assert_eq!(slow.recv().await, Some(Err(Missed(2))));
    let rest: Vec<Event> = [slow.recv().await, slow.recv().await]
        .into_iter()
        .map(|item| item.unwrap().unwrap().event)
        .collect();
    assert_eq!(rest, outcome.report.events[2..]);
    assert_eq!(slow.recv().await, None);
}

#[tokio::test(start_paused = true)]
async fn a_service_breaker_opening_half_opening_and_closing_is_counted_per_key() {
    let _serial = serial().await;
    let recorder = DebuggingRecorder::new();
    let _guard = metrics::set_default_local_recorder(&recorder);
    let store = MemoryStore::new(NonZeroU32::new(2).unwrap(), secs(30));

    store.record("weather-api", false);
    store.record("weather-api", false);
    // A call let through before it opened fails late: the circuit stays open, no new change.
    store.record("weather-api", false);
    tokio::time::advance(secs(30)).await;
    assert_eq!(store.admit("weather-api").await, Admission::Probe);
    store.record("weather-api", false);
    tokio::time::advance(secs(30)).await;
    assert_eq!(store.admit("weather-api").await, Admission::Probe);
    store.record("weather-api", true);
    // Successes on a closed circuit change nothing.
    store.record("weather-api", true);
    store.record("geocode", true);

    let metrics = metrics_of(&recorder);
    let transitions = |to: &str| {
        let key = format!(
            "agent_errors.service_breaker.transitions{{breaker=weather-api,store=local,to={to}}}"
        );
        match metrics.get(&key) {
            Some(DebugValue::Counter(n)) => *n,
            other => panic!("{key}: {other:?} in {:#?}", metrics.keys()),
        }
    };
    assert_eq!(transitions("open"), 2);
    assert_eq!(transitions("half_open"), 2);
    assert_eq!(transitions("closed"), 1);
    assert_eq!(
        metrics
            .keys()
            .filter(|k| k.starts_with("agent_errors.service_breaker"))
            .count(),
        3,
        "{:#?}",
        metrics.keys()
    );
}

#[tokio::test(start_paused = true)]
async fn the_chat_span_names_the_model_that_answered_behind_a_fallback() {
    let _serial = serial().await;
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    let _guard = crate::support::subscriber::set_default(subscriber);
    tracing::callsite::rebuild_interest_cache();

    let overloaded = || HttpError::new(529, "overloaded");
    let primary = ScriptedModel::named("big").errors(3, overloaded);
    let fallback = ScriptedModel::named("small").text("done");
    let model = agent_errors::llm::FallbackModel::new(primary, fallback);
    let agent = Agent::builder("a").model(model).build().unwrap();
    assert_eq!(agent.run("go").await.unwrap(), "done");

    let spans = capture.spans();
    let chat = spans.iter().find(|s| s.name == "chat").unwrap();
    let field = |name: &str| chat.fields.get(name).map(String::as_str);
    assert_eq!(field("gen_ai.request.model"), Some("big"));
    assert_eq!(field("gen_ai.response.model"), Some("small"));
}

#[tokio::test]
async fn a_run_s_span_carries_what_it_used_and_a_usage_limit_stop() {
    let _serial = serial().await;
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    let _guard = crate::support::subscriber::set_default(subscriber);
    tracing::callsite::rebuild_interest_cache();
    let model = ScriptedModel::new();
    let mut turn = agent_errors::ChatResponse::tool_calls(vec![agent_errors::ToolCall::new(
        model.next_call_id(),
        "fetch",
        r#"{"text":"a"}"#,
    )]);
    turn.usage = Some(agent_errors::llm::Usage::new(30, 7));
    model.push(agent_errors::testing::Reply::response(turn));
    let agent = Agent::builder("capped")
        .model(model)
        .tool(echo_tool("fetch"))
        .usage_limits(agent_errors::run::UsageLimits::new().max_requests(1))
        .build()
        .unwrap();

    assert!(agent.run("go").await.unwrap_err().usage_limit().is_some());

    let spans = capture.spans();
    let run = spans.iter().find(|s| s.name == "invoke_agent").unwrap();
    let field = |name: &str| run.fields.get(name).map(String::as_str);
    assert_eq!(field("error.type"), Some("usage_limit"));
    assert_eq!(field("gen_ai.usage.input_tokens"), Some("30"));
    assert_eq!(field("gen_ai.usage.output_tokens"), Some("7"));
    assert_eq!(field("agent_errors.usage.requests"), Some("1"));
    assert_eq!(field("agent_errors.usage.tool_calls"), Some("1"));
}

/// Model-written text reaches spans and log fields escaped: a call id or tool name holding a
/// line break and an ESC cannot forge log lines or move a terminal's cursor.
#[tokio::test]
async fn a_model_written_call_id_and_tool_name_reach_spans_and_events_escaped() {
    use agent_errors::testing::Reply;
    use agent_errors::{ChatResponse, ToolCall};

    let _serial = serial().await;
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    let _guard = crate::support::subscriber::set_default(subscriber);
    tracing::callsite::rebuild_interest_cache();

    let forged = "call_1\n2026-12-01T00:00:00Z ERROR forged\u{1b}[2K";
    let calls = vec![
        ToolCall::new(forged, "fetch", r#"{"text": "a"}"#),
        ToolCall::new("call_2", "no\nsuch\u{1b}[31m", "{}"),
    ];
    let model = ScriptedModel::new()
        .reply(Reply::response(ChatResponse::tool_calls(calls)))
        .text("done");
    let agent = Agent::builder("observed")
        .model(model)
        .tool(echo_tool("fetch"))
        .build()
        .unwrap();
    let outcome = agent.run_with_report("go").await;
    assert_eq!(outcome.result.unwrap(), "done");

    let spans = capture.spans();
    let tools: Vec<_> = spans.iter().filter(|s| s.name == "execute_tool").collect();
    assert_eq!(
        tools[0]
            .fields
            .get("gen_ai.tool.call.id")
            .map(String::as_str),
        Some(r"call_1\u{a}2026-12-01T00:00:00Z ERROR forged\u{1b}[2K")
    );
    let every_value = spans.iter().flat_map(|s| {
        (s.fields.values()).chain(s.event_fields.iter().flat_map(|fields| fields.values()))
    });
    for value in every_value {
        assert!(
            !value.contains('\n') && !value.contains('\u{1b}'),
            "a raw control character reached a field: {value:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn every_span_of_a_run_carries_its_id_and_a_resumed_run_says_it_resumed() {
    let _serial = serial().await;
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    let _guard = crate::support::subscriber::set_default(subscriber);
    tracing::callsite::rebuild_interest_cache();

    let store: std::sync::Arc<dyn agent_errors::checkpoint::CheckpointStore> =
        std::sync::Arc::new(agent_errors::checkpoint::MemoryCheckpoints::new());
    let agent = |model: ScriptedModel| {
        Agent::builder("support")
            .model(model)
            .tool(echo_tool("refund").requires_approval(true))
            .shared_checkpoints(std::sync::Arc::clone(&store))
            .build()
            .unwrap()
    };
    let model = ScriptedModel::new().tool_call("refund", r#"{"text": "order 7"}"#);
    let options = RunOptions::new().run_id("refund-7");
    let waiting = agent(model).run_with("refund order 7", options).await;
    let pending = waiting.pending_approvals()[0].clone();
    let answer =
        agent_errors::approval::Answer::to(&pending, agent_errors::approval::Decision::Approve);
    let resumed = agent(ScriptedModel::new().text("refunded"))
        .resume("refund-7", RunOptions::new().answered(answer))
        .await;
    assert_eq!(resumed.result.unwrap(), "refunded");

    let spans = capture.spans();
    let ours = ["invoke_agent", "chat", "execute_tool"];
    let ours: Vec<_> = spans
        .iter()
        .filter(|s| ours.contains(&s.name.as_str()))
        .collect();
    for name in ["invoke_agent", "chat", "execute_tool"] {
        assert!(
            ours.iter().any(|s| s.name == name),
            "a `{name}` span: {ours:#?}"
        );
    }
    for span in &ours {
        let id = span
            .fields
            .get("gen_ai.conversation.id")
            .map(String::as_str);
        assert_eq!(id, Some("refund-7"), "{span:#?}");
    }
    let runs: Vec<_> = ours.iter().filter(|s| s.name == "invoke_agent").collect();
    let resumed: Vec<_> = runs
        .iter()
        .map(|s| s.fields.get("agent_errors.run.resumed").map(String::as_str))
        .collect();
    assert_eq!(resumed, [Some("false"), Some("true")]);
}

/// The `agent_errors.*` names quoted in `text`, as the library names its metrics.
fn metric_names(text: &str) -> std::collections::BTreeSet<String> {
    text.split('"')
        .skip(1)
        .step_by(2)
        .filter(|quoted| {
            quoted.starts_with("agent_errors.")
                && quoted
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c == '_' || c == '.')
        })
        .map(str::to_owned)
        .collect()
}

/// Every metric the library records has its row in the observing guide's table, and every row
/// names one it records: the guide is where a dashboard is built from.
#[test]
fn every_metric_the_library_records_has_its_row_in_the_observing_guide() {
    let crate_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../agent-errors");
    let read = |path: &str| std::fs::read_to_string(crate_dir.join(path)).expect(path);
    let recorded: std::collections::BTreeSet<String> = [
        "src/events/trace.rs",
        "src/observe/metrics.rs",
        "src/breaker/store.rs",
    ]
    .into_iter()
    .flat_map(|path| metric_names(&read(path)))
    .collect();
    assert!(
        recorded.contains("agent_errors.tool.retries"),
        "the scan finds the names it checks"
    );
    let guide = read("guide/07-observing.md");
    let rows: std::collections::BTreeSet<String> = guide
        .lines()
        .filter_map(|line| line.strip_prefix("| `agent_errors."))
        .filter_map(|rest| rest.split_once('`'))
        .filter(|(_, after)| after.starts_with(" | counter") || after.starts_with(" | histogram"))
        .map(|(name, _)| format!("agent_errors.{name}"))
        .collect();
    let undocumented: Vec<_> = recorded.difference(&rows).collect();
    let unrecorded: Vec<_> = rows.difference(&recorded).collect();
    assert!(
        undocumented.is_empty() && unrecorded.is_empty(),
        "recorded but not in the guide's table: {undocumented:?}; in the table but not recorded: \
         {unrecorded:?}"
    );
}
