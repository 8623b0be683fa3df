//! The journal of a run whose agent has a checkpoint store: each save point of the run (it
//! started, a turn asked for calls, a call got further, a call was answered, the run finished)
//! saved to the agent's [`CheckpointStore`] under the run's next sequence, as a step (what it
//! changed) appended to the store's journal or as a snapshot of the whole state. Model
//! requests and tool attempts run as they are (a resumed run goes on from its saves, not from
//! replayed steps) and waits are on tokio's clock: the seam's defaults.
//!
//! # When a save is a snapshot
//!
//! A run's first save in this process is one, and so is every save to a store that keeps no
//! journal. After that, a save is a snapshot when its step would take the bytes appended since
//! the last snapshot past that snapshot's size. A run's state grows with the run, so a fixed
//! count of steps between snapshots makes each snapshot bigger than the last and the bytes
//! written per call grow with the run. Tied to the size of the last snapshot instead, the
//! snapshots come further apart as the state grows: each one costs about what was appended
//! since the one before it, so snapshots write about as much as the journal itself and a save
//! costs the same whether the run is short or long. A resume reads the latest snapshot and a
//! tail of records no bigger than it: twice the state at most.
//!
//! A bound on the steps between two snapshots ([`snapshot_every`]) is kept only when the
//! builder sets one: it caps the records a resume reads, but once the state outgrows that many
//! steps it writes a snapshot more often than the rule above, and the cost per call grows again.
//!
//! [`snapshot_every`]: crate::AgentBuilder::snapshot_every

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::journal::RunJournal;
use super::saved_run::{self, PendingCall, SavedRun};
use super::saved_step::{CallStep, SavedStep};
use super::saved_stop::SavedStop;
use crate::agent::RunError;
use crate::agent::counts::Counts;
use crate::chat::{Message, ToolResult};
use crate::checkpoint::{Checkpoint, CheckpointError, CheckpointStore};
use crate::error::BoxFuture;
use crate::executor::{CallProgress, Journal, RecoveryState, RunContext};

/// Where one run's checkpoints go, and the state it last saved.
pub(in crate::agent) struct CheckpointJournal {
    store: Arc<dyn CheckpointStore>,
    run_id: String,
    /// Whether the store keeps a journal: otherwise every save is a snapshot.
    journals: bool,
    /// The most steps saved after a snapshot before the next save is one, if bounded.
    snapshot_every: Option<u32>,
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
    /// The size of the last snapshot written.
    snapshot_bytes: usize,
    /// The bytes of the steps appended since the last snapshot.
    appended_bytes: usize,
}

impl CheckpointJournal {
    /// A journal going on from `run`; its first save is `sequence` (0 for a new run), a
    /// snapshot; after it, a save is one as the module documentation says.
    pub(in crate::agent) fn new(
        store: Arc<dyn CheckpointStore>,
        run_id: String,
        run: SavedRun,
        sequence: u64,
        snapshot_every: Option<u32>,
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
                snapshot_bytes: 0,
                appended_bytes: 0,
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
        let result = self.write(&mut saved, step).await;
        drop(saved);
        self.settle(result)
    }

    /// Writes `step` as the next save and applies it to the state held.
    async fn write(&self, saved: &mut Saved, step: SavedStep) -> Result<(), CheckpointError> {
        let corrupt = |reason: String| CheckpointError::Corrupt {
            run_id: self.run_id.clone(),
            reason,
        };
        // The step is written only when it is appended, and only then worth encoding.
        let record = if self.journals && saved.steps.is_some() {
            Some(serde_json::to_vec(&step).map_err(CheckpointError::store)?)
        } else {
            None
        };
        step.apply(&mut saved.run).map_err(corrupt)?;
        let sequence = saved.sequence;
        let checkpoint = |state| Checkpoint {
            run_id: self.run_id.clone(),
            sequence,
            state,
        };
        match record.filter(|record| !self.snapshot_due(saved, record.len())) {
            Some(record) => {
                let bytes = record.len();
                self.store.append(&checkpoint(record)).await?;
                saved.appended_bytes += bytes;
                saved.steps = Some(saved.steps.unwrap_or(0) + 1);
            }
            None => {
                saved.run.stamp_version(self.journals);
                let state = serde_json::to_vec(&saved.run).map_err(CheckpointError::store)?;
                let bytes = state.len();
                self.store.save(&checkpoint(state)).await?;
                (saved.snapshot_bytes, saved.appended_bytes) = (bytes, 0);
                saved.steps = Some(0);
            }
        }
        saved.sequence += 1;
        Ok(())
    }

    /// Whether the save of a step of `bytes` is a snapshot rather than an append: when the tail
    /// after the last snapshot would outgrow it, or reach the builder's bound on steps.
    fn snapshot_due(&self, saved: &Saved, bytes: usize) -> bool {
        let steps = saved.steps.unwrap_or(0);
        saved.appended_bytes + bytes > saved.snapshot_bytes
            || self.snapshot_every.is_some_and(|every| steps >= every)
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
        let finished = saved_run::finished(outcome, transcript);
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
