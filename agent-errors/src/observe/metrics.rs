//! Counters and histograms through the `metrics` facade: the user installs the exporter, and
//! with none installed every call here is a no-op.
//!
//! These are the meters of calls, turns and runs; the recovery counters are derived from each
//! event where it is emitted (`events::count`), so the numbers cannot drift from the report.
//! The names are listed once, in the metrics table of the guide's observing chapter
//! (`agent-errors/guide/07-observing.md`).

use std::sync::LazyLock;
use std::time::Duration;

use metrics::{Key, Label, Level, Metadata, counter, histogram, with_recorder};

use crate::events::label::{ERROR_TYPE, MODEL, TOOL};

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
const AGENT: &str = "gen_ai.agent.name";
const OPERATION: &str = "gen_ai.operation.name";

/// How a tool call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CallEnd {
    /// Output for the model.
    Ok,
    /// An error result for the model.
    Error,
    /// The run ends, for a failure of this `error.type`.
    Stop {
        /// The failure's kind.
        error_type: &'static str,
    },
}

/// One tool call ended: its count and its duration, handed to the recorder found once.
pub(crate) fn tool_call(meters: &ToolMeters, end: CallEnd, took: Duration) {
    let calls = match end {
        CallEnd::Ok => &meters.ok,
        CallEnd::Error => &meters.error,
        CallEnd::Stop { .. } => &meters.stop,
    };
    with_recorder(|recorder| {
        recorder.register_counter(calls, &METADATA).increment(1);
        recorder
            .register_histogram(&meters.duration, &METADATA)
            .record(took);
    });
}

/// One model turn ended, `on_llm_error`'s retries included; `error` is its `error.type`.
pub(crate) fn model_call(
    meters: &AgentMeters,
    model: &str,
    error: Option<&'static str>,
    took: Duration,
) {
    let Some(kind) = error else {
        // The usual turn: both meters handed to the recorder found once.
        return with_recorder(|recorder| {
            let calls = recorder.register_counter(&meters.model_calls, &METADATA);
            calls.increment(1);
            let duration = recorder.register_histogram(&meters.chat_ok, &METADATA);
            duration.record(took);
        });
    };
    count(&meters.model_calls);
    histogram!(
        "gen_ai.client.operation.duration",
        OPERATION => "chat", MODEL => model.to_owned(), ERROR_TYPE => kind
    )
    .record(took);
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
