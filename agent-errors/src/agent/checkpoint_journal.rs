//! The journal of a run whose agent has a checkpoint store: each save point of the run (it
//! started, a turn asked for calls, a call got further, a call was answered, the run finished)
//! saved to the agent's [`CheckpointStore`] under the run's next sequence, as a step (what it
//! changed) appended to the store's journal, or, for the run's first save, every
//! `snapshot_every` steps and in a store that keeps no journal, as a snapshot of the whole
//! state. Model requests and tool attempts run as they are (a resumed run goes on from its
//! saves, not from replayed steps) and waits are on tokio's clock: the seam's defaults.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::RunError;
use super::counts::Counts;
use super::durable::{self, PendingCall, SavedRun};
use super::run_journal::RunJournal;
use super::saved_step::{CallStep, SavedStep};
use super::saved_stop::SavedStop;
use crate::chat::{Message, ToolResult};
use crate::checkpoint::{Checkpoint, CheckpointError, CheckpointStore};
use crate::error::BoxFuture;
use crate::executor::{CallProgress, Journal, RecoveryState, RunContext};

/// Where one run's checkpoints go, and the state it last saved.
pub(super) struct CheckpointJournal {
    store: Arc<dyn CheckpointStore>,
    run_id: String,
    /// Whether the store keeps a journal: otherwise every save is a snapshot.
    journals: bool,
    /// The steps saved after a snapshot before the next save is one.
    snapshot_every: u32,
    /// Saves are made one at a time under this lock, so the stored sequence only ever moves
    /// forward and the latest save holds the latest state.
    saved: tokio::sync::Mutex<Saved>,
    /// Halts the run when a save fails.
    halt: Mutex<Option<CancellationToken>>,
    /// When the run's deadline passes, if it has one: each save records what is left.
    deadline: Mutex<Option<Instant>>,
    failed: Mutex<Option<CheckpointError>>,
}

impl std::fmt::Debug for CheckpointJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckpointJournal")
            .field("run_id", &self.run_id)
            .finish_non_exhaustive()
    }
}

/// The state the run's saves have left, as its journal holds it.
struct Saved {
    run: SavedRun,
    /// The sequence of the next save.
    sequence: u64,
    /// Steps saved since the last snapshot; `None` until this journal saved one, so that its
    /// first save is a snapshot: a resumed run's journal then starts in this build's version
    /// (which builds before the journal refuse) and never goes on from another build's steps.
    steps: Option<u32>,
}

impl CheckpointJournal {
    /// A journal going on from `run`; its first save is `sequence` (0 for a new run), a
    /// snapshot; after it, one save in `snapshot_every` is.
    pub(super) fn new(
        store: Arc<dyn CheckpointStore>,
        run_id: String,
        run: SavedRun,
        sequence: u64,
        snapshot_every: u32,
    ) -> CheckpointJournal {
        CheckpointJournal {
            journals: store.journals(),
            store,
            run_id,
            snapshot_every,
            saved: tokio::sync::Mutex::new(Saved {
                run,
                sequence,
                steps: None,
            }),
            halt: Mutex::new(None),
            deadline: Mutex::new(None),
            failed: Mutex::new(None),
        }
    }

    /// Saves `step`: applies it to the state held and writes it, as a step or as a snapshot.
    /// `make` builds the step from the state as last saved.
    async fn save(&self, make: impl FnOnce(&SavedRun) -> SavedStep) -> bool {
        let left = lock(&self.deadline).map(|at| at.saturating_duration_since(Instant::now()));
        let mut saved = self.saved.lock().await;
        let mut step = make(&saved.run);
        step.deadline_left_ms = left.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        if step.recovery.as_ref() == Some(&saved.run.recovery) {
            step.recovery = None;
        }
        let snapshot = match saved.steps {
            Some(steps) => !self.journals || steps >= self.snapshot_every,
            None => true,
        };
        let result = self.write(&mut saved, step, snapshot).await;
        drop(saved);
        self.settle(result)
    }

    /// Writes `step` as the next save and applies it to the state held.
    async fn write(
        &self,
        saved: &mut Saved,
        step: SavedStep,
        snapshot: bool,
    ) -> Result<(), CheckpointError> {
        let corrupt = |reason: String| CheckpointError::Corrupt {
            run_id: self.run_id.clone(),
            reason,
        };
        let state = if snapshot {
            step.apply(&mut saved.run).map_err(corrupt)?;
            saved.run.stamp_version(self.journals);
            serde_json::to_vec(&saved.run)
        } else {
            let state = serde_json::to_vec(&step);
            step.apply(&mut saved.run).map_err(corrupt)?;
            state
        };
        let checkpoint = Checkpoint {
            run_id: self.run_id.clone(),
            sequence: saved.sequence,
            state: state.map_err(CheckpointError::store)?,
        };
        if snapshot {
            self.store.save(&checkpoint).await?;
        } else {
            self.store.append(&checkpoint).await?;
        }
        saved.sequence += 1;
        saved.steps = Some(if snapshot {
            0
        } else {
            saved.steps.unwrap_or(0) + 1
        });
        Ok(())
    }

    /// Keeps the first failed save and halts the run, so no tool runs past an unsaved state.
    fn settle(&self, saved: Result<(), CheckpointError>) -> bool {
        let Err(error) = saved else {
            return true;
        };
        let mut failed = lock(&self.failed);
        if failed.is_none() {
            // The run hands it out: a store's error can print a connection string.
            *failed = Some(error.redacted());
        }
        drop(failed);
        if let Some(halt) = lock(&self.halt).as_ref() {
            halt.cancel();
        }
        false
    }
}

impl Journal for CheckpointJournal {
    fn records(&self) -> bool {
        true
    }

    fn progress<'a>(
        &'a self,
        call_id: &'a str,
        progress: CallProgress,
        recovery: RecoveryState,
    ) -> BoxFuture<'a, bool> {
        // The retries a call spends before it sleeps are saved with where it sleeps (they are in
        // `recovery`): a process that dies in the sleep must not give them back.
        Box::pin(self.save(move |run| SavedStep {
            call: index_of(run, call_id).map(|index| CallStep {
                index,
                progress: Some(progress),
                result: None,
                stop: None,
            }),
            recovery: Some(recovery),
            ..SavedStep::default()
        }))
    }
}

/// The place of the call `call_id` among the run's pending calls.
fn index_of(run: &SavedRun, call_id: &str) -> Option<usize> {
    run.pending.iter().position(|p| *p.call.id == *call_id)
}

impl RunJournal for CheckpointJournal {
    fn started<'a>(
        &'a self,
        ctx: &'a RunContext,
        deadline: Option<Duration>,
    ) -> BoxFuture<'a, bool> {
        // Tied to the run it saves: a failed save halts it, and each save records how much of
        // the deadline is left.
        *lock(&self.halt) = Some(ctx.halting().token().clone());
        *lock(&self.deadline) = deadline.map(|left| Instant::now() + left);
        let recovery = ctx.recovery();
        Box::pin(self.save(move |_| SavedStep {
            recovery: Some(recovery),
            ..SavedStep::default()
        }))
    }

    fn turn<'a>(
        &'a self,
        history: &'a [Message],
        asked: &'a Message,
        known: &dyn Fn(&str) -> bool,
        counts: &Counts,
        ctx: &'a RunContext,
    ) -> BoxFuture<'a, bool> {
        let counts = counts.saved();
        let pending = match asked {
            Message::Assistant { tool_calls, .. } => tool_calls
                .iter()
                .map(|call| PendingCall::new(call.clone(), known(&call.name)))
                .collect(),
            _ => Vec::new(),
        };
        let recovery = ctx.recovery();
        Box::pin(self.save(move |run| SavedStep {
            pending: Some(pending),
            counts: Some(counts),
            recovery: Some(recovery),
            ..SavedStep::transcript(run, history, Some(asked))
        }))
    }

    fn answered<'a>(
        &'a self,
        call_id: &'a str,
        result: &'a ToolResult,
        stop: Option<&'a RunError>,
        ctx: &'a RunContext,
    ) -> BoxFuture<'a, bool> {
        let recovery = ctx.recovery();
        Box::pin(self.save(move |run| SavedStep {
            call: index_of(run, call_id).map(|index| CallStep {
                index,
                progress: None,
                result: Some(result.clone()),
                stop: stop.and_then(SavedStop::of),
            }),
            recovery: Some(recovery),
            ..SavedStep::default()
        }))
    }

    fn finished<'a>(
        &'a self,
        transcript: &'a [Message],
        counts: &Counts,
        outcome: Result<(), &'a RunError>,
    ) -> BoxFuture<'a, bool> {
        let counts = counts.saved();
        let finished = durable::finished(outcome, transcript);
        Box::pin(self.save(move |run| SavedStep {
            counts: Some(counts),
            finished: Some(finished),
            ..SavedStep::transcript(run, transcript, None)
        }))
    }

    fn failure(&self) -> Option<CheckpointError> {
        lock(&self.failed).take()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Each critical section is one assignment: a panic cannot leave it torn.
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}
