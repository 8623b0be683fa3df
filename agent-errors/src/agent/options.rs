//! What one run is given: its id, values, streaming, deadline, caps and a person's answers.

use std::sync::Arc;

use crate::approval::{Answer, Decision, GivenAnswer, PendingApproval};
use crate::executor::Cancellation;
use crate::extensions::Extensions;
use crate::observe::{EventStream, Feed};
use crate::usage::{RunMeter, UsageLimits};

use super::RunDelta;

/// How to run: cancellation and the like.
///
/// # Examples
///
/// ```
/// use agent_errors::{Agent, Cancellation, RunOptions};
/// use agent_errors::testing::ScriptedModel;
///
/// struct UserId(u64); // what a tool reads with a `Ctx<UserId>` parameter
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let agent = Agent::builder("a").model(ScriptedModel::new().text("done")).build()?;
/// let cancel = Cancellation::new(); // keep a clone to stop the run from elsewhere
/// let options = RunOptions::new().run_id("ticket-1234").context(UserId(42)).cancellation(cancel.clone());
/// let outcome = agent.run_with("close the ticket", options).await;
/// assert_eq!(outcome.run_id, "ticket-1234");
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct RunOptions {
    /// Cancels the run: pending tool calls answer "operation cancelled" and the run ends with
    /// [`RunError::Cancelled`](crate::RunError::Cancelled).
    pub cancellation: Cancellation,
    /// Where the model's answers are streamed as they arrive, when set: the run then calls
    /// [`ChatModel::chat_stream`](crate::ChatModel::chat_stream) instead of `chat`.
    pub deltas: Option<tokio::sync::mpsc::Sender<RunDelta>>,
    /// Values for this run's tools, fixers and permission hook, asked for by type.
    pub extensions: Extensions,
    /// This run's own live stream, if asked for.
    pub(crate) feed: Option<Feed>,
    /// The run's id, when the caller chose it.
    pub(crate) run_id: Option<String>,
    /// The journal of the engine that replays the run, when one does (Restate): the run's one
    /// journal, in place of the agent's checkpoint store.
    pub(crate) journal: Option<super::durable::Seam>,
    /// A person's answers to calls the run waits on, each bound to its question.
    pub(crate) answers: Vec<GivenAnswer>,
    /// This run's caps, when not the agent's.
    pub(crate) usage_limits: Option<Arc<UsageLimits>>,
    /// The meter of the run that started this one (a fixer agent's run is started by the run
    /// whose call it repairs): this run's usage counts there too, against its caps.
    pub(crate) caller_meter: RunMeter,
    /// Whether the model is sent only the latest failure of a tool in full.
    pub(crate) compact_failures: bool,
}

impl RunOptions {
    /// Default options: a cancellation handle nobody else holds.
    pub fn new() -> Self {
        RunOptions::default()
    }

    /// Uses this cancellation handle.
    #[must_use]
    pub fn cancellation(mut self, cancellation: Cancellation) -> Self {
        self.cancellation = cancellation;
        self
    }

    /// Names the run (by default a random id is made): the key its checkpoints are saved
    /// under, what [`Agent::resume`](crate::Agent::resume) is given, and the first half of each call's
    /// [`IdempotencyKey`](crate::call::IdempotencyKey). A durable run refuses an id its store already
    /// holds ([`RunError::Checkpoint`](crate::RunError::Checkpoint) with a conflict), so two runs never share one.
    #[must_use]
    pub fn run_id(mut self, run_id: impl Into<String>) -> Self {
        self.run_id = Some(run_id.into());
        self
    }

    /// Answers `pending`, a call the run waits on (see
    /// [`RunError::WaitingForPerson`](crate::RunError::WaitingForPerson)): given to
    /// [`Agent::resume`](crate::Agent::resume), the run goes on with the answer instead of
    /// asking its approver. The answer is bound to the question's
    /// [`digest`](crate::approval::PendingApproval::digest) (the tool, the whole arguments and
    /// why it asked) and to the run that stopped on it, and used once: a later call reusing the
    /// call id with other arguments or another tool, or the same call in a run that never
    /// stopped to wait on it, is asked again, and the answer is reported refused for it.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::{RunOptions, approval::{Decision, PendingApproval, WaitReason}};
    ///
    /// let pending = PendingApproval::new("call-1", "transfer", r#"{"amount": 1}"#, WaitReason::ApprovalRequired);
    /// let options = RunOptions::new().answer_to(&pending, Decision::Approve);
    /// # let _ = options;
    /// ```
    #[must_use]
    pub fn answer_to(self, pending: &PendingApproval, decision: Decision) -> Self {
        // A question saved before digests existed has none: bound by its call id, once.
        self.answered(Answer::to(pending, decision))
    }

    /// Gives the run `answer`, a person's [`Answer`] to a call it waits on: like
    /// [`answer_to`](Self::answer_to) (bound to its question's digest, used once), and an
    /// answer that may expire or be signed. A call the run reaches after the answer expired
    /// does not run: the model is told the approval expired, an
    /// [`AnswerExpired`](crate::Event::AnswerExpired) event says so, and
    /// [`RunOutcome::expired_approvals`](crate::RunOutcome::expired_approvals) lists it. On an
    /// agent with an [answer key](crate::AgentBuilder::answer_key), an answer not signed with
    /// it is refused (reported, and the call asked again), however it was given.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use agent_errors::RunOptions;
    /// use agent_errors::approval::{Answer, AnswerKey, Decision, PendingApproval, WaitReason};
    ///
    /// let key = AnswerKey::new([9u8; 32])?;
    /// let pending = PendingApproval::new("call-1", "transfer", r#"{"amount": 1}"#, WaitReason::ApprovalRequired);
    /// // As it came back from the person's client:
    /// let token = Answer::to(&pending, Decision::Approve)
    ///     .expires_at(SystemTime::now() + Duration::from_secs(600))
    ///     .signed(&key)
    ///     .to_token();
    /// let options = RunOptions::new().run_id("rent").answered(Answer::from_token(&token)?);
    /// # let _ = options;
    /// # Ok::<(), agent_errors::approval::AnswerError>(())
    /// ```
    #[must_use]
    pub fn answered(mut self, answer: Answer) -> Self {
        self.answers.push(GivenAnswer::new(answer));
        self
    }

    /// Answers the call `call_id` that a run waits on, by its id: used once, and only for the
    /// question the run saved when it stopped to wait for that call (the same tool, arguments
    /// shown and reason); a call the model makes later with the same id is asked again. Prefer
    /// [`answer_to`](Self::answer_to), which also checks the tool and arguments the person
    /// was shown.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::{RunOptions, approval::Decision};
    ///
    /// let options = RunOptions::new()
    ///     .answer("call-1", Decision::Approve)
    ///     .answer("call-2", Decision::Deny("not this month".into()));
    /// # let _ = options;
    /// ```
    #[must_use]
    pub fn answer(mut self, call_id: impl Into<String>, decision: Decision) -> Self {
        self.answers
            .push(GivenAnswer::by_call_id(call_id.into(), decision));
        self
    }

    /// Streams the model's answers to `sender` as they arrive: text and tool-call deltas, and
    /// [`RunDelta::TurnRestarted`] when a retry discards a turn's partial output. A full channel
    /// slows the stream down (backpressure); a closed one is ignored. Tool calls run only once
    /// their turn's stream is complete.
    #[must_use]
    pub fn stream_to(mut self, sender: tokio::sync::mpsc::Sender<RunDelta>) -> Self {
        self.deltas = Some(sender);
        self
    }

    /// Gives this run a value that its tools and fixers ask for with a [`Ctx<T>`](crate::Ctx)
    /// parameter (and the permission hook reads): the user's identity, a token, a tenant. One
    /// value per type; the model never sees it.
    #[must_use]
    pub fn context<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.extensions.insert(value);
        self
    }

    /// Caps this run's usage with `limits` instead of the agent's
    /// ([`AgentBuilder::usage_limits`](crate::AgentBuilder::usage_limits)). A resumed run keeps the caps it was started with,
    /// unless these options give it new ones.
    ///
    /// ```
    /// use agent_errors::{Agent, RunError, RunOptions};
    /// use agent_errors::run::{UsageLimit, UsageLimits};
    /// use agent_errors::testing::ScriptedModel;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let agent = Agent::builder("greeter").model(ScriptedModel::new().text("hi")).build()?;
    /// let options = RunOptions::new().usage_limits(UsageLimits::new().max_requests(0));
    /// let error = agent.run_with("say hi", options).await.result.unwrap_err();
    /// assert_eq!(error.usage_limit().unwrap().limit, UsageLimit::Requests);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn usage_limits(mut self, limits: UsageLimits) -> Self {
        self.usage_limits = Some(Arc::new(limits));
        self
    }

    /// Gives this run every value of `extensions` (replacing any given before).
    #[must_use]
    pub fn extensions(mut self, extensions: Extensions) -> Self {
        self.extensions = extensions;
        self
    }

    /// Streams this run's events live, holding up to `capacity` (at least 1) for a consumer
    /// that falls behind; past that the oldest are dropped and the consumer is told how many it
    /// missed. The run never waits for the stream, and the stream ends when the run does
    /// (and these options' clones are dropped).
    ///
    /// ```
    /// use agent_errors::{Agent, RunOptions};
    /// use agent_errors::testing::ScriptedModel;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let agent = Agent::builder("greeter").model(ScriptedModel::new().text("hi")).build()?;
    /// let (options, mut events) = RunOptions::new().events(64);
    /// agent.run_with("say hi", options).await.result?;
    /// // Nothing went wrong, so there was nothing to tell: the stream ends.
    /// assert!(events.recv().await.is_none());
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn events(mut self, capacity: usize) -> (Self, EventStream) {
        let feed = Feed::new(capacity);
        let stream = feed.subscribe();
        self.feed = Some(feed);
        (self, stream)
    }

    /// Sends the model, when it has called a tool again after the tool failed, only that
    /// tool's latest failure in full and each earlier one as a one-line summary, so a long run
    /// does not pay for its old failures on every turn. The transcript the run hands back
    /// ([`RunOutcome::transcript`](crate::RunOutcome::transcript)) keeps every message whole.
    /// Off by default.
    ///
    /// ```
    /// use agent_errors::{Agent, RunOptions};
    /// use agent_errors::testing::ScriptedModel;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let agent = Agent::builder("a").model(ScriptedModel::new().text("done")).build()?;
    /// let outcome = agent.run_with("go", RunOptions::new().compact_failures(true)).await;
    /// assert_eq!(outcome.result?, "done");
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn compact_failures(mut self, compact: bool) -> Self {
        self.compact_failures = compact;
        self
    }
}
