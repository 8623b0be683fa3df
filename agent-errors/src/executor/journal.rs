//! The one seam a run records through: every run holds one [`Journal`], and every step of the
//! run goes through it. A run without a checkpoint store or an engine holds [`NoJournal`],
//! which runs each step as it is, waits on tokio's clock, saves nothing and costs nothing.
//!
//! The run tells the journal what to do and hands it the work; it never asks what kind of
//! journal it holds. What goes through the seam:
//! - **Steps**: each model request (`agent/run/model_call.rs`), tool attempt
//!   (`executor/attempt.rs`) and reconciler's answer (`executor/unknown.rs`) is handed to
//!   `run_step` as the work that makes it. A journal that replays the run
//!   (a durable-execution engine's) keeps the step's outcome as a value, failures included, and
//!   on replay hands it back without running the step again; any other journal awaits the work
//!   where it is, with nothing boxed, named or kept. A turn's calls are answered through
//!   `answer_all`: together, or one after another for a journal that
//!   replays the run, since a replay must ask for the same steps in the same order.
//! - **Waits**: every retry's backoff and `Retry-After` sleeps with the journal's
//!   [`sleeper`](Journal::sleeper): tokio's clock, or the engine's durable sleep.
//! - **Saves**: how far each call got (`save_progress`, from the course,
//!   the gate and the ladder, handed what builds the progress, built only by a journal that
//!   saves); the agent loop's own save points (the run started, a turn asked for calls, a call
//!   was answered, the run finished) are the same object's, seen through the loop's face of this
//!   trait (`agent/durable/journal.rs`).
//!
//! Who implements it: the agent's checkpoint store (`agent/durable/checkpoint_journal.rs`: every save
//! appended to the store's journal; steps run as they are, since a resumed run goes on from its
//! saves) and Restate (`restate/journal.rs`: every step a `ctx.run`, every wait a `ctx.sleep`,
//! no saves, since Restate replays the run from its own journal). A run has exactly one: a run
//! on Restate keeps no checkpoints, whatever store its agent has. An implementation says what
//! it is ([`records`](Journal::records), [`replays`](Journal::replays)); only the helpers here
//! read that.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, LazyLock};
use std::task::{Context, Poll};

use futures_util::FutureExt;
use futures_util::future::{Either, Ready, join_all, ready};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use super::context::recovery::RecoveryState;
use super::resume::CallProgress;
use crate::error::BoxFuture;
use crate::escapes::Visible;
use crate::retry::Sleep;

/// Where a run records its steps, its waits and its saves.
pub(crate) trait Journal: fmt::Debug + Send + Sync + 'static {
    /// Whether this journal saves anything: when it does not, nothing is built for it to save.
    /// Read by the seam's helpers (`save_progress`), not at the run's call sites.
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
    /// and the run waits on the engine's clock, not tokio's. Read by the seam's helpers
    /// (`run_step`, `answer_all`), not at the run's call sites.
    fn replays(&self) -> bool {
        false
    }

    /// Runs `work` as the run's next step named `name` and keeps its value, or, when the
    /// journal already holds this step (a replay), hands back the kept value without running
    /// `work`. `None` when the journal could not keep the step: the run then stops. Asked only
    /// of a journal that [replays](Journal::replays), through `run_step`.
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

/// A run's one journal as the run holds it: the journal, and whether it records and replays,
/// read once as the run starts, so that the helpers below test a flag where they would have
/// called the journal, and a run that records and replays nothing calls it for nothing.
#[derive(Clone)]
pub(crate) struct Held {
    journal: Arc<dyn Journal>,
    records: bool,
    replays: bool,
}

impl Held {
    /// `journal`, as a run holds it.
    pub(crate) fn new(journal: Arc<dyn Journal>) -> Held {
        let (records, replays) = (journal.records(), journal.replays());
        Held {
            journal,
            records,
            replays,
        }
    }

    /// How the run's retry loops wait.
    pub(crate) fn sleeper(&self) -> Sleep {
        self.journal.sleeper()
    }

    // What the run hands its journal, whatever journal it is: the journal decides how each is
    // done.

    /// Runs the step `work` makes, or replays it: a journal that [replays](Journal::replays)
    /// the run keeps its outcome under the name `name` makes, as `keep` makes it, and on replay
    /// reads the kept outcome back with `read` without making `work` at all; any other journal
    /// awaits `work` where it is, with nothing boxed, named or kept. When the journal could not
    /// keep the step, or holds a value this build cannot read, the step's outcome is what
    /// `lost` makes.
    ///
    /// `work` is made here, not handed in made, and a step run as it is is the work's own
    /// future: it is not moved through one more layer, and a kept step is boxed so that a step
    /// run as it is does not carry its space.
    #[inline]
    pub(crate) fn run_step<'a, W, K>(
        &'a self,
        name: impl FnOnce() -> String,
        work: impl FnOnce() -> W,
        (keep, read): (
            impl FnOnce(W::Output) -> K + Send + 'a,
            impl FnOnce(K) -> W::Output + Send + 'a,
        ),
        lost: impl FnOnce() -> W::Output + Send + 'a,
    ) -> Step<'a, W>
    where
        W: Future + Send + 'a,
        W::Output: Send,
        K: Serialize + DeserializeOwned + 'a,
    {
        if self.replays {
            let kept = kept_step(&*self.journal, name(), work(), keep, read);
            Either::Right(Box::pin(async move { kept.await.unwrap_or_else(lost) }))
        } else {
            Either::Left(work())
        }
    }

    /// Saves how far the call `call_id` got, as `progress` builds it, with the run's recovery
    /// state as `recovery` reads it; both are asked for only by a journal that
    /// [records](Journal::records) anything. False when the save failed (the run is then
    /// halting, and the call must not go on to run its tool).
    #[inline]
    pub(crate) fn save_progress<'a>(
        &'a self,
        call_id: &'a str,
        progress: impl FnOnce() -> CallProgress,
        recovery: impl FnOnce() -> RecoveryState,
    ) -> Saved<'a> {
        if self.records {
            Either::Right(self.journal.progress(call_id, progress(), recovery()))
        } else {
            Either::Left(ready(true))
        }
    }

    /// Awaits the answers `answers` makes, one per call of a turn: together, or one after
    /// another for a journal that [replays](Journal::replays) the run (a replay must ask for
    /// the same steps in the same order).
    pub(crate) async fn answer_all<F: Future>(
        &self,
        answers: impl Iterator<Item = F>,
    ) -> Vec<F::Output> {
        if !self.replays {
            return join_all(answers).await;
        }
        let mut answered = Vec::with_capacity(answers.size_hint().0);
        for answer in answers {
            answered.push(answer.await);
        }
        answered
    }

    /// Whether the run can wait as this journal waits: a journal that
    /// [replays](Journal::replays) the run waits on the engine's clock, any other on tokio's,
    /// which needs a runtime with its timer (a run outside any Tokio runtime is left to the
    /// executor it runs on).
    pub(crate) fn can_wait(&self) -> bool {
        self.replays || super::runtime_has_timer()
    }

    /// `reading`, a reading of the clock, while it still tells the time: a journal that
    /// [records](Journal::records) anything saves before the run's next timed event, and that
    /// save takes time, so the clock is read again after it (`None`).
    #[inline]
    pub(crate) fn reading_after_save(&self, reading: Instant) -> Option<Instant> {
        (!self.records).then_some(reading)
    }
}

impl fmt::Debug for Held {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.journal.fmt(f)
    }
}

/// A step as its journal runs it (`run_step`): the work awaited where it is, or a kept step,
/// boxed.
pub(crate) type Step<'a, W> = Either<W, BoxFuture<'a, <W as Future>::Output>>;

/// A save as its journal makes it (`save_progress`): done at once by a journal that saves
/// nothing, else the journal's own.
pub(crate) type Saved<'a> = Either<Ready<bool>, BoxFuture<'a, bool>>;

/// `work` as a step of a journal that replays the run, named `name`: its outcome kept as `keep`
/// makes it, or, on replay, the kept outcome read back by `read` without running `work`.
async fn kept_step<'a, T, K>(
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
