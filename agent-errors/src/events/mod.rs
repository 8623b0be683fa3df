//! Events: what recovery did, as `tracing` events and on a per-run report.

use std::sync::Arc;
use std::time::Duration;

use crate::classify::ErrorKind;
use crate::error::Severity;
use label::{ERROR_TYPE, MODEL, TOOL};
use metrics::counter;

mod log;

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
    /// A tool call failed and is retried after `delay`.
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
    /// `denied`, or `later` (the run waits for it).
    PersonAsked {
        /// The tool.
        tool: String,
        /// The answer.
        answer: &'static str,
    },
    /// A model call failed and is retried after `delay`.
    LlmRetry {
        /// The attempt that failed (1-based, within the turn).
        attempt: u32,
        /// The sleep before the next.
        delay: Duration,
    },
    /// The agent switched to a fallback model.
    LlmFallback {
        /// The model given up on.
        from: String,
        /// The model used instead.
        to: String,
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
}

impl Event {
    /// The event's name: `tool_retry`, `tool_failed`, ...
    pub fn name(&self) -> &'static str {
        match self {
            Event::ToolRetry { .. } => "tool_retry",
            Event::ToolFailed { .. } => "tool_failed",
            Event::ToolFixed { .. } => "tool_fixed",
            Event::Escalated { .. } => "escalated",
            Event::FellBack { .. } => "fell_back",
            Event::Degraded { .. } => "degraded",
            Event::BreakerTripped { .. } => "breaker_tripped",
            Event::RetryBudgetExhausted { .. } => "retry_budget_exhausted",
            Event::Terminated { .. } => "terminated",
            Event::PersonAsked { .. } => "person_asked",
            Event::LlmRetry { .. } => "llm_retry",
            Event::LlmFallback { .. } => "llm_fallback",
            Event::UsageLimitReached { .. } => "usage_limit_reached",
            Event::UsageMissing { .. } => "usage_missing",
            Event::UnknownNotRetried { .. } => "unknown_not_retried",
        }
    }

    /// The tool the event is about, if any.
    pub fn tool(&self) -> Option<&str> {
        match self {
            Event::ToolRetry { tool, .. }
            | Event::ToolFailed { tool, .. }
            | Event::ToolFixed { tool, .. }
            | Event::Escalated { tool, .. }
            | Event::FellBack { tool, .. }
            | Event::Degraded { tool }
            | Event::BreakerTripped { tool, .. }
            | Event::RetryBudgetExhausted { tool }
            | Event::Terminated { tool, .. }
            | Event::PersonAsked { tool, .. }
            | Event::UnknownNotRetried { tool } => Some(tool),
            Event::LlmRetry { .. }
            | Event::LlmFallback { .. }
            | Event::UsageLimitReached { .. }
            | Event::UsageMissing { .. } => None,
        }
    }

    pub(crate) fn trace(&self) {
        match self {
            Event::ToolRetry {
                tool,
                attempt,
                kind,
                delay,
            } => tracing::warn!(
                event = "tool_retry", tool = %tool, attempt, kind = %kind, delay_ms = delay.as_millis() as u64
            ),
            Event::ToolFailed {
                tool,
                kind,
                message,
            } => {
                tracing::warn!(event = "tool_failed", tool = %tool, kind = %kind, message = %message)
            }
            Event::ToolFixed {
                tool,
                fixer,
                attempt,
            } => {
                tracing::info!(event = "tool_fixed", tool = %tool, fixer = %fixer, attempt)
            }
            Event::Escalated {
                tool,
                reason,
                severity,
            } => tracing::warn!(
                event = "escalated", tool = %tool, reason = %reason, severity = %severity
            ),
            Event::FellBack { tool, to } => {
                tracing::warn!(event = "fell_back", tool = %tool, to = %to)
            }
            Event::Degraded { tool } => tracing::warn!(event = "degraded", tool = %tool),
            Event::BreakerTripped { tool, failures } => {
                tracing::error!(event = "breaker_tripped", tool = %tool, failures)
            }
            Event::RetryBudgetExhausted { tool } => {
                tracing::warn!(event = "retry_budget_exhausted", tool = %tool)
            }
            Event::Terminated { tool, kind } => {
                tracing::error!(event = "terminated", tool = %tool, kind = %kind)
            }
            Event::PersonAsked { tool, answer } => {
                tracing::info!(event = "person_asked", tool = %tool, answer)
            }
            Event::LlmRetry { attempt, delay } => tracing::warn!(
                event = "llm_retry",
                attempt,
                delay_ms = delay.as_millis() as u64
            ),
            Event::LlmFallback { from, to } => {
                tracing::warn!(event = "llm_fallback", from = %from, to = %to)
            }
            Event::UsageLimitReached { limit } => {
                tracing::warn!(event = "usage_limit_reached", limit = %limit)
            }
            Event::UsageMissing { model } => tracing::warn!(
                event = "usage_missing",
                model = %model,
                "the response reported no usage: counted as the usage limits say"
            ),
            Event::UnknownNotRetried { tool } => tracing::warn!(
                event = "unknown_not_retried",
                tool = %tool,
                "`{tool}` failed with an error of kind `unknown`, which its `retry` never retries: \
                 return an error that says what it is (an `HttpError` with its status, an \
                 `io::Error`, a typed error with a `classify` rule, or text naming the status, \
                 such as \"(503)\" or \"HTTP 503\"), or use `unknown = ...` in the policy"
            ),
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

/// Marks `span` as failed with this `error.type`. A span without the field, such as a user's
/// own, ignores it.
pub(crate) fn mark_failed(span: &tracing::Span, kind: &str) {
    span.record("error.type", kind);
    span.record("otel.status_code", "ERROR");
}

/// Label keys of the metrics, as the GenAI conventions spell them where they name one.
pub(crate) mod label {
    pub(crate) const TOOL: &str = "gen_ai.tool.name";
    pub(crate) const MODEL: &str = "gen_ai.request.model";
    pub(crate) const ERROR_TYPE: &str = "error.type";
}

/// Counts what recovery did. `model` labels the model-call events, which do not name one.
fn count(event: &Event, model: &str) {
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
        Event::PersonAsked { answer, .. } => {
            counter!("agent_errors.tool.person_answers", TOOL => tool(), "answer" => *answer)
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
        Event::UsageLimitReached { .. } => {
            counter!("agent_errors.run.usage_limits_reached", MODEL => model.to_owned())
                .increment(1);
        }
        Event::UsageMissing { model: answered } => {
            counter!("agent_errors.model.usage_missing", MODEL => answered.clone()).increment(1);
        }
        Event::UnknownNotRetried { .. } => {
            counter!("agent_errors.tool.unknown_not_retried", TOOL => tool()).increment(1);
        }
    }
}
