//! The one seam a run records through: every run holds one [`Journal`], and every step of the
//! run goes through it. A run without a checkpoint store or an engine holds [`NoJournal`],
//! which runs each step as it is, waits on tokio's clock, saves nothing and costs nothing.
//!
//! What goes through the seam, and who asks:
//! - **Steps**: each model request (`agent/run/model_call.rs`) and each tool attempt
//!   (`executor/attempt.rs`) asks the journal whether it [replays](Journal::replays) the run. A
//!   journal that does (a durable-execution engine's) keeps the step's outcome as a value,
//!   failures included ([`kept_step`]), and on replay hands it back without running the step
//!   again; with any other journal the step's work is awaited as it is.
//! - **Waits**: every retry's backoff and `Retry-After` sleeps with the journal's
//!   [`sleeper`](Journal::sleeper): tokio's clock, or the engine's durable sleep.
//! - **Saves**: how far each call got ([`progress`](Journal::progress), from the course, the
//!   gate and the ladder); the agent loop's own save points (the run started, a turn asked for
//!   calls, a call was answered, the run finished) are the same object's, seen through the
//!   loop's face of this trait (`agent/durable/journal.rs`).
//!
//! Who implements it: the agent's checkpoint store (`agent/durable/checkpoint_journal.rs`: every save
//! appended to the store's journal; steps run as they are, since a resumed run goes on from its
//! saves) and Restate (`restate/journal.rs`: every step a `ctx.run`, every wait a `ctx.sleep`,
//! no saves, since Restate replays the run from its own journal). A run has exactly one: a run
//! on Restate keeps no checkpoints, whatever store its agent has.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, LazyLock};
use std::task::{Context, Poll};

use futures_util::FutureExt;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::context::recovery::RecoveryState;
use super::resume::CallProgress;
use crate::error::BoxFuture;
use crate::escapes::Visible;
use crate::retry::Sleep;

/// Where a run records its steps, its waits and its saves.
pub(crate) trait Journal: fmt::Debug + Send + Sync + 'static {
    /// Whether this journal saves anything: when it does not, callers skip building what they
    /// would have told it.
    fn records(&self) -> bool;

    /// Records `progress` for the call `call_id`, with the run's `recovery` state as it is now
    /// (the caller reads it, so the journal needs nothing of the run that holds it); false when
    /// the save failed (the run is then halting, and the call must not go on to run its tool).
    fn progress<'a>(
        &'a self,
        call_id: &'a str,
        progress: CallProgress,
        recovery: RecoveryState,
    ) -> BoxFuture<'a, bool>;

    /// Whether this journal replays the run, as a durable-execution engine does: each model
    /// request and tool attempt is a step it keeps ([`step`](Journal::step)), a replay must ask
    /// for the same steps in the same order (so a turn's calls are answered one after another),
    /// and the run waits on the engine's clock, not tokio's.
    fn replays(&self) -> bool {
        false
    }

    /// Runs `work` as the run's next step named `name` and keeps its value, or, when the
    /// journal already holds this step (a replay), hands back the kept value without running
    /// `work`. `None` when the journal could not keep the step: the run then stops. Asked only
    /// of a journal that [replays](Journal::replays).
    fn step<'a>(
        &'a self,
        name: &'a str,
        work: BoxFuture<'a, serde_json::Value>,
    ) -> BoxFuture<'a, Option<serde_json::Value>> {
        let _ = name;
        Box::pin(work.map(Some))
    }

    /// How the run's retry loops wait.
    fn sleeper(&self) -> Sleep {
        Sleep::default()
    }
}

/// `work` as a step of a journal that [replays](Journal::replays) the run, named `name`: its
/// outcome kept as `keep` makes it, or, on replay, the kept outcome read back by `read` without
/// running `work`. `None` when the journal could not keep the step, or holds a value this build
/// cannot read: the run then stops.
///
/// A step's site asks its journal whether it replays and calls this only when it does: a step
/// run as it is is awaited in place, with nothing boxed, named or kept.
pub(crate) async fn kept_step<'a, T, K>(
    journal: &'a dyn Journal,
    name: String,
    work: impl Future<Output = T> + Send + 'a,
    keep: impl FnOnce(T) -> K + Send + 'a,
    read: impl FnOnce(K) -> T,
) -> Option<T>
where
    K: Serialize + DeserializeOwned,
{
    let work = Box::pin(async move {
        serde_json::to_value(keep(work.await)).unwrap_or(serde_json::Value::Null)
    });
    let value = journal.step(&name, work).await?;
    match serde_json::from_value(value) {
        Ok(kept) => Some(read(kept)),
        Err(error) => {
            tracing::error!(step = %Visible::of(&name), error = %Visible::of(error), "a journaled step's value cannot be read");
            None
        }
    }
}

/// The journal of a run with no checkpoint store and no engine: each step run as it is, each
/// wait on tokio's clock, nothing saved.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct NoJournal;

impl NoJournal {
    /// The one shared instance every such run holds.
    pub(crate) fn shared() -> Arc<NoJournal> {
        static SHARED: LazyLock<Arc<NoJournal>> = LazyLock::new(|| Arc::new(NoJournal));
        Arc::clone(&SHARED)
    }
}

impl Journal for NoJournal {
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
}

/// A record with nothing to save: ready at once with "saved". Zero-sized, so boxing it does not
/// allocate and a run without a store pays nothing per call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Recorded;

impl Future for Recorded {
    type Output = bool;

    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<bool> {
        Poll::Ready(true)
    }
}
