//! The run's journal on Restate. A run's seams are shared, `'static` objects, and a handler's
//! context borrows the invocation; so the run asks for each step over a channel, and the handler
//! ([`serve`]) makes it a `ctx.run` (or a `ctx.sleep`) on its own context.
//!
//! A step goes: the run sends its name; the handler calls `ctx.run` with a closure that, when
//! Restate runs it (the step is not in the journal yet), tells the run to do its work and
//! journals the value the run sends back. On replay Restate does not run the closure: the run is
//! handed the journaled value and its work is dropped unrun.

use std::time::Duration;

use restate_sdk::prelude::{Context, ContextSideEffects, ContextTimers, Json, RunFuture};
use restate_sdk::prelude::{HandlerResult, TerminalError};
use tokio::sync::{mpsc, oneshot};

use crate::error::BoxFuture;
use crate::journal::Journal;

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
}

/// The run's side of the channel.
#[derive(Debug)]
pub(super) struct ChannelJournal {
    requests: mpsc::UnboundedSender<StepRequest>,
}

impl ChannelJournal {
    pub(super) fn new() -> (ChannelJournal, super::Steps) {
        let (requests, steps) = mpsc::unbounded_channel();
        (ChannelJournal { requests }, steps)
    }
}

impl Journal for ChannelJournal {
    fn step<'a>(
        &'a self,
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
            self.requests.send(request).ok()?;
            // A replayed step drops `start` unsent: the work is not done again.
            if started.await.is_ok() {
                let _ = value_tx.send(work.await);
            }
            journaled.await.ok()
        })
    }

    fn sleep(&self, delay: Duration) -> BoxFuture<'static, ()> {
        let (done, slept) = oneshot::channel();
        let sent = self.requests.send(StepRequest::Sleep { delay, done });
        Box::pin(async move {
            if sent.is_ok() {
                // A handler gone mid-sleep ends the invocation; the run is dropped with it.
                let _ = slept.await;
            }
        })
    }
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
