//! A chat model that answers from a script and records what it was asked.

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::future::BoxFuture;

use crate::chat::{ChatRequest, ChatResponse, ToolCall};
use crate::error::BoxError;
use crate::model::ChatModel;

type Responder = Box<dyn FnOnce(&ChatRequest) -> Result<ChatResponse, BoxError> + Send>;
type ErrorFactory = Box<dyn Fn() -> BoxError + Send + Sync>;

enum ReplyKind {
    Response(ChatResponse),
    Error(BoxError),
    Computed(Responder),
}

/// One scripted answer of a [`ScriptedModel`].
///
/// # Examples
///
/// A reply computed from what the model was sent, arriving after a delay:
///
/// ```
/// use std::time::Duration;
/// use agent_errors::{ChatResponse, Message};
/// use agent_errors::testing::{Reply, ScriptedModel};
///
/// let model = ScriptedModel::new().reply(
///     Reply::computed(|request| {
///         let tool_said = request.messages.iter().rev().find_map(|m| match m {
///             Message::Tool(result) => Some(result.content.clone()),
///             _ => None,
///         });
///         Ok(ChatResponse::text(tool_said.unwrap_or_default()))
///     })
///     .after(Duration::from_millis(300)),
/// );
/// assert_eq!(model.remaining(), 1);
/// ```
pub struct Reply {
    kind: ReplyKind,
    latency: Duration,
}

impl fmt::Debug for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Reply");
        match &self.kind {
            ReplyKind::Response(r) => d.field("response", r),
            ReplyKind::Error(e) => d.field("error", e),
            ReplyKind::Computed(_) => d.field("computed", &"<fn>"),
        };
        d.field("latency", &self.latency).finish()
    }
}

impl Reply {
    /// Answers with this response.
    pub fn response(response: ChatResponse) -> Self {
        Reply {
            kind: ReplyKind::Response(response),
            latency: Duration::ZERO,
        }
    }

    /// A final text answer.
    pub fn text(text: impl Into<String>) -> Self {
        Reply::response(ChatResponse::text(text))
    }

    /// The model call fails with this error.
    pub fn error(error: impl Into<BoxError>) -> Self {
        Reply {
            kind: ReplyKind::Error(error.into()),
            latency: Duration::ZERO,
        }
    }

    /// Computes the answer from the request (to echo what a tool said, say).
    pub fn computed(
        f: impl FnOnce(&ChatRequest) -> Result<ChatResponse, BoxError> + Send + 'static,
    ) -> Self {
        Reply {
            kind: ReplyKind::Computed(Box::new(f)),
            latency: Duration::ZERO,
        }
    }

    /// Waits `latency` (on the tokio clock) before answering.
    #[must_use]
    pub fn after(mut self, latency: Duration) -> Self {
        self.latency = latency;
        self
    }
}

/// The script ran out: the model was called more often than replies were queued.
///
/// # Examples
///
/// A test whose agent calls the model more often than scripted fails with this, never a hang:
///
/// ```
/// use agent_errors::{Agent, RunError};
/// use agent_errors::testing::{ScriptExhausted, ScriptedModel};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let agent = Agent::builder("a").model(ScriptedModel::new()).build()?;
/// let error = agent.run("hi").await.unwrap_err();
/// let exhausted = error.model_error().and_then(|e| e.downcast_ref::<ScriptExhausted>());
/// assert_eq!(exhausted, Some(&ScriptExhausted { call: 1, scripted: 0 }));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the scripted model has no reply left for call {call} ({scripted} replies were scripted)")]
pub struct ScriptExhausted {
    /// Which call (1-based) found the script empty.
    pub call: usize,
    /// How many replies were scripted in all.
    pub scripted: usize,
}

struct State {
    name: String,
    replies: Mutex<VecDeque<Reply>>,
    scripted: AtomicU64,
    requests: Mutex<Vec<ChatRequest>>,
    next_call_id: AtomicU64,
    when_empty: Mutex<Option<ErrorFactory>>,
}

/// A [`ChatModel`] that answers from a queue of [`Reply`]s, in order, and records every request
/// it was sent. Clones share the script and the record, so keep a clone to inspect after a run.
///
/// Tool calls get ids `call_1`, `call_2`, ... in the order they are scripted. When the script
/// runs out the model fails with [`ScriptExhausted`] (or with the error set by
/// [`ScriptedModel::then_fail_forever`]); it never panics.
///
/// # Examples
///
/// ```
/// use agent_errors::{Agent, HttpError};
/// use agent_errors::testing::ScriptedModel;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let model = ScriptedModel::new()
///     .error(HttpError::new(503, "overloaded")) // the first call fails
///     .text("hello");                             // the second answers
/// let agent = Agent::builder("a")
///     .model(model.clone())
///     .on_llm_error(|_, _| agent_errors::LlmErrorDecision::retry(2, std::time::Duration::from_secs(1)))
///     .build()?;
/// assert_eq!(agent.run("hi").await?, "hello");
/// assert_eq!(model.calls(), 2);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct ScriptedModel {
    state: Arc<State>,
}

impl fmt::Debug for ScriptedModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScriptedModel")
            .field("name", &self.state.name)
            .field("remaining", &self.remaining())
            .field("calls", &self.calls())
            .finish()
    }
}

impl Default for ScriptedModel {
    fn default() -> Self {
        ScriptedModel::new()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic in a test while holding the lock cannot leave a queue half-written.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl ScriptedModel {
    /// An empty script named `scripted`.
    pub fn new() -> Self {
        ScriptedModel::named("scripted")
    }

    /// An empty script with this model name.
    pub fn named(name: impl Into<String>) -> Self {
        ScriptedModel {
            state: Arc::new(State {
                name: name.into(),
                replies: Mutex::new(VecDeque::new()),
                scripted: AtomicU64::new(0),
                requests: Mutex::new(Vec::new()),
                next_call_id: AtomicU64::new(1),
                when_empty: Mutex::new(None),
            }),
        }
    }

    /// Queues a reply.
    pub fn push(&self, reply: Reply) {
        self.state.scripted.fetch_add(1, Ordering::Relaxed);
        lock(&self.state.replies).push_back(reply);
    }

    /// Queues a reply (builder style).
    #[must_use]
    pub fn reply(self, reply: Reply) -> Self {
        self.push(reply);
        self
    }

    /// Queues a final text answer.
    #[must_use]
    pub fn text(self, text: impl Into<String>) -> Self {
        self.reply(Reply::text(text))
    }

    /// Queues a turn with one tool call. `arguments` is sent as written: a `serde_json::Value`,
    /// or raw text (which may be broken JSON on purpose).
    #[must_use]
    pub fn tool_call(self, name: impl Into<String>, arguments: impl fmt::Display) -> Self {
        self.tool_calls([(name, arguments)])
    }

    /// Queues a turn with several tool calls made at once.
    #[must_use]
    pub fn tool_calls<N, A>(self, calls: impl IntoIterator<Item = (N, A)>) -> Self
    where
        N: Into<String>,
        A: fmt::Display,
    {
        let calls = calls
            .into_iter()
            .map(|(name, args)| ToolCall::new(self.next_call_id(), name.into(), args.to_string()))
            .collect();
        self.reply(Reply::response(ChatResponse::tool_calls(calls)))
    }

    /// Queues a failed model call.
    #[must_use]
    pub fn error(self, error: impl Into<BoxError>) -> Self {
        self.reply(Reply::error(error))
    }

    /// Queues `n` failed model calls, each with a fresh error from `make`.
    #[must_use]
    pub fn errors<E: Into<BoxError>>(self, n: usize, make: impl Fn() -> E) -> Self {
        for _ in 0..n {
            self.push(Reply::error(make()));
        }
        self
    }

    /// Queues an answer computed from the request when it comes.
    #[must_use]
    pub fn computed(
        self,
        f: impl FnOnce(&ChatRequest) -> Result<ChatResponse, BoxError> + Send + 'static,
    ) -> Self {
        self.reply(Reply::computed(f))
    }

    /// Once the script is used up, fails every call with a fresh error from `make` instead of
    /// [`ScriptExhausted`].
    #[must_use]
    pub fn then_fail_forever<E: Into<BoxError>>(
        self,
        make: impl Fn() -> E + Send + Sync + 'static,
    ) -> Self {
        *lock(&self.state.when_empty) = Some(Box::new(move || make().into()));
        self
    }

    /// A fresh tool call id, for building [`ChatResponse`]s by hand.
    pub fn next_call_id(&self) -> String {
        format!(
            "call_{}",
            self.state.next_call_id.fetch_add(1, Ordering::Relaxed)
        )
    }

    /// Every request sent so far, in order.
    pub fn requests(&self) -> Vec<ChatRequest> {
        lock(&self.state.requests).clone()
    }

    /// The last request sent.
    pub fn last_request(&self) -> Option<ChatRequest> {
        lock(&self.state.requests).last().cloned()
    }

    /// How many times the model was called.
    pub fn calls(&self) -> usize {
        lock(&self.state.requests).len()
    }

    /// Replies not yet used.
    pub fn remaining(&self) -> usize {
        lock(&self.state.replies).len()
    }

    fn next_reply(&self, request: &ChatRequest) -> (Result<ChatResponse, BoxError>, Duration) {
        let call = {
            let mut requests = lock(&self.state.requests);
            requests.push(request.clone());
            requests.len()
        };
        let reply = lock(&self.state.replies).pop_front();
        match reply {
            Some(Reply { kind, latency }) => {
                let result = match kind {
                    ReplyKind::Response(response) => Ok(response),
                    ReplyKind::Error(error) => Err(error),
                    ReplyKind::Computed(f) => f(request),
                };
                (result, latency)
            }
            None => {
                let error = match &*lock(&self.state.when_empty) {
                    Some(make) => make(),
                    None => Box::new(ScriptExhausted {
                        call,
                        scripted: usize::try_from(self.state.scripted.load(Ordering::Relaxed))
                            .unwrap_or(usize::MAX),
                    }),
                };
                (Err(error), Duration::ZERO)
            }
        }
    }
}

impl ChatModel for ScriptedModel {
    fn chat<'a>(
        &'a self,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChatResponse, BoxError>> {
        let (result, latency) = self.next_reply(request);
        Box::pin(async move {
            if !latency.is_zero() {
                tokio::time::sleep(latency).await;
            }
            result
        })
    }

    fn name(&self) -> &str {
        &self.state.name
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::Message;

    #[tokio::test(start_paused = true)]
    async fn answers_in_order_records_requests_and_reports_running_out() {
        let model = ScriptedModel::new()
            .tool_calls([("a", "{}"), ("b", "not json")])
            .text("done");
        let request = ChatRequest::new(vec![Message::user("hi")], Vec::new());
        let first = model.chat(&request).await.unwrap();
        let ids: Vec<_> = first.tool_calls.iter().map(|c| &*c.id).collect();
        assert_eq!(ids, ["call_1", "call_2"]);
        assert_eq!(first.tool_calls[1].arguments, "not json");
        assert_eq!(
            model.chat(&request).await.unwrap().text.as_deref(),
            Some("done")
        );
        let err = model.chat(&request).await.unwrap_err();
        let exhausted = err.downcast_ref::<ScriptExhausted>().unwrap();
        assert_eq!((exhausted.call, exhausted.scripted), (3, 2));
        assert_eq!(model.calls(), 3);
        assert_eq!(model.requests()[0], request);
    }

    #[tokio::test(start_paused = true)]
    async fn latency_waits_on_the_tokio_clock() {
        let model = ScriptedModel::new().reply(Reply::text("slow").after(Duration::from_secs(7)));
        let start = tokio::time::Instant::now();
        model.chat(&ChatRequest::default()).await.unwrap();
        assert_eq!(start.elapsed(), Duration::from_secs(7));
    }

    #[tokio::test]
    async fn fails_forever_once_the_script_is_used_up() {
        let model = ScriptedModel::new()
            .text("one")
            .then_fail_forever(|| std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        let request = ChatRequest::default();
        assert!(model.chat(&request).await.is_ok());
        for _ in 0..3 {
            let err = model.chat(&request).await.unwrap_err();
            assert!(err.downcast_ref::<std::io::Error>().is_some());
        }
    }
}
