//! What a run looks like from outside: `tracing` spans after OpenTelemetry's GenAI semantic
//! conventions (`observe/spans.rs`), counters and histograms through the `metrics` facade
//! (`observe/metrics.rs`), and a bounded live stream of events ([`EventStream`]).
//!
//! Each recovery event goes through one function (`on_event`) once, where it is emitted: it becomes a
//! `tracing` event inside the span it happened in, a counter, and, on the run's log, a live
//! stream item.

mod live;
pub(crate) mod metrics;
pub(crate) mod spans;

pub use live::{DEFAULT_EVENT_CAPACITY, EventStream, Missed, RunEvent, RunId};
pub(crate) use live::{Feed, Observer};
pub(crate) use metrics::{AgentMeters, ToolMeters};

use tokio::time::Instant;
use tracing::Instrument;

use crate::agent::{RunError, RunOutcome};
use crate::chat::{ChatModel, ChatResponse, ToolCall};
use crate::classify::classify;
use crate::events::Event;
use crate::executor::CallOutcome;
use metrics::CallEnd;

/// Traces and counts one event; a tool failure also marks the current span as failed.
pub(crate) fn on_event(event: &Event, model: &str) {
    event.trace();
    metrics::on_event(event, model);
    if let Event::ToolFailed { kind, .. } | Event::Terminated { kind, .. } = event {
        spans::record_error(None, kind.as_str());
    }
}

/// Runs one tool call inside its `execute_tool` span and counts it on the tool's `meters` (a
/// name the model made up has none and is counted as `_OTHER`, so model text cannot grow the
/// number of metric series).
pub(crate) async fn tool_call(
    call: &ToolCall,
    meters: Option<&ToolMeters>,
    work: impl Future<Output = CallOutcome>,
) -> CallOutcome {
    let span = spans::execute_tool(call);
    let started = Instant::now();
    // No subscriber: skip the instrumentation wrapper on the hot path.
    let outcome = if span.is_disabled() {
        work.await
    } else {
        work.instrument(span.clone()).await
    };
    let end = match &outcome {
        CallOutcome::Result(result) if result.is_error => CallEnd::Error,
        CallOutcome::Result(_) => CallEnd::Ok,
        CallOutcome::Stop(stop) => {
            spans::record_error(Some(&span), stop.kind.as_str());
            CallEnd::Stop
        }
    };
    let meters = meters.unwrap_or_else(|| ToolMeters::other());
    metrics::tool_call(meters, end, started.elapsed());
    outcome
}

/// Runs one model turn inside its `chat` span, records what the response says about itself,
/// and times it. `response` finds the model's response in the turn's output, if it has one.
pub(crate) async fn model_turn<T>(
    model: &dyn ChatModel,
    meters: &AgentMeters,
    turn: impl Future<Output = Result<T, RunError>>,
    response: impl Fn(&T) -> Option<&ChatResponse>,
) -> Result<T, RunError> {
    let span = spans::chat(model);
    let started = Instant::now();
    let result = turn.instrument(span.clone()).await;
    let error = match &result {
        Ok(output) => {
            if let Some(response) = response(output) {
                spans::record_response(&span, model, response);
            }
            None
        }
        Err(RunError::Model(error)) => Some(classify(error.as_ref()).kind.as_str()),
        Err(other) => Some(stop_reason(other)),
    };
    if let Some(kind) = error {
        spans::record_error(Some(&span), kind);
    }
    metrics::model_call(meters, model.name(), error, started.elapsed());
    result
}

/// Runs one agent run inside its `invoke_agent` span, times it and counts why it stopped.
pub(crate) async fn run<O>(
    agent: &str,
    model: &dyn ChatModel,
    meters: &AgentMeters,
    run: impl Future<Output = RunOutcome<O>>,
) -> RunOutcome<O> {
    let span = spans::invoke_agent(agent, model);
    let started = Instant::now();
    let outcome = run.instrument(span.clone()).await;
    let stop = outcome.result.as_ref().err().map(stop_reason);
    if let Some(reason) = stop {
        spans::record_error(Some(&span), reason);
    }
    metrics::run_ended(meters, agent, stop, started.elapsed());
    outcome
}

/// Why a run ended without an output, as a label: `terminated`, `turn_cap`, ...
pub(crate) fn stop_reason(error: &RunError) -> &'static str {
    match error {
        RunError::Terminated(_) => "terminated",
        RunError::BreakerTripped { .. } => "breaker_tripped",
        RunError::TurnCap { .. } => "turn_cap",
        RunError::Cancelled => "cancelled",
        RunError::Model(_) => "model",
        RunError::Escalated { .. } => "escalated",
        RunError::InvalidOutput { .. } => "invalid_output",
        RunError::EmptyResponse => "empty_response",
        RunError::Refused { .. } => "refused",
        RunError::DeadlineExceeded { .. } => "deadline_exceeded",
        RunError::CallbackPanicked { .. } => "callback_panicked",
        RunError::Checkpoint(_) => "checkpoint",
        RunError::Resume(_) => "resume",
        RunError::InvalidHistory(_) => "invalid_history",
    }
}
