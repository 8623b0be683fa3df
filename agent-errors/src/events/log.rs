//! Where a run's events are kept: the log, its live feed, the report a run hands back, and the
//! sink model wrappers record through.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::{Event, on_event};

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
///     log.emit(Event::OutputReask { attempt: 1, reason: "`total` is missing".into() });
/// }
/// assert_eq!(log.take().len(), 1);
/// assert!(log.snapshot().is_empty());
/// ```
#[derive(Debug, Default)]
pub struct EventLog {
    events: Mutex<Vec<Event>>,
    /// Where the events go live (shared by the agent's runs, not made per run) and the run they
    /// are tagged with.
    observer: Option<(Arc<dyn LiveFeed>, u64)>,
    /// Set when the run ends: nothing is sent live after that.
    closed: AtomicBool,
}

/// Where an agent run's events go live as they happen, and whose model labels the model-call
/// counters. The observers implement it, one floor up.
pub(crate) trait LiveFeed: Send + Sync + fmt::Debug {
    /// The model's name, for the model-call counters.
    fn model(&self) -> &str;
    /// Sends `event`, of the run tagged `run`, to the live streams.
    fn publish(&self, run: u64, event: &Event);
    /// Ends the run's own live streams: nothing more will happen in it.
    fn close(&self);
}

impl EventLog {
    /// An empty log.
    pub fn new() -> Self {
        EventLog::default()
    }

    /// The log of an agent run: events are tagged with the run (`run`) and sent live.
    pub(crate) fn observed(observer: Arc<dyn LiveFeed>, run: u64) -> Self {
        EventLog {
            events: Mutex::default(),
            observer: Some((observer, run)),
            closed: AtomicBool::new(false),
        }
    }

    /// Records, traces and counts an event.
    pub fn emit(&self, event: Event) {
        self.observe(&event);
        self.record(event);
    }

    /// Ends the live streams of the run: nothing more will happen in it.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        if let Some((observer, _)) = &self.observer {
            observer.close();
        }
    }

    /// Traces and counts an event, once whatever the number of logs it is recorded on.
    pub(super) fn observe(&self, event: &Event) {
        let model = self.observer.as_ref().map_or("", |(o, _)| o.model());
        on_event(event, model);
    }

    /// Records an event without tracing it (the caller traced it once already).
    pub(crate) fn record(&self, event: Event) {
        if let Some((observer, run)) = &self.observer
            && !self.closed.load(Ordering::SeqCst)
        {
            observer.publish(*run, &event);
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
/// use agent_errors::{ChatModel, ChatRequest, ChatResponse, ErrorKind, Event, call::BoxFuture, BoxError};
///
/// struct Cached;
///
/// impl ChatModel for Cached {
///     fn chat<'a>(&'a self, request: &'a ChatRequest) -> BoxFuture<'a, Result<ChatResponse, BoxError>> {
///         if let Some(log) = request.events.log() {
///             log.emit(Event::LlmFallback {
///                 from: "live".into(),
///                 to: "cache".into(),
///                 trigger: "offline",
///                 attempts: 0,
///                 kind: ErrorKind::Transient,
///             });
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
