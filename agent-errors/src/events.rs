//! Events: what recovery did, as `tracing` events and on a per-run report.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::classify::ErrorKind;
use crate::error::Severity;
use label::{ERROR_TYPE, MODEL, TOOL};
use metrics::counter;

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
            | Event::PersonAsked { tool, .. } => Some(tool),
            Event::LlmRetry { .. }
            | Event::LlmFallback { .. }
            | Event::UsageLimitReached { .. } => None,
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
        }
    }
}

/// Collects the events of one run; each is also emitted as a `tracing` event, counted in the
/// metrics and, inside an agent run, sent to the live streams.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use agent_errors::Event;
/// use agent_errors::observe::{EventLog, EventSink};
///
/// let log = Arc::new(EventLog::new());
/// let sink = EventSink::new(Arc::clone(&log)); // what a ChatRequest carries
/// if let Some(log) = sink.log() {
///     log.emit(Event::LlmFallback { from: "big".into(), to: "small".into() });
/// }
/// assert_eq!(log.take().len(), 1);
/// assert!(log.snapshot().is_empty());
/// ```
#[derive(Debug, Default)]
pub struct EventLog {
    events: Mutex<Vec<Event>>,
    observer: Option<Box<dyn LiveFeed>>,
}

/// Where an agent run's events go live as they happen, and whose model labels the model-call
/// counters. The observers implement it, one floor up.
pub(crate) trait LiveFeed: Send + Sync + fmt::Debug {
    /// The model's name, for the model-call counters.
    fn model(&self) -> &str;
    /// Sends `event` to the live streams.
    fn publish(&self, event: &Event);
    /// Ends the live streams: nothing more will happen in the run.
    fn close(&self);
}

impl EventLog {
    /// An empty log.
    pub fn new() -> Self {
        EventLog::default()
    }

    /// The log of an agent run: events are tagged with the run and sent live.
    pub(crate) fn observed(observer: impl LiveFeed + 'static) -> Self {
        EventLog {
            events: Mutex::default(),
            observer: Some(Box::new(observer)),
        }
    }

    /// Records, traces and counts an event.
    pub fn emit(&self, event: Event) {
        self.observe(&event);
        self.record(event);
    }

    /// Ends the live streams of the run: nothing more will happen in it.
    pub(crate) fn close(&self) {
        if let Some(observer) = &self.observer {
            observer.close();
        }
    }

    /// Traces and counts an event, once whatever the number of logs it is recorded on.
    fn observe(&self, event: &Event) {
        let model = self.observer.as_ref().map_or("", |o| o.model());
        on_event(event, model);
    }

    /// Records an event without tracing it (the caller traced it once already).
    pub(crate) fn record(&self, event: Event) {
        if let Some(observer) = &self.observer {
            observer.publish(&event);
        }
        self.lock().push(event);
    }

    /// A copy of the events so far.
    pub fn snapshot(&self) -> Vec<Event> {
        self.lock().clone()
    }

    /// Takes the events out.
    pub fn take(&self) -> Vec<Event> {
        std::mem::take(&mut *self.lock())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Event>> {
        // A panic while holding this lock cannot leave the Vec half-written.
        self.events.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What happened in one run: the events in order, and a few counts.
///
/// # Examples
///
/// ```
/// use agent_errors::Agent;
/// use agent_errors::testing::{ScriptedModel, echo_tool};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let agent = Agent::builder("a")
///     .model(ScriptedModel::new().tool_call("echo", r#"{"text": "hi"}"#).text("said hi"))
///     .tool(echo_tool("echo"))
///     .build()?;
/// let report = agent.run_with_report("say hi").await.report;
/// assert_eq!((report.turns, report.model_calls, report.tool_calls), (2, 2, 1));
/// assert_eq!(report.count("tool_failed"), 0);
/// assert_eq!(report.for_tool("echo").count(), 0); // nothing went wrong with it
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunReport {
    /// Every event, in the order it happened.
    pub events: Vec<Event>,
    /// Model turns taken (retries of a turn do not count).
    pub turns: u32,
    /// Model calls made, retries included.
    pub model_calls: u32,
    /// Tool calls the model made.
    pub tool_calls: u32,
    /// Tokens used by every model call that reported usage, retries and cut-off answers
    /// included.
    pub usage: crate::usage::Usage,
}

impl RunReport {
    /// How many events have this name (`"tool_retry"`, ...).
    pub fn count(&self, name: &str) -> usize {
        self.events.iter().filter(|e| e.name() == name).count()
    }

    /// The events with this name.
    pub fn named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Event> + 'a {
        self.events.iter().filter(move |e| e.name() == name)
    }

    /// The events about this tool.
    pub fn for_tool<'a>(&'a self, tool: &'a str) -> impl Iterator<Item = &'a Event> + 'a {
        self.events.iter().filter(move |e| e.tool() == Some(tool))
    }
}

/// The run's event log, carried on a [`ChatRequest`](crate::ChatRequest) so that model wrappers
/// (`FallbackModel`, `PersistentRetry`) can put their events on the run's report. Empty outside
/// an agent run. Not part of a request's identity: any two compare equal.
///
/// # Examples
///
/// A model wrapper of yours puts its events on the run's report through the request's sink:
///
/// ```
/// use agent_errors::{ChatModel, ChatRequest, ChatResponse, Event, call::BoxFuture, BoxError};
///
/// struct Cached;
///
/// impl ChatModel for Cached {
///     fn chat<'a>(&'a self, request: &'a ChatRequest) -> BoxFuture<'a, Result<ChatResponse, BoxError>> {
///         if let Some(log) = request.events.log() {
///             log.emit(Event::LlmFallback { from: "live".into(), to: "cache".into() });
///         }
///         Box::pin(async { Ok(ChatResponse::text("from the cache")) })
///     }
/// }
/// # let _ = Cached;
/// ```
#[derive(Clone, Default)]
pub struct EventSink(Option<Arc<EventLog>>);

impl EventSink {
    /// A sink that records on `log`.
    pub fn new(log: Arc<EventLog>) -> Self {
        EventSink(Some(log))
    }

    /// The log, if there is one.
    pub fn log(&self) -> Option<&Arc<EventLog>> {
        self.0.as_ref()
    }
}

impl PartialEq for EventSink {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl fmt::Debug for EventSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "EventSink(run log)"
        } else {
            "EventSink(none)"
        })
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
    }
}
