//! What is seen of an event outside the report: a `tracing` event (inside the span it happened
//! in, so an OpenTelemetry exporter makes it a span event) and the recovery counters.
//!
//! Fields and labels take the OpenTelemetry names where the conventions have one
//! (`gen_ai.tool.name`, `gen_ai.request.model`, `error.type`); the rest are `agent_errors.*`.

use std::sync::OnceLock;

use metrics::{Key, Label, Level, Metadata, counter, with_recorder};

use super::label::{ACTION, ERROR_TYPE, LAYER, MODEL, OUTCOME};
use super::{Event, ModelLayer, tool_keys};
use crate::breaker::BreakerState;
use crate::classify::ErrorKind;
use crate::escapes::Visible;

impl Event {
    /// The `tracing` event, at the level the event deserves, named by [`Event::name`].
    pub(crate) fn trace(&self) {
        let event = self.name();
        match self {
            Event::ToolRetry { .. }
            | Event::ToolRerun { .. }
            | Event::ToolFailed { .. }
            | Event::ToolFixed { .. }
            | Event::Escalated { .. }
            | Event::FellBack { .. }
            | Event::Degraded { .. }
            | Event::BreakerTripped { .. }
            | Event::RetryBudgetExhausted { .. }
            | Event::Terminated { .. } => self.trace_tool(event),
            Event::PersonAsked { .. }
            | Event::AnswerExpired { .. }
            | Event::LlmRetry { .. }
            | Event::LlmFallback { .. }
            | Event::OutputReask { .. }
            | Event::UsageLimitReached { .. }
            | Event::UsageMissing { .. } => self.trace_run(event),
            Event::UnknownNotRetried { .. }
            | Event::Reconciled { .. }
            | Event::RepeatNotRun { .. }
            | Event::RepeatUnderEarlierKey { .. }
            | Event::InterruptedRerun { .. } => self.trace_outcome(event),
            Event::LlmCircuit { model, state } => trace_circuit(event, model, *state),
        }
    }

    /// [`Event::trace`] of an event of a tool's ladder.
    fn trace_tool(&self, event: &'static str) {
        match self {
            Event::ToolRetry {
                tool,
                attempt,
                kind,
                delay,
            } => tracing::warn!(
                event,
                gen_ai.tool.name = %Visible::of(tool),
                agent_errors.attempt = attempt,
                "error.type" = %kind,
                agent_errors.delay_ms = delay.as_millis() as u64,
            ),
            Event::ToolRerun {
                tool,
                fixer,
                attempt,
                kind,
            } => tracing::info!(
                event,
                gen_ai.tool.name = %Visible::of(tool),
                agent_errors.fixer = %Visible::of(fixer),
                agent_errors.attempt = attempt,
                "error.type" = %kind,
            ),
            Event::ToolFailed {
                tool,
                kind,
                message,
            } => tracing::warn!(
                event, gen_ai.tool.name = %Visible::of(tool), "error.type" = %kind, message = %Visible::of(message)
            ),
            Event::ToolFixed {
                tool,
                fixer,
                attempt,
            } => tracing::info!(
                event, gen_ai.tool.name = %Visible::of(tool), agent_errors.fixer = %Visible::of(fixer),
                agent_errors.attempt = attempt
            ),
            Event::Escalated {
                tool,
                reason,
                severity,
            } => tracing::warn!(
                event, gen_ai.tool.name = %Visible::of(tool), reason = %Visible::of(reason), severity = %severity
            ),
            Event::FellBack {
                tool,
                to,
                attempt,
                kind,
            } => tracing::warn!(
                event,
                gen_ai.tool.name = %Visible::of(tool),
                agent_errors.fallback.to = %Visible::of(to),
                agent_errors.attempt = attempt,
                "error.type" = %kind,
            ),
            Event::Degraded { tool } => {
                tracing::warn!(event, gen_ai.tool.name = %Visible::of(tool))
            }
            Event::BreakerTripped { tool, failures } => {
                tracing::error!(event, gen_ai.tool.name = %Visible::of(tool), failures)
            }
            Event::RetryBudgetExhausted { tool } => {
                tracing::warn!(event, gen_ai.tool.name = %Visible::of(tool))
            }
            Event::Terminated { tool, kind } => tracing::error!(
                event, gen_ai.tool.name = %Visible::of(tool), "error.type" = %kind
            ),
            // The other events: traced by `trace_run`.
            _ => {}
        }
    }

    /// [`Event::trace`] of a run's events: a person's answers, the model's turns, the output
    /// and the run's usage.
    fn trace_run(&self, event: &'static str) {
        match self {
            Event::PersonAsked { tool, answer } => {
                tracing::info!(event, gen_ai.tool.name = %Visible::of(tool), answer)
            }
            Event::AnswerExpired { tool, call_id, .. } => tracing::warn!(
                event, gen_ai.tool.name = %Visible::of(tool), gen_ai.tool.call.id = %Visible::of(call_id)
            ),
            Event::LlmRetry {
                layer,
                attempt,
                delay,
                kind,
            } => tracing::warn!(
                event,
                agent_errors.layer = %layer,
                agent_errors.attempt = attempt,
                "error.type" = %kind,
                agent_errors.delay_ms = delay.as_millis() as u64,
            ),
            Event::LlmFallback {
                from,
                to,
                trigger,
                attempts,
                kind,
            } => tracing::warn!(
                event,
                gen_ai.request.model = %Visible::of(from),
                agent_errors.fallback.to = %Visible::of(to),
                agent_errors.fallback.trigger = trigger,
                agent_errors.attempt = attempts,
                "error.type" = %kind,
            ),
            Event::OutputReask { attempt, reason } => tracing::warn!(
                event,
                agent_errors.attempt = attempt,
                "error.type" = ErrorKind::Validation.as_str(),
                reason = %Visible::of(reason),
            ),
            Event::UsageLimitReached { limit } => {
                tracing::warn!(event, limit = %limit)
            }
            Event::UsageMissing { model } => tracing::warn!(
                event,
                gen_ai.response.model = %Visible::of(model),
                "the response reported no usage: counted as the usage limits say"
            ),
            // The calls' outcomes: traced by `trace_outcome`.
            _ => {}
        }
    }

    /// [`Event::trace`] of what became of a call whose outcome was uncertain, and a policy's
    /// warning about a failure its retry never retries.
    fn trace_outcome(&self, event: &'static str) {
        match self {
            Event::UnknownNotRetried { tool } => tracing::warn!(
                event,
                gen_ai.tool.name = %Visible::of(tool),
                "`{}` failed with an error of kind `unknown`, which its `retry` never retries: \
                 return an error that says what it is (an `HttpError` with its status, an \
                 `io::Error`, a typed error with a `classify` rule, or text naming the status, \
                 such as \"(503)\" or \"HTTP 503\"), or use `unknown = ...` in the policy",
                Visible::of(tool),
            ),
            Event::Reconciled {
                tool,
                reconciler,
                answer,
            } => tracing::info!(
                event,
                gen_ai.tool.name = %tool,
                reconciler = %reconciler,
                answer = answer,
            ),
            Event::RepeatNotRun { tool, earlier_call } => tracing::warn!(
                event,
                gen_ai.tool.name = %tool,
                earlier_call = %earlier_call,
                "a call whose outcome is unknown was asked for again: not run"
            ),
            Event::RepeatUnderEarlierKey { tool, earlier_call } => tracing::info!(
                event,
                gen_ai.tool.name = %tool,
                earlier_call = %earlier_call,
                "a call whose outcome is unknown was asked for again: run under its key"
            ),
            Event::InterruptedRerun {
                tool,
                call_id,
                attempt,
            } => tracing::warn!(
                event,
                gen_ai.tool.name = %Visible::of(tool),
                gen_ai.tool.call.id = %Visible::of(call_id),
                agent_errors.attempt = attempt,
                "`{}` was running when its run was interrupted, with no result recorded: it is \
                 idempotent, so the resumed run calls it again",
                Visible::of(tool),
            ),
            // The other events: traced by `trace_tool` and `trace_run`.
            _ => {}
        }
    }

    /// For an attempt made after a failure (a retry, a re-run with a fixer's arguments, a
    /// fallback, a re-ask): its layer, what was done, and the failure's kind.
    fn attempt_labels(&self) -> Option<(Layer, Action, ErrorKind)> {
        Some(match self {
            Event::ToolRetry { kind, .. } => (Layer::Tool, Action::Retry, *kind),
            Event::ToolRerun { kind, .. } => (Layer::Tool, Action::Fix, *kind),
            Event::FellBack { kind, .. } => (Layer::Tool, Action::Fallback, *kind),
            Event::LlmRetry { layer, kind, .. } => (Layer::Model(*layer), Action::Retry, *kind),
            Event::LlmFallback { kind, .. } => (
                Layer::Model(ModelLayer::FallbackModel),
                Action::Fallback,
                *kind,
            ),
            Event::OutputReask { .. } => (Layer::Output, Action::Reask, ErrorKind::Validation),
            _ => return None,
        })
    }
}

/// A model's circuit changed: opening is a warning (requests skip the model), the rest news.
fn trace_circuit(event: &'static str, model: &str, state: BreakerState) {
    let model = Visible::of(model);
    match state {
        BreakerState::Open => {
            tracing::warn!(event, gen_ai.request.model = %model, agent_errors.circuit = "open")
        }
        BreakerState::HalfOpen => {
            tracing::info!(event, gen_ai.request.model = %model, agent_errors.circuit = "half_open")
        }
        BreakerState::Closed => {
            tracing::info!(event, gen_ai.request.model = %model, agent_errors.circuit = "closed")
        }
    }
}

/// A layer's retrying ended after at least one failure: a later attempt succeeded
/// (`recovered`), or the layer passed the failure on (`gave_up`); `kind` is the last failure's.
pub(crate) fn count_outcome(layer: impl Into<Layer>, recovered: bool, kind: ErrorKind) {
    let layer = layer.into();
    let outcome = usize::from(!recovered);
    let key = keyed(
        &OUTCOME_KEYS,
        (layer.index() * 2 + outcome) * KINDS + kind_index(kind),
        || {
            let outcome = if recovered { "recovered" } else { "gave_up" };
            Key::from_parts(
                "agent_errors.recoveries",
                vec![
                    Label::from_static_parts(LAYER, layer.as_str()),
                    Label::from_static_parts(OUTCOME, outcome),
                    Label::from_static_parts(ERROR_TYPE, kind.as_str()),
                ],
            )
        },
    );
    with_recorder(|recorder| recorder.register_counter(key, &METADATA).increment(1));
}

/// One attempt made after a failure, on `agent_errors.attempts`.
fn count_attempt((layer, action, kind): (Layer, Action, ErrorKind)) {
    let index = (layer.index() * ACTIONS + action as usize) * KINDS + kind_index(kind);
    let key = keyed(&ATTEMPT_KEYS, index, || {
        Key::from_parts(
            "agent_errors.attempts",
            vec![
                Label::from_static_parts(LAYER, layer.as_str()),
                Label::from_static_parts(ACTION, action.as_str()),
                Label::from_static_parts(ERROR_TYPE, kind.as_str()),
            ],
        )
    });
    with_recorder(|recorder| recorder.register_counter(key, &METADATA).increment(1));
}

/// The layer a recovery count names: a tool's ladder, a layer of the model-call stack, or the
/// output's re-asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layer {
    Tool,
    Model(ModelLayer),
    Output,
}

impl From<ModelLayer> for Layer {
    fn from(layer: ModelLayer) -> Self {
        Layer::Model(layer)
    }
}

impl Layer {
    fn as_str(self) -> &'static str {
        match self {
            Layer::Tool => "tool",
            Layer::Model(layer) => layer.as_str(),
            Layer::Output => "output",
        }
    }

    fn index(self) -> usize {
        match self {
            Layer::Tool => 0,
            Layer::Output => 1,
            Layer::Model(ModelLayer::Transport) => 2,
            Layer::Model(ModelLayer::Rig) => 3,
            Layer::Model(ModelLayer::PersistentRetry) => 4,
            Layer::Model(ModelLayer::FallbackModel) => 5,
            Layer::Model(ModelLayer::OnLlmError) => 6,
        }
    }
}

/// What an attempt after a failure did.
#[derive(Debug, Clone, Copy)]
enum Action {
    Retry,
    Fix,
    Fallback,
    Reask,
}

impl Action {
    fn as_str(self) -> &'static str {
        match self {
            Action::Retry => "retry",
            Action::Fix => "fix",
            Action::Fallback => "fallback",
            Action::Reask => "reask",
        }
    }
}

const LAYERS: usize = 7;
const ACTIONS: usize = 4;
const KINDS: usize = ErrorKind::ALL.len();

fn kind_index(kind: ErrorKind) -> usize {
    ErrorKind::ALL.iter().position(|k| *k == kind).unwrap_or(0)
}

static METADATA: Metadata<'static> = Metadata::new(module_path!(), Level::INFO, None);

/// The keys of the attempt and outcome counters, each made the first time it is counted: a
/// failed call then counts without allocating, as a tool's call meters do.
static ATTEMPT_KEYS: [OnceLock<Key>; LAYERS * ACTIONS * KINDS] =
    [const { OnceLock::new() }; LAYERS * ACTIONS * KINDS];
static OUTCOME_KEYS: [OnceLock<Key>; LAYERS * 2 * KINDS] =
    [const { OnceLock::new() }; LAYERS * 2 * KINDS];

fn keyed(keys: &'static [OnceLock<Key>], index: usize, make: impl FnOnce() -> Key) -> &'static Key {
    keys[index].get_or_init(make)
}

/// Marks `span` as failed with this `error.type`. A span without the field, such as a user's
/// own, ignores it.
pub(crate) fn mark_failed(span: &tracing::Span, kind: &str) {
    span.record("error.type", kind);
    span.record("otel.status_code", "ERROR");
}

/// Counts what recovery did. `model` labels the model-call events, which do not name one.
pub(super) fn count(event: &Event, model: &str) {
    if let Some(labels) = event.attempt_labels() {
        count_attempt(labels);
    }
    if let (Some(tool), Some((name, label))) = (event.tool(), tool_counter(event)) {
        return tool_keys::count(name, tool, label);
    }
    let model = || model.to_owned();
    match event {
        Event::LlmRetry { .. } => {
            counter!("agent_errors.model.retries", MODEL => model()).increment(1);
        }
        Event::LlmFallback { to, trigger, .. } => {
            let to = to.clone();
            counter!(
                "agent_errors.model.fallbacks",
                MODEL => model(), "to" => to, "trigger" => *trigger
            )
            .increment(1);
        }
        Event::OutputReask { .. } => {
            counter!("agent_errors.output.reasks", MODEL => model()).increment(1);
        }
        Event::UsageLimitReached { .. } => {
            counter!("agent_errors.run.usage_limits_reached", MODEL => model()).increment(1);
        }
        Event::UsageMissing { model: answered } => {
            counter!("agent_errors.model.usage_missing", MODEL => answered.clone()).increment(1);
        }
        _ => {}
    }
}

/// The counter a tool's event adds one to, labelled with the tool and, for most, one more
/// label.
type ToolCounter<'e> = (&'static str, Option<(&'static str, &'e str)>);

fn tool_counter(event: &Event) -> Option<ToolCounter<'_>> {
    Some(match event {
        Event::ToolRetry { kind, .. } => (
            "agent_errors.tool.retries",
            Some((ERROR_TYPE, kind.as_str())),
        ),
        Event::ToolRerun { fixer, .. } => ("agent_errors.tool.reruns", Some(("fixer", fixer))),
        Event::ToolFailed { kind, .. } => (
            "agent_errors.tool.failures",
            Some((ERROR_TYPE, kind.as_str())),
        ),
        Event::ToolFixed { fixer, .. } => ("agent_errors.tool.fixes", Some(("fixer", fixer))),
        Event::Escalated { severity, .. } => (
            "agent_errors.tool.escalations",
            Some(("severity", severity.as_str())),
        ),
        Event::FellBack { to, .. } => ("agent_errors.tool.fallbacks", Some(("to", to))),
        Event::Degraded { .. } => ("agent_errors.tool.degrades", None),
        Event::RetryBudgetExhausted { .. } => ("agent_errors.tool.retries_refused", None),
        Event::BreakerTripped { .. } => ("agent_errors.breaker.trips", None),
        Event::Terminated { kind, .. } => (
            "agent_errors.tool.terminations",
            Some((ERROR_TYPE, kind.as_str())),
        ),
        Event::PersonAsked { answer, .. } => (
            "agent_errors.tool.person_answers",
            Some(("answer", *answer)),
        ),
        Event::AnswerExpired { .. } => (
            "agent_errors.tool.person_answers",
            Some(("answer", "expired")),
        ),
        Event::UnknownNotRetried { .. } => ("agent_errors.tool.unknown_not_retried", None),
        Event::InterruptedRerun { .. } => ("agent_errors.tool.interrupted_reruns", None),
        Event::Reconciled { answer, .. } => {
            ("agent_errors.tool.reconciled", Some(("answer", *answer)))
        }
        Event::RepeatNotRun { .. } => ("agent_errors.tool.repeats_not_run", None),
        Event::RepeatUnderEarlierKey { .. } => {
            ("agent_errors.tool.repeats_under_earlier_key", None)
        }
        _ => return None,
    })
}
