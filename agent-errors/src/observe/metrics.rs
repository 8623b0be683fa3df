//! Counters and histograms through the `metrics` facade: the user installs the exporter, and
//! with none installed every call here is a no-op.
//!
//! The recovery counters are derived from [`Event`]s in [`on_event`], called where every event
//! is emitted, so the numbers cannot drift from the report. The names are listed once, in the
//! README's metrics table.

use std::sync::LazyLock;
use std::time::Duration;

use metrics::{Key, Label, Level, Metadata, counter, histogram, with_recorder};

use crate::events::Event;

static METADATA: Metadata<'static> = Metadata::new(module_path!(), Level::INFO, None);

/// The keys of one tool's per-call metrics, made once when the registry is built: counting a
/// call then allocates and hashes nothing, so the happy path stays cheap with no recorder.
#[derive(Debug, Clone)]
pub(crate) struct ToolMeters {
    ok: Key,
    error: Key,
    stop: Key,
    duration: Key,
}

impl ToolMeters {
    pub(crate) fn new(tool: &str) -> Self {
        let calls = |outcome: &'static str| {
            let labels = vec![
                Label::new(TOOL, tool.to_owned()),
                Label::new("outcome", outcome),
            ];
            Key::from_parts("agent_errors.tool.calls", labels)
        };
        let labels = vec![Label::new(TOOL, tool.to_owned())];
        ToolMeters {
            ok: calls("ok"),
            error: calls("error"),
            stop: calls("stop"),
            duration: Key::from_parts("gen_ai.execute_tool.duration", labels),
        }
    }

    /// The meters of a tool name the model made up: one series for all of them.
    pub(crate) fn other() -> &'static ToolMeters {
        static OTHER: LazyLock<ToolMeters> = LazyLock::new(|| ToolMeters::new("_OTHER"));
        &OTHER
    }
}

/// The keys of an agent's per-run and per-turn metrics, made once when the agent is built.
#[derive(Debug, Clone)]
pub(crate) struct AgentMeters {
    model_calls: Key,
    chat_ok: Key,
    run: Key,
}

impl AgentMeters {
    pub(crate) fn new(agent: &str, model: &str) -> Self {
        let model = || Label::new(MODEL, model.to_owned());
        let chat = vec![Label::new(OPERATION, "chat"), model()];
        AgentMeters {
            model_calls: Key::from_parts("agent_errors.model.calls", vec![model()]),
            chat_ok: Key::from_parts("gen_ai.client.operation.duration", chat),
            run: Key::from_parts(
                "gen_ai.invoke_agent.duration",
                vec![Label::new(AGENT, agent.to_owned())],
            ),
        }
    }
}

fn count(key: &Key) {
    with_recorder(|recorder| recorder.register_counter(key, &METADATA).increment(1));
}

fn time(key: &Key, took: Duration) {
    with_recorder(|recorder| recorder.register_histogram(key, &METADATA).record(took));
}

/// Label keys, as the GenAI conventions spell them where they name one.
const TOOL: &str = "gen_ai.tool.name";
const MODEL: &str = "gen_ai.request.model";
const AGENT: &str = "gen_ai.agent.name";
const OPERATION: &str = "gen_ai.operation.name";
const ERROR_TYPE: &str = "error.type";

/// Counts what recovery did. `model` labels the model-call events, which do not name one.
pub(crate) fn on_event(event: &Event, model: &str) {
    let tool = || event.tool().unwrap_or_default().to_owned();
    match event {
        Event::ToolRetry { kind, .. } => {
            counter!("agent_errors.tool.retries", TOOL => tool(), ERROR_TYPE => kind.as_str())
                .increment(1);
        }
        Event::ToolFailed { kind, .. } => {
            counter!("agent_errors.tool.failures", TOOL => tool(), ERROR_TYPE => kind.as_str())
                .increment(1);
        }
        Event::ToolFixed { fixer, .. } => {
            counter!("agent_errors.tool.fixes", TOOL => tool(), "fixer" => fixer.clone())
                .increment(1);
        }
        Event::Escalated { severity, .. } => {
            let severity = severity.as_str();
            counter!("agent_errors.tool.escalations", TOOL => tool(), "severity" => severity)
                .increment(1);
        }
        Event::FellBack { to, .. } => {
            counter!("agent_errors.tool.fallbacks", TOOL => tool(), "to" => to.clone())
                .increment(1);
        }
        Event::Degraded { .. } => {
            counter!("agent_errors.tool.degrades", TOOL => tool()).increment(1);
        }
        Event::RetryBudgetExhausted { .. } => {
            counter!("agent_errors.tool.retries_refused", TOOL => tool()).increment(1);
        }
        Event::BreakerTripped { .. } => {
            counter!("agent_errors.breaker.trips", TOOL => tool()).increment(1);
        }
        Event::Terminated { kind, .. } => {
            counter!("agent_errors.tool.terminations", TOOL => tool(), ERROR_TYPE => kind.as_str())
                .increment(1);
        }
        Event::LlmRetry { .. } => {
            counter!("agent_errors.model.retries", MODEL => model.to_owned()).increment(1);
        }
        Event::LlmFallback { to, .. } => {
            let to = to.clone();
            counter!("agent_errors.model.fallbacks", MODEL => model.to_owned(), "to" => to)
                .increment(1);
        }
    }
}

/// How a tool call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CallEnd {
    /// Output for the model.
    Ok,
    /// An error result for the model.
    Error,
    /// The run ends.
    Stop,
}

/// One tool call ended.
pub(crate) fn tool_call(meters: &ToolMeters, end: CallEnd, took: Duration) {
    count(match end {
        CallEnd::Ok => &meters.ok,
        CallEnd::Error => &meters.error,
        CallEnd::Stop => &meters.stop,
    });
    time(&meters.duration, took);
}

/// One model turn ended, `on_llm_error`'s retries included; `error` is its `error.type`.
pub(crate) fn model_call(
    meters: &AgentMeters,
    model: &str,
    error: Option<&'static str>,
    took: Duration,
) {
    count(&meters.model_calls);
    match error {
        None => time(&meters.chat_ok, took),
        Some(kind) => histogram!(
            "gen_ai.client.operation.duration",
            OPERATION => "chat", MODEL => model.to_owned(), ERROR_TYPE => kind
        )
        .record(took),
    }
}

/// Tokens a model call used, by `gen_ai.token.type`.
#[allow(dead_code)] // Called from `spans::record_usage` once responses carry usage.
pub(crate) fn tokens(model: &str, input: u64, output: u64) {
    for (kind, count) in [("input", input), ("output", output)] {
        histogram!(
            "gen_ai.client.token.usage",
            OPERATION => "chat", MODEL => model.to_owned(), "gen_ai.token.type" => kind
        )
        .record(count as f64);
    }
}

/// A run ended: its duration, and why when it ended without an output.
pub(crate) fn run_ended(
    meters: &AgentMeters,
    agent: &str,
    stop: Option<&'static str>,
    took: Duration,
) {
    if let Some(reason) = stop {
        counter!("agent_errors.run.stops", AGENT => agent.to_owned(), "reason" => reason)
            .increment(1);
    }
    time(&meters.run, took);
}

/// A service breaker's circuit changed state: `store` is `local` or `shared`, `to` the state it
/// went to. Changes are rare, so the key is built here rather than kept.
pub(crate) fn breaker_changed(key: &str, store: &'static str, to: &'static str) {
    counter!(
        "agent_errors.service_breaker.transitions",
        "breaker" => key.to_owned(), "store" => store, "to" => to
    )
    .increment(1);
}
