//! Events: what recovery did, as `tracing` events and on a per-run report.

use std::sync::Arc;
use std::time::Duration;

use crate::breaker::BreakerState;
use crate::classify::ErrorKind;
use crate::error::Severity;

pub(crate) mod label;
mod log;
mod tool_keys;
mod trace;

use trace::count;
pub(crate) use trace::{Layer, count_outcome, mark_failed};

pub(crate) use log::LiveFeed;
pub use log::{EventLog, EventSink, RunReport};

/// Something the recovery layer did.
///
/// # Examples
///
/// Reading what recovery did in a run:
///
/// ```
/// use agent_errors::{Agent, Event, HttpError, policy::{Action, Policy, PolicyKey}};
/// use agent_errors::testing::{FaultyTool, ScriptedModel, echo_tool};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let flaky = FaultyTool::new(echo_tool("fetch")).fail_times(1, || HttpError::new(503, "busy"));
/// let agent = Agent::builder("a")
///     .model(ScriptedModel::new().tool_call("fetch", r#"{"text": "ok"}"#).text("done"))
///     .tool(flaky.tool().with_policy(Policy::new().on(PolicyKey::Execution, Action::retry(2)?)))
///     .build()?;
/// let outcome = agent.run_with_report("go").await;
/// for event in &outcome.report.events {
///     match event {
///         Event::ToolRetry { tool, attempt, kind, .. } => println!("{tool}: try {attempt} failed ({kind})"),
///         Event::ToolFailed { tool, message, .. } => println!("{tool} failed: {message}"),
///         Event::Terminated { tool, .. } => println!("{tool} ended the run"),
///         other => println!("{}", other.name()),
///     }
/// }
/// assert_eq!(outcome.report.count("tool_retry"), 1);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// A tool call failed and is retried after `delay`: one event per retry, on the tool's
    /// ladder and on a fallback tool's own retries.
    ToolRetry {
        /// The tool.
        tool: String,
        /// The attempt that failed (1-based).
        attempt: u32,
        /// Its kind.
        kind: ErrorKind,
        /// The sleep before the next attempt.
        delay: Duration,
    },
    /// A tool call failed for good (recovery did not save it).
    ToolFailed {
        /// The tool.
        tool: String,
        /// The kind.
        kind: ErrorKind,
        /// The sanitized message.
        message: String,
    },
    /// A fixer wrote new arguments for a failed call and the tool is called again with them:
    /// one event per such attempt, whether or not it then succeeds (`tool_fixed` says which
    /// one did).
    ToolRerun {
        /// The tool.
        tool: String,
        /// The fixer.
        fixer: String,
        /// The attempt that failed (1-based, counting every attempt of the call).
        attempt: u32,
        /// Its kind.
        kind: ErrorKind,
    },
    /// A fixer repaired a call.
    ToolFixed {
        /// The tool.
        tool: String,
        /// The fixer.
        fixer: String,
        /// Which try of the fixer succeeded.
        attempt: u32,
    },
    /// A failure was shown to the model as an error result.
    Escalated {
        /// The tool.
        tool: String,
        /// The reason shown.
        reason: String,
        /// Its severity.
        severity: Severity,
    },
    /// A call went to a fallback tool.
    FellBack {
        /// The tool that failed.
        tool: String,
        /// The tool called instead.
        to: String,
        /// The attempt that failed (1-based, counting every attempt of the call).
        attempt: u32,
        /// Its kind: what sent the call to the fallback.
        kind: ErrorKind,
    },
    /// A tool was dropped for the rest of the run.
    Degraded {
        /// The tool.
        tool: String,
    },
    /// A breaker tripped.
    BreakerTripped {
        /// The tool.
        tool: String,
        /// Consecutive failures counted.
        failures: u32,
    },
    /// A retry was not made: the retry budget of the tool's breaker key was used up. The ladder
    /// went on to its next rung.
    RetryBudgetExhausted {
        /// The tool.
        tool: String,
    },
    /// The run was ended by a tool failure.
    Terminated {
        /// The tool.
        tool: String,
        /// The kind.
        kind: ErrorKind,
    },
    /// A call was put to a person (its tool requires approval, or `ask_person` handed over a
    /// failure) and this was the answer: `approved`, `edited` (approved with other arguments),
    /// `denied`, `later` (the run waits for it), or `refused` (an answer given to the run was
    /// for another question: other tool, arguments or reason; the call is asked again).
    PersonAsked {
        /// The tool.
        tool: String,
        /// The answer.
        answer: &'static str,
    },
    /// A person's answer to a call had expired when the run reached the call: the call did not
    /// run, and the model was told the approval expired
    /// ([`RunOutcome::expired_approvals`](crate::RunOutcome::expired_approvals) lists them).
    AnswerExpired {
        /// The tool.
        tool: String,
        /// The call's id.
        call_id: String,
        /// The digest of the question the answer was for.
        digest: String,
    },
    /// A model call failed and is made again after `delay`, by the layer that says so: one
    /// event per retry at every layer of the model-call stack.
    LlmRetry {
        /// Which layer retries: the provider's transport, `on_llm_error`, `FallbackModel` (its
        /// primary called again), `PersistentRetry`, or a `rig::RecoveringModel` in rig's loop.
        layer: ModelLayer,
        /// The attempt that failed (1-based, counted by that layer: within the turn for
        /// `on_llm_error`, within one request for the others).
        attempt: u32,
        /// The sleep before the next.
        delay: Duration,
        /// The failure's kind.
        kind: ErrorKind,
    },
    /// A request went to a fallback model.
    LlmFallback {
        /// The model given up on.
        from: String,
        /// The model used instead.
        to: String,
        /// Why: `overload`, `rate_limit`, `outage`, `auth_or_config` (a failure the fallback's
        /// triggers name), or `empty_answer`, `cut_off`, `refusal`, `invalid_output` (an answer
        /// [`FallbackOn::BadAnswer`](crate::llm::FallbackOn::BadAnswer) refuses); `failure` for
        /// a failure of no such kind that moves a rig `RecoveringModel` chain on; `circuit_open`
        /// when the model's circuit was open ([`Event::LlmCircuit`]) and it was not called.
        trigger: &'static str,
        /// How many calls the primary was given for this request (0 when its circuit was open).
        attempts: u32,
        /// The kind of the primary's last failure; `validation` for a refused answer; for an
        /// open circuit, the failure that opened it as this process saw it (`unknown` when
        /// another process of a fleet opened it).
        kind: ErrorKind,
    },
    /// The circuit a model wrapper keeps on a model it falls back from changed, as this process
    /// saw it: `open` (the model failed as its fallback's triggers name, past the circuit's
    /// threshold, or its probe failed: requests go straight to the fallback for the
    /// cooldown), `half_open` (the cooldown ended and this request is the one probe) or
    /// `closed` (the probe, or another call, succeeded: requests go to the model again).
    LlmCircuit {
        /// The model the circuit is kept on.
        model: String,
        /// Its state now.
        state: BreakerState,
    },
    /// The model's final answer was refused (it does not fit the run's output type, or a
    /// validator refused it) and the model is asked again with the reason: one event per
    /// re-ask.
    OutputReask {
        /// The answer that was refused (1-based, within the run).
        attempt: u32,
        /// Why, as the model is told it: sanitized and bounded.
        reason: String,
    },
    /// The run went past a usage cap whose limits ask for a final answer: the model is asked
    /// once more, without tools.
    UsageLimitReached {
        /// The cap.
        limit: crate::usage::UsageLimit,
    },
    /// A model's response reported no usage while the run has a token or cost cap: it is
    /// counted as the caps' [`MissingUsage`](crate::run::MissingUsage) says. Told once per run.
    UsageMissing {
        /// The model that answered.
        model: String,
    },
    /// A tool failed with an error nothing recognises (kind `unknown`) on a `retry` rung of its
    /// policy, so it was not retried: `retry` only makes again what can succeed on retry. Said
    /// once per run and tool, with a `tracing` warning saying what to return instead.
    UnknownNotRetried {
        /// The tool.
        tool: String,
    },
    /// A resumed durable run found a call of an idempotent tool interrupted (its process
    /// stopped while the tool ran, with no result recorded) and runs it again, as the tool's
    /// `idempotent` marking allows: the tool may see the call a second time. A call of a tool
    /// that is not idempotent is never run again this way (it is an `outcome_unknown` failure
    /// for its policy).
    InterruptedRerun {
        /// The tool.
        tool: String,
        /// The call's id.
        call_id: String,
        /// The attempt made again (1-based, counting every attempt of the call).
        attempt: u32,
    },
    /// A call's outcome was unknown and the tool's reconciler was asked whether it took
    /// effect: `answer` is `happened`, `did_not_happen` or `still_unknown` (a reconciler that
    /// failed or panicked could not tell).
    Reconciled {
        /// The tool.
        tool: String,
        /// The reconciler.
        reconciler: String,
        /// What it answered.
        answer: &'static str,
    },
    /// The model asked again for a call whose outcome is unknown (the same tool, the same
    /// arguments), and the repeat was not run: it was answered with the earlier call's unknown
    /// outcome, so the effect cannot happen twice.
    RepeatNotRun {
        /// The tool.
        tool: String,
        /// The id of the earlier call, whose outcome is unknown.
        earlier_call: String,
    },
    /// The model asked again for a call whose outcome is unknown, of a
    /// [keyed](crate::ToolDef::keyed) tool, and the repeat ran under the earlier call's
    /// idempotency key: the service, which applies a key once, answers it from its record if the
    /// earlier call took effect.
    RepeatUnderEarlierKey {
        /// The tool.
        tool: String,
        /// The id of the earlier call, whose key the repeat carried.
        earlier_call: String,
    },
}

/// The layer of the model-call stack that made a model call again, as [`Event::LlmRetry`]
/// names it, from the innermost out.
///
/// # Examples
///
/// Counting the retries of a run by layer:
///
/// ```
/// use std::collections::HashMap;
/// use agent_errors::{Event, RunReport};
/// use agent_errors::observe::ModelLayer;
///
/// fn by_layer(report: &RunReport) -> HashMap<&'static str, usize> {
///     let mut counts = HashMap::new();
///     for event in &report.events {
///         if let Event::LlmRetry { layer, .. } = event {
///             let name = match layer {
///                 ModelLayer::Transport => "the provider's transport",
///                 ModelLayer::Rig => "rig::RecoveringModel",
///                 ModelLayer::PersistentRetry => "PersistentRetry",
///                 ModelLayer::FallbackModel => "FallbackModel's primary",
///                 ModelLayer::OnLlmError => "on_llm_error",
///                 _ => layer.as_str(),
///             };
///             *counts.entry(name).or_default() += 1;
///         }
///     }
///     counts
/// }
/// assert!(by_layer(&RunReport::default()).is_empty());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ModelLayer {
    /// A built-in provider's own transport retries (OpenAI, Anthropic).
    Transport,
    /// A `rig::RecoveringModel`, below rig's own agent loop.
    Rig,
    /// [`PersistentRetry`](crate::llm::PersistentRetry).
    PersistentRetry,
    /// [`FallbackModel`](crate::llm::FallbackModel) calling its primary again before it falls
    /// back.
    FallbackModel,
    /// The agent's `on_llm_error`, around the whole stack.
    OnLlmError,
}

impl ModelLayer {
    /// The layer's name, as the `layer` field and metric label spell it: `transport`, `rig`,
    /// `persistent_retry`, `fallback_model`, `on_llm_error`.
    pub fn as_str(self) -> &'static str {
        match self {
            ModelLayer::Transport => "transport",
            ModelLayer::Rig => "rig",
            ModelLayer::PersistentRetry => "persistent_retry",
            ModelLayer::FallbackModel => "fallback_model",
            ModelLayer::OnLlmError => "on_llm_error",
        }
    }
}

impl std::fmt::Display for ModelLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Event {
    /// The event's name: `tool_retry`, `tool_failed`, ...
    pub fn name(&self) -> &'static str {
        match self {
            Event::ToolRetry { .. } => "tool_retry",
            Event::ToolFailed { .. } => "tool_failed",
            Event::ToolRerun { .. } => "tool_rerun",
            Event::ToolFixed { .. } => "tool_fixed",
            Event::Escalated { .. } => "escalated",
            Event::FellBack { .. } => "fell_back",
            Event::Degraded { .. } => "degraded",
            Event::BreakerTripped { .. } => "breaker_tripped",
            Event::RetryBudgetExhausted { .. } => "retry_budget_exhausted",
            Event::Terminated { .. } => "terminated",
            Event::PersonAsked { .. } => "person_asked",
            Event::AnswerExpired { .. } => "answer_expired",
            Event::LlmRetry { .. } => "llm_retry",
            Event::LlmFallback { .. } => "llm_fallback",
            Event::LlmCircuit { .. } => "llm_circuit",
            Event::OutputReask { .. } => "output_reask",
            Event::UsageLimitReached { .. } => "usage_limit_reached",
            Event::UsageMissing { .. } => "usage_missing",
            Event::UnknownNotRetried { .. } => "unknown_not_retried",
            Event::InterruptedRerun { .. } => "interrupted_rerun",
            Event::Reconciled { .. } => "reconciled",
            Event::RepeatNotRun { .. } => "repeat_not_run",
            Event::RepeatUnderEarlierKey { .. } => "repeat_under_earlier_key",
        }
    }

    /// The tool the event is about, if any.
    pub fn tool(&self) -> Option<&str> {
        match self {
            Event::ToolRetry { tool, .. }
            | Event::ToolFailed { tool, .. }
            | Event::ToolRerun { tool, .. }
            | Event::ToolFixed { tool, .. }
            | Event::Escalated { tool, .. }
            | Event::FellBack { tool, .. }
            | Event::Degraded { tool }
            | Event::BreakerTripped { tool, .. }
            | Event::RetryBudgetExhausted { tool }
            | Event::Terminated { tool, .. }
            | Event::PersonAsked { tool, .. }
            | Event::AnswerExpired { tool, .. }
            | Event::UnknownNotRetried { tool }
            | Event::InterruptedRerun { tool, .. }
            | Event::Reconciled { tool, .. }
            | Event::RepeatNotRun { tool, .. }
            | Event::RepeatUnderEarlierKey { tool, .. } => Some(tool),
            Event::LlmRetry { .. }
            | Event::LlmFallback { .. }
            | Event::LlmCircuit { .. }
            | Event::OutputReask { .. }
            | Event::UsageLimitReached { .. }
            | Event::UsageMissing { .. } => None,
        }
    }
}

/// Traces and counts `event` once and records it on each distinct log given.
pub(crate) fn emit_to(event: Event, logs: [Option<&Arc<EventLog>>; 2]) {
    match logs.iter().flatten().next() {
        Some(log) => log.observe(&event),
        None => on_event(&event, ""),
    }
    let mut recorded: Option<&Arc<EventLog>> = None;
    for log in logs.into_iter().flatten() {
        if recorded.is_some_and(|r| Arc::ptr_eq(r, log)) {
            continue;
        }
        log.record(event.clone());
        recorded = Some(log);
    }
}

/// Traces and counts one event; a tool failure also marks the current span as failed.
fn on_event(event: &Event, model: &str) {
    event.trace();
    count(event, model);
    if let Event::ToolFailed { kind, .. } | Event::Terminated { kind, .. } = event {
        mark_failed(&tracing::Span::current(), kind.as_str());
    }
}
