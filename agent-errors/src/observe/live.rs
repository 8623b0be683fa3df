//! The live stream: every event of a run as it happens, on a bounded channel per agent and per
//! run.
//!
//! A `tokio::sync::broadcast` channel holds the last `capacity` events. Sending never waits
//! and never grows the buffer: when a consumer falls behind, the oldest events it has not read
//! are overwritten, and its next [`EventStream::recv`] says how many it missed before going on
//! with the oldest event still held. A run is never held up by a slow consumer.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::broadcast::{self, error::RecvError, error::TryRecvError};

use crate::events::{Event, LiveFeed};
use crate::model::ChatModel;

/// How many events an agent's live stream holds for a consumer that falls behind.
pub const DEFAULT_EVENT_CAPACITY: usize = 1024;

/// Which run an event belongs to: unique within the process, increasing.
///
/// # Examples
///
/// Telling apart the runs of an agent on its live stream:
///
/// ```
/// use std::collections::HashMap;
/// use std::time::Duration;
/// use agent_errors::{Agent, HttpError, LlmErrorDecision};
/// use agent_errors::observe::RunId;
/// use agent_errors::testing::ScriptedModel;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let busy = || HttpError::new(503, "busy");
/// let agent = Agent::builder("a")
///     .model(ScriptedModel::new().error(busy()).text("one").error(busy()).text("two"))
///     .on_llm_error(|_, _| LlmErrorDecision::retry(2, Duration::from_millis(100)))
///     .build()?;
/// let mut events = agent.subscribe();
/// agent.run("first").await?;
/// agent.run("second").await?;
/// let mut retries: HashMap<RunId, usize> = HashMap::new();
/// while let Some(Ok(delivered)) = events.try_recv() {
///     *retries.entry(delivered.run).or_default() += 1;
/// }
/// assert_eq!(retries.len(), 2); // one model retry in each run, told apart
/// # Ok(())
/// # }
/// ```
///
/// It prints as `run-<n>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RunId(u64);

impl RunId {
    fn next() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        RunId(NEXT.fetch_add(1, Ordering::Relaxed))
    }

    /// The number.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "run-{}", self.0)
    }
}

/// One event of one run, as a live stream delivers it.
///
/// # Examples
///
/// One run's events, live:
///
/// ```
/// use agent_errors::{Agent, Event, HttpError, RunOptions, policy};
/// use agent_errors::testing::{FaultyTool, ScriptedModel, echo_tool};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let flaky = FaultyTool::new(echo_tool("fetch")).fail_times(1, || HttpError::new(503, "busy"));
/// let agent = Agent::builder("a")
///     .model(ScriptedModel::new().tool_call("fetch", r#"{"text": "ok"}"#).text("done"))
///     .tool(flaky.tool().with_policy(policy!(execution = retry(2))))
///     .build()?;
/// let (options, mut events) = RunOptions::new().events(16);
/// agent.run_with("go", options).await.result?;
/// while let Some(Ok(delivered)) = events.recv().await {
///     if let Event::ToolRetry { tool, attempt, .. } = &delivered.event {
///         println!("{}: {tool} failed on try {attempt}, retrying", delivered.run);
///     }
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunEvent {
    /// The run it happened in.
    pub run: RunId,
    /// What happened.
    pub event: Event,
}

/// The consumer fell behind: this many events, the oldest, were dropped before the next one.
///
/// # Examples
///
/// A consumer that keeps only one event behind learns how many it lost:
///
/// ```
/// use agent_errors::{Agent, HttpError, RunOptions, policy};
/// use agent_errors::observe::Missed;
/// use agent_errors::testing::{FaultyTool, ScriptedModel, echo_tool};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let flaky = FaultyTool::new(echo_tool("fetch")).fail_times(2, || HttpError::new(503, "busy"));
/// let agent = Agent::builder("a")
///     .model(ScriptedModel::new().tool_call("fetch", r#"{"text": "ok"}"#).text("done"))
///     .tool(flaky.tool().with_policy(policy!(execution = retry(3))))
///     .build()?;
/// let (options, mut events) = RunOptions::new().events(1);
/// agent.run_with("go", options).await.result?; // two retries, nobody reading
/// assert_eq!(events.recv().await, Some(Err(Missed(1))));
/// assert!(events.recv().await.is_some_and(|e| e.is_ok())); // then the newest one
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the event stream fell behind and missed {0} events")]
pub struct Missed(pub u64);

/// A bounded live feed of events: from [`Agent::subscribe`](crate::Agent::subscribe) (every
/// run of the agent) or [`RunOptions::events`](crate::RunOptions::events) (one run).
///
/// A stream sees the events sent after it was made. It ends (`recv` gives `None`) when no run
/// can send to it any more: a run's stream when the run is over, an agent's when the agent and
/// its clones are dropped.
///
/// # Examples
///
/// A dashboard task that follows every run of an agent:
///
/// ```
/// use agent_errors::Agent;
/// use agent_errors::testing::ScriptedModel;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let agent = Agent::builder("a").model(ScriptedModel::new().text("hi")).build()?;
/// let mut events = agent.subscribe();
/// let dashboard = tokio::spawn(async move {
///     let mut seen = 0;
///     while let Some(delivered) = events.recv().await {
///         match delivered {
///             Ok(event) => { seen += 1; println!("{} {}", event.run, event.event.name()); }
///             Err(missed) => eprintln!("{missed}"),
///         }
///     }
///     seen // the stream ends when the agent is dropped
/// });
/// agent.run("hello").await?;
/// drop(agent);
/// assert_eq!(dashboard.await?, 0); // nothing went wrong, so nothing to tell
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct EventStream {
    receiver: broadcast::Receiver<RunEvent>,
}

impl EventStream {
    /// The next event; `Some(Err(Missed(n)))` when this consumer fell behind and the `n`
    /// oldest events were dropped (the next call goes on with the oldest still held); `None`
    /// once the stream has ended.
    pub async fn recv(&mut self) -> Option<Result<RunEvent, Missed>> {
        match self.receiver.recv().await {
            Ok(event) => Some(Ok(event)),
            Err(RecvError::Lagged(missed)) => Some(Err(Missed(missed))),
            Err(RecvError::Closed) => None,
        }
    }

    /// Like [`recv`](EventStream::recv) without waiting: `None` when no event is waiting.
    pub fn try_recv(&mut self) -> Option<Result<RunEvent, Missed>> {
        match self.receiver.try_recv() {
            Ok(event) => Some(Ok(event)),
            Err(TryRecvError::Lagged(missed)) => Some(Err(Missed(missed))),
            Err(TryRecvError::Empty | TryRecvError::Closed) => None,
        }
    }
}

/// The sending half of a live stream.
#[derive(Debug, Clone)]
pub(crate) struct Feed(broadcast::Sender<RunEvent>);

impl Feed {
    /// A feed holding at most `capacity` events (at least one) for a slow consumer.
    pub(crate) fn new(capacity: usize) -> Self {
        Feed(broadcast::channel(capacity.max(1)).0)
    }

    pub(crate) fn subscribe(&self) -> EventStream {
        EventStream {
            receiver: self.0.subscribe(),
        }
    }

    fn send(&self, run: RunId, event: &Event) {
        // Nobody listening: skip the clone.
        if self.0.receiver_count() > 0 {
            let event = event.clone();
            // Fails only when the last receiver went away since the check: nobody to tell.
            let _ = self.0.send(RunEvent { run, event });
        }
    }
}

/// Where the events of an agent's runs go live, made once per agent and shared by its runs (a
/// run with a stream of its own adds it, in a [`RunFeeds`]): a run makes no observer of its own.
/// It holds the agent's feed weakly, so that a request a model kept (a test double records them)
/// does not keep the agent's stream open once the agent is gone.
pub(crate) struct Observer {
    model: Arc<dyn ChatModel>,
    agent: broadcast::WeakSender<RunEvent>,
}

impl fmt::Debug for Observer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Observer")
            .field("model", &self.model.name())
            .finish_non_exhaustive()
    }
}

impl LiveFeed for Observer {
    fn model(&self) -> &str {
        self.model.name()
    }

    fn publish(&self, run: u64, event: &Event) {
        if let Some(agent) = self.agent.upgrade() {
            Feed(agent).send(RunId(run), event);
        }
    }

    fn close(&self) {}
}

impl Observer {
    /// The observer of an agent whose model is `model` and whose stream is `agent`.
    pub(crate) fn new(model: Arc<dyn ChatModel>, agent: &Feed) -> Self {
        Observer {
            model,
            agent: agent.0.downgrade(),
        }
    }

    /// Where one run's events go live, and the run they are tagged with: this observer, shared,
    /// or with the run's own stream when it asked for one.
    pub(crate) fn for_run(self: &Arc<Self>, own: Option<Feed>) -> (Arc<dyn LiveFeed>, u64) {
        let run = RunId::next().get();
        match own {
            None => (Arc::clone(self) as Arc<dyn LiveFeed>, run),
            Some(own) => {
                let feeds = RunFeeds {
                    shared: Arc::clone(self),
                    own: Mutex::new(Some(own)),
                };
                (Arc::new(feeds), run)
            }
        }
    }
}

/// The live side of a run with a stream of its own: the agent's observer and the run's feed.
#[derive(Debug)]
struct RunFeeds {
    shared: Arc<Observer>,
    /// Taken out when the run ends: a request the model kept must not keep the run's stream
    /// open.
    own: Mutex<Option<Feed>>,
}

impl LiveFeed for RunFeeds {
    fn model(&self) -> &str {
        self.shared.model()
    }

    fn publish(&self, run: u64, event: &Event) {
        self.shared.publish(run, event);
        if let Some(own) = &*self.lock() {
            own.send(RunId(run), event);
        }
    }

    /// The run is over: its stream ends once its consumer has read what is left.
    fn close(&self) {
        *self.lock() = None;
    }
}

impl RunFeeds {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Feed>> {
        // Sending cannot panic, so the feed is never left half-written.
        self.own.lock().unwrap_or_else(|p| p.into_inner())
    }
}
