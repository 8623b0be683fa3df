//! The run's journal on Restate: the run's one journal (the executor's `Journal`) is one that
//! replays the run, each model request and tool attempt a `ctx.run` and each wait a
//! `ctx.sleep`, and it saves nothing (Restate replays the run from its own journal). A run's
//! journal is a shared, `'static` object, and a handler's context borrows the invocation; so the
//! run asks for each step over a channel, and the handler ([`serve`]) makes it a `ctx.run` (or a
//! `ctx.sleep`) on its own context.
//!
//! A step goes: the run sends its name; the handler calls `ctx.run` with a closure that, when
//! Restate runs it (the step is not in the journal yet), tells the run to do its work and
//! journals the value the run sends back. On replay Restate does not run the closure: the run is
//! handed the journaled value and its work is dropped unrun.

use std::sync::Arc;
use std::time::Duration;

use restate_sdk::prelude::{
    Context, ContextAwakeables, ContextSideEffects, ContextTimers, Json, RunFuture,
};
use restate_sdk::prelude::{HandlerResult, TerminalError};
use tokio::sync::{mpsc, oneshot};

use crate::agent::RunJournal;
use crate::approval::PendingApproval;
use crate::error::BoxFuture;
use crate::escapes::Visible;
use crate::executor::{CallProgress, Journal, Recorded, RecoveryState};
use crate::retry::Sleep;

/// What the run asks the handler for.
pub(super) enum StepRequest {
    Step {
        name: String,
        /// Sent when Restate runs the step: the run then does its work.
        start: oneshot::Sender<()>,
        /// The work's value, from the run.
        value: oneshot::Receiver<serde_json::Value>,
        /// The journaled value, for the run; dropped when the step could not be journaled.
        done: oneshot::Sender<serde_json::Value>,
    },
    Sleep {
        delay: Duration,
        done: oneshot::Sender<()>,
    },
    /// A call waits for a person: an awakeable, announced once through `notify`.
    Person {
        pending: PendingApproval,
        notify: Arc<Notify>,
        done: oneshot::Sender<Awoken>,
    },
}

/// What resolved a person's awakeable: its id, and the bytes it was resolved with (or the
/// message it was rejected with), for the run to check.
pub(super) type Awoken = (String, Result<Vec<u8>, String>);

/// How a person learns that a call waits: the awakeable's id and the call.
pub(super) type Notify = dyn Fn(&str, &PendingApproval) + Send + Sync;

/// The run's channel to its handler, in the run's extensions, so the run's approver finds it.
#[derive(Clone)]
pub(super) struct HandlerChannel(pub(super) mpsc::UnboundedSender<StepRequest>);

/// The run's side of the channel.
#[derive(Debug)]
pub(super) struct ChannelJournal {
    requests: mpsc::UnboundedSender<StepRequest>,
}

impl ChannelJournal {
    pub(super) fn new() -> (ChannelJournal, HandlerChannel, super::Steps) {
        let (requests, steps) = mpsc::unbounded_channel();
        let channel = HandlerChannel(requests.clone());
        (ChannelJournal { requests }, channel, steps)
    }
}

impl Journal for ChannelJournal {
    fn records(&self) -> bool {
        false
    }

    fn progress<'a>(
        &'a self,
        _: &'a str,
        _: CallProgress,
        _: RecoveryState,
    ) -> BoxFuture<'a, bool> {
        Box::pin(Recorded)
    }

    fn replays(&self) -> bool {
        true
    }

    fn step<'a>(
        &'a self,
        name: &'a str,
        work: BoxFuture<'a, serde_json::Value>,
    ) -> BoxFuture<'a, Option<serde_json::Value>> {
        step_on(&self.requests, name, work)
    }

    fn sleeper(&self) -> Sleep {
        let requests = self.requests.clone();
        Sleep::with(move |delay| durable_sleep(&requests, delay))
    }
}

/// The run's save points are Restate's own journal: the trait's do-nothing defaults.
impl RunJournal for ChannelJournal {}

/// Waits `delay` on Restate's clock: a durable sleep that holds no process.
fn durable_sleep(
    requests: &mpsc::UnboundedSender<StepRequest>,
    delay: Duration,
) -> impl Future<Output = ()> + Send + use<> {
    let (done, slept) = oneshot::channel();
    let sent = requests.send(StepRequest::Sleep { delay, done });
    async move {
        if sent.is_ok() {
            // A handler gone mid-sleep ends the invocation; the run is dropped with it.
            let _ = slept.await;
        }
    }
}

/// Does `work` as the journaled step `name` of the handler `requests` goes to: the journaled
/// value, or `None` when the step could not be journaled. On replay the work is dropped undone.
pub(super) fn step_on<'a>(
    requests: &'a mpsc::UnboundedSender<StepRequest>,
    name: &'a str,
    work: BoxFuture<'a, serde_json::Value>,
) -> BoxFuture<'a, Option<serde_json::Value>> {
    Box::pin(async move {
        let (start, started) = oneshot::channel();
        let (value_tx, value) = oneshot::channel();
        let (done, journaled) = oneshot::channel();
        let request = StepRequest::Step {
            name: name.to_owned(),
            start,
            value,
            done,
        };
        requests.send(request).ok()?;
        // A replayed step drops `start` unsent: the work is not done again.
        if started.await.is_ok() {
            let _ = value_tx.send(work.await);
        }
        journaled.await.ok()
    })
}

/// Takes up one request of the run on the handler's context.
pub(super) fn serve<'a>(ctx: &'a Context<'_>, request: StepRequest) -> BoxFuture<'a, ()> {
    match request {
        StepRequest::Step {
            name,
            start,
            value,
            done,
        } => Box::pin(async move {
            let step = ctx.run(move || run_step(start, value)).name(name);
            if let Ok(Json(value)) = step.await {
                let _ = done.send(value);
            }
        }),
        StepRequest::Person {
            pending,
            notify,
            done,
        } => Box::pin(async move {
            let (id, answer) = ctx.awakeable::<Vec<u8>>();
            tracing::info!(awakeable = %Visible::of(&id), call = %Visible::of(&pending), "waiting for a person");
            let announced = id.clone();
            let announce = move || async move {
                notify(&announced, &pending);
                HandlerResult::Ok(())
            };
            if ctx.run(announce).name("announce approval").await.is_err() {
                return;
            }
            let answer = answer
                .await
                .map_err(|rejected| rejected.message().to_owned());
            let _ = done.send((id, answer));
        }),
        StepRequest::Sleep { delay, done } => Box::pin(async move {
            tracing::info!(?delay, "durable sleep");
            if ctx.sleep(delay).await.is_ok() {
                let _ = done.send(());
            }
        }),
    }
}

/// The body of a step Restate runs: tells the run to do its work and journals its value.
async fn run_step(
    start: oneshot::Sender<()>,
    value: oneshot::Receiver<serde_json::Value>,
) -> HandlerResult<Json<serde_json::Value>> {
    let _ = start.send(());
    match value.await {
        Ok(value) => Ok(Json(value)),
        // The run ended before its step did: nothing to journal, and nothing to retry.
        Err(_) => Err(TerminalError::new("the run ended before this step finished").into()),
    }
}
