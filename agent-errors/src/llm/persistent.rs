//! Persistent retry for unattended runs: keep calling the model through an outage, under a hard
//! time cap, with a heartbeat while waiting.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::time::Instant;

use super::{ChatModel, ChatRequest, ChatResponse};
use crate::classify::{
    ErrorKind, HttpError, classify, find_in_chain, is_overload_error, server_delay,
};
use crate::error::BoxError;
use crate::events::{Event, EventLog, ModelLayer, count_outcome, emit_to};
use crate::retry::{self, Policy, Retrier, RetrySchedule, Step, Stop};
use crate::stream::ChatStream;

/// The default hard cap on one call's retrying: 6 hours.
pub(crate) const DEFAULT_MAX_DURATION: Duration = Duration::from_secs(6 * 60 * 60);

/// The default longest single sleep between heartbeats: 30 seconds.
pub(crate) const DEFAULT_CHUNK: Duration = Duration::from_secs(30);

/// Sent to the heartbeat callback after each chunk of a wait.
///
/// # Examples
///
/// A batch job that reports progress while a long `Retry-After` is waited out:
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use std::time::Duration;
/// use agent_errors::{ChatModel, ChatRequest, HttpError, Message};
/// use agent_errors::llm::{Heartbeat, PersistentRetry};
/// use agent_errors::testing::ScriptedModel;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let busy = HttpError::new(503, "busy").with_header("retry-after", "60");
/// let beats: Arc<Mutex<Vec<Heartbeat>>> = Arc::default();
/// let seen = Arc::clone(&beats);
/// let model = PersistentRetry::new(ScriptedModel::new().error(busy).text("done"))
///     .chunk(Duration::from_secs(30))
///     .on_heartbeat(move |beat| seen.lock().unwrap().push(beat.clone()));
/// let request = ChatRequest::new(vec![Message::user("summarize")], Vec::new());
/// let answer = model.chat(&request).await.expect("answered once the wait is over");
/// assert_eq!(answer.text.as_deref(), Some("done"));
/// let beats = beats.lock().unwrap();
/// assert_eq!(beats.len(), 2); // after 30 s and after 60 s
/// assert_eq!((beats[0].attempt, beats[0].remaining), (1, Duration::from_secs(30)));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Heartbeat {
    /// The attempt that failed and is being waited out (1-based).
    pub attempt: u32,
    /// How much of this wait has passed.
    pub waited: Duration,
    /// How much of this wait is left.
    pub remaining: Duration,
    /// Time since the call began.
    pub elapsed: Duration,
}

type HeartbeatFn = Arc<dyn Fn(&Heartbeat) + Send + Sync>;

/// A [`ChatModel`] that retries its model without an attempt limit, for runs nobody is watching
/// (CI, batch jobs), until a hard time cap (default 6 h) runs out.
///
/// It retries what waiting can fix: whatever [`classify`] finds retryable (for an
/// [`HttpError`] anywhere in the chain: 408, 409, 423, 425, 429 and the 5xx
/// statuses but 501, unless the server said `x-should-retry: false`), except a 429 whose quota or
/// spending limit is used up, and any "overloaded" error. Anything else comes back at once, as it
/// was.
///
/// Delays follow the backoff schedule (default 500 ms · 2^(n-1) up to 5 min, 25% jitter); a
/// `Retry-After` replaces the computed delay and is not cut short, but a wait that would end
/// after the time cap is not started: the last error is returned instead. Each wait is slept in
/// chunks of at most 30 s (`tokio::time::sleep`, so paused test time applies) with the heartbeat
/// callback called after every chunk, which keeps hosts that kill idle sessions at bay. The cap
/// bounds waiting: each call itself is bounded by the model's own timeout.
///
/// Inside an agent run each retry also spends the run's retry allowance
/// ([`Limits::max_retries`](crate::Limits), default 32), and retrying stops when it is spent:
/// raise it for a run that should wait out a long outage (see the
/// [model-call stack](crate::retry#the-model-call-stack)).
///
/// Each retry emits an `llm_retry` `tracing` event, also recorded on the run's report inside an
/// agent run and on an [`EventLog`] attached with [`PersistentRetry::event_log`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use agent_errors::llm::PersistentRetry;
/// # fn wrap(model: impl agent_errors::ChatModel) {
/// let model = PersistentRetry::new(model)
///     .max_duration(Duration::from_secs(2 * 60 * 60))
///     .on_heartbeat(|beat| eprintln!("still waiting: {:?} left", beat.remaining));
/// # }
/// ```
pub struct PersistentRetry<M> {
    model: M,
    max_duration: Duration,
    chunk: Duration,
    backoff: RetrySchedule,
    heartbeat: Option<HeartbeatFn>,
    events: Option<Arc<EventLog>>,
}

impl<M: ChatModel> fmt::Debug for PersistentRetry<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PersistentRetry")
            .field("model", &self.model.name())
            .field("max_duration", &self.max_duration)
            .field("chunk", &self.chunk)
            .field("backoff", &self.backoff)
            .field("heartbeat", &self.heartbeat.is_some())
            .finish_non_exhaustive()
    }
}

impl<M: ChatModel> PersistentRetry<M> {
    /// Retries `model` for up to 6 hours per call.
    pub fn new(model: M) -> Self {
        PersistentRetry {
            model,
            max_duration: DEFAULT_MAX_DURATION,
            chunk: DEFAULT_CHUNK,
            backoff: RetrySchedule::default().with_max(Duration::from_secs(5 * 60)),
            heartbeat: None,
            events: None,
        }
    }

    /// The hard cap on the time one call may spend retrying.
    #[must_use]
    pub fn max_duration(mut self, cap: Duration) -> Self {
        self.max_duration = cap;
        self
    }

    /// The longest single sleep between heartbeats (at least 1 ms).
    #[must_use]
    pub fn chunk(mut self, chunk: Duration) -> Self {
        self.chunk = chunk.max(Duration::from_millis(1));
        self
    }

    /// The delays between attempts (its attempt count is not used: attempts are unbounded).
    #[must_use]
    pub fn backoff(mut self, schedule: RetrySchedule) -> Self {
        self.backoff = schedule;
        self
    }

    /// Called after every chunk of every wait.
    #[must_use]
    pub fn on_heartbeat(mut self, heartbeat: impl Fn(&Heartbeat) + Send + Sync + 'static) -> Self {
        self.heartbeat = Some(Arc::new(heartbeat));
        self
    }

    /// Records `llm_retry` events on this log as well.
    #[must_use]
    pub fn event_log(mut self, log: Arc<EventLog>) -> Self {
        self.events = Some(log);
        self
    }

    /// Asks the model with `ask` until it answers, the time cap passes, or waiting can't help.
    /// A stream is retried only while opening it fails: once output began, a broken stream is
    /// the run's to recover (`on_llm_error`), like any broken stream.
    async fn ask<'a, T>(
        &'a self,
        request: &'a ChatRequest,
        ask: Ask<'a, M, T>,
    ) -> Result<T, BoxError> {
        let start = Instant::now();
        let retrier = Retrier::new(self.backoff.unbounded_delays())
            .with_deadline(start.checked_add(self.max_duration));
        let mut policy = WaitItOut {
            wrapper: self,
            request,
            retrier,
            start,
            ask,
        };
        retry::call(&mut policy).await
    }

    fn record_retry(&self, request: &ChatRequest, attempt: u32, delay: Duration, kind: ErrorKind) {
        let event = Event::LlmRetry {
            layer: ModelLayer::PersistentRetry,
            attempt,
            delay,
            kind,
        };
        emit_to(event, [request.events.log(), self.events.as_ref()]);
    }
}

/// Persistent retry as a policy of the retry loop: no attempt limit of its own, but the time
/// cap and (inside a run) the run's retry allowance; every wait in heartbeat-sized pieces.
struct WaitItOut<'a, M, D, T> {
    wrapper: &'a PersistentRetry<M>,
    request: &'a ChatRequest,
    retrier: Retrier<D>,
    start: Instant,
    ask: Ask<'a, M, T>,
}

/// How a request is put to the model: answered whole ([`ChatModel::chat`]) or opened as a
/// stream ([`ChatModel::chat_stream`]).
type Ask<'a, M, T> = fn(&'a M, &'a ChatRequest) -> BoxFuture<'a, Result<T, BoxError>>;

impl<M: ChatModel, D: Iterator<Item = Duration>, T> Policy for WaitItOut<'_, M, D, T> {
    type Output = T;
    type Error = BoxError;

    fn finished(&mut self, last: &BoxError, recovered: bool) {
        let kind = classify(&**last).kind;
        count_outcome(ModelLayer::PersistentRetry, recovered, kind);
    }

    async fn call(&mut self) -> Result<T, BoxError> {
        (self.ask)(&self.wrapper.model, self.request).await
    }

    async fn retry(&mut self, error: &BoxError) -> Step {
        // A `Retry-After` is not cut short: the deadline bounds it instead.
        let server = server_delay(&**error, Duration::MAX);
        let step = self
            .retrier
            .after_failure(worth_waiting_for(&**error), server);
        let Step::Wait(delay) = step else {
            return step;
        };
        if !self.request.may_ask_again() {
            return Step::Stop(Stop::Exhausted);
        }
        let attempt = self.retrier.failures();
        let kind = classify(&**error).kind;
        self.wrapper
            .record_retry(self.request, attempt, delay, kind);
        step
    }

    fn heartbeat_every(&self) -> Option<Duration> {
        self.wrapper
            .heartbeat
            .is_some()
            .then_some(self.wrapper.chunk)
    }

    fn slept(&mut self, waited: Duration, remaining: Duration) {
        if let Some(heartbeat) = &self.wrapper.heartbeat {
            heartbeat(&Heartbeat {
                attempt: self.retrier.failures(),
                waited,
                remaining,
                elapsed: self.start.elapsed(),
            });
        }
    }
}

/// Whether waiting can fix `error`: the status table's answer, narrowed by the body (an exhausted
/// quota is not a rate limit) and widened to overloads that carry no status.
fn worth_waiting_for(error: &(dyn std::error::Error + 'static)) -> bool {
    let class = classify(error);
    let quota_gone = find_in_chain::<HttpError>(error)
        .is_some_and(|http| http.status() == 429 && http.says_quota_exhausted());
    let refused = class.should_retry == Some(false) || quota_gone;
    !refused && (class.is_retryable() || is_overload_error(error))
}

impl<M: ChatModel> ChatModel for PersistentRetry<M> {
    fn chat<'a>(
        &'a self,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChatResponse, BoxError>> {
        Box::pin(self.ask(request, |model, request| model.chat(request)))
    }

    fn chat_stream<'a>(
        &'a self,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChatStream<'a>, BoxError>> {
        Box::pin(self.ask(request, |model, request| model.chat_stream(request)))
    }

    fn name(&self) -> &str {
        self.model.name()
    }

    fn provider_name(&self) -> Option<&str> {
        self.model.provider_name()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// For a bare status, persistent retry waits for exactly what the classifier calls
    /// retryable: one table, whoever asks.
    #[test]
    fn waits_for_exactly_what_classify_calls_retryable() {
        for status in 100..600 {
            let http = HttpError::new(status, "");
            assert_eq!(
                worth_waiting_for(&http),
                classify(&http).is_retryable(),
                "status {status}"
            );
        }
        // An exhausted quota: neither classify nor the wrapper calls it worth waiting for.
        let quota = HttpError::new(429, "insufficient_quota");
        assert!(!classify(&quota).is_retryable() && !worth_waiting_for(&quota));
        let refused = HttpError::new(529, "Overloaded").with_header("x-should-retry", "false");
        assert!(!worth_waiting_for(&refused));
    }
}
