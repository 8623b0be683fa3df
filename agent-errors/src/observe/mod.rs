//! What a run looks like from outside: `tracing` spans after OpenTelemetry's GenAI semantic
//! conventions (`observe/spans.rs`), counters and histograms through the `metrics` facade
//! (`observe/metrics.rs`), and a bounded live stream of events ([`EventStream`]).
//!
//! Each recovery event is traced and counted once, where it is emitted (in `events`, below
//! this module), and reaches the live streams through the `LiveFeed` this
//! module's `Observer` implements.

mod live;
pub(crate) mod metrics;
pub(crate) mod spans;

pub use crate::events::{EventLog, EventSink, ModelLayer};
pub use live::{DEFAULT_EVENT_CAPACITY, EventStream, Missed, RunEvent, RunId};
pub(crate) use live::{Feed, Observer};
pub(crate) use metrics::{AgentMeters, CallEnd, ToolMeters};

use tokio::time::Instant;
use tracing::Instrument;

use crate::chat::ChatResponse;
use crate::model::ChatModel;

/// How a tool call ended, as its span and meters record it: told by the executor's outcome, so
/// observing needs nothing of the executor.
pub(crate) trait ToolCallEnd {
    /// How the call ended.
    fn end(&self) -> CallEnd;
}

/// How a model turn failed, as its span's `error.type` names it.
pub(crate) trait TurnFailure {
    /// The `error.type`: the kind of a model error, or why the run stops.
    fn error_type(&self) -> &'static str;
}

/// How a run ended, as its span and the `agent_errors.run.stops` metric record it.
pub(crate) trait RunEnd {
    /// Why the run ended without an output, when it did: `terminated`, `turn_cap`, ...
    fn stop_reason(&self) -> Option<&'static str>;

    /// What the run used: model requests, tokens, tool calls.
    fn usage(&self) -> (u32, crate::usage::Usage, u32);

    /// When the run's last timed step (a model turn) ended, if nothing the run's duration must
    /// count happened after it: the run's end is then that reading, not a fresh one.
    fn ended_at(&self) -> Option<Instant> {
        None
    }
}

/// Runs one tool call inside its `execute_tool` span (its own, or the one another agent loop
/// opened for it: rig's opens one per call) and counts it on the tool's `meters` (a name the
/// model made up has none and is counted as `_OTHER`, so model text cannot grow the number of
/// metric series).
///
/// The call's work is made here by `work`, not handed over made, so it is not copied into place.
pub(crate) async fn tool_call<T: ToolCallEnd, F: Future<Output = T>>(
    span: tracing::Span,
    meters: Option<&ToolMeters>,
    work: impl FnOnce() -> F,
) -> T {
    let started = Instant::now();
    // No subscriber: skip the instrumentation wrapper on the hot path.
    let outcome = if span.is_disabled() {
        work().await
    } else {
        work().instrument(span.clone()).await
    };
    let end = outcome.end();
    if let CallEnd::Stop { error_type } = end {
        spans::record_error(Some(&span), error_type);
    }
    let meters = meters.unwrap_or_else(|| ToolMeters::other());
    metrics::tool_call(meters, end, started.elapsed());
    outcome
}

/// Runs one model turn inside its `chat` span, records what the response says about itself,
/// and times it. `response` finds the model's response in the turn's output, if it has one.
/// `started` is a reading of the clock the caller took just before (the run's start, for its
/// first turn), if it has one; the turn's end is handed back with its output, for the caller to
/// use the same way.
///
/// The turn is made here by `turn`, not handed over made: a turn's future is large, and every
/// move of it is a copy of the whole.
pub(crate) async fn model_turn<T, E: TurnFailure, F: Future<Output = Result<T, E>>>(
    (model, run_id): (&dyn ChatModel, &str),
    meters: &AgentMeters,
    started: Option<Instant>,
    turn: impl FnOnce() -> F,
    response: impl Fn(&T) -> Option<&ChatResponse>,
) -> (Result<T, E>, Instant) {
    let span = spans::chat(model, run_id);
    let started = started.unwrap_or_else(Instant::now);
    // No subscriber: skip the instrumentation wrapper, and the move of the turn into it.
    let result = if span.is_disabled() {
        turn().await
    } else {
        turn().instrument(span.clone()).await
    };
    let error = match &result {
        Ok(output) => {
            if let Some(response) = response(output) {
                spans::record_response(&span, model, response);
            }
            None
        }
        Err(error) => Some(error.error_type()),
    };
    if let Some(kind) = error {
        spans::record_error(Some(&span), kind);
    }
    let ended = Instant::now();
    metrics::model_call(meters, model.name(), error, ended - started);
    (result, ended)
}

/// Runs one agent run inside its `invoke_agent` span (made by `spans::invoke_agent` before the
/// run's future, so the run's id is lent to the span, not copied for it), times it and counts
/// why it stopped. The run's duration is from `started`, a reading of the clock taken as the run
/// was made (its first model turn may share it), to [`RunEnd::ended_at`] when the outcome has
/// one.
pub(crate) async fn run<R: RunEnd>(
    (agent, span): (&str, tracing::Span),
    meters: &AgentMeters,
    started: Instant,
    run: impl Future<Output = R>,
) -> R {
    let outcome = if span.is_disabled() {
        run.await
    } else {
        run.instrument(span.clone()).await
    };
    let stop = outcome.stop_reason();
    if let Some(reason) = stop {
        spans::record_error(Some(&span), reason);
    }
    if !span.is_disabled() {
        spans::record_run_usage(&span, outcome.usage());
    }
    let ended = outcome.ended_at().unwrap_or_else(Instant::now);
    metrics::run_ended(meters, agent, stop, ended - started);
    outcome
}
