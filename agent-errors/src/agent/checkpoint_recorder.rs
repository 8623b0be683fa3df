//! The recorder of a durable run: each state change saved to the agent's [`CheckpointStore`]
//! as the run's next checkpoint.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::RunError;
use super::counts::Counts;
use super::durable::{self, PendingCall, SavedRun};
use super::recorder::Recorder;
use super::saved_stop::SavedStop;
use crate::chat::{Message, ToolResult};
use crate::checkpoint::{Checkpoint, CheckpointError, CheckpointStore};
use crate::error::BoxFuture;
use crate::executor::{CallProgress, CallRecorder, NoRecorder, RunContext};

/// Where one run's checkpoints go, and the state it last saved.
pub(super) struct CheckpointRecorder {
    store: Arc<dyn CheckpointStore>,
    run_id: String,
    /// The state and the next sequence; saves are made one at a time under this lock, so the
    /// stored sequence only ever moves forward and the latest save holds the latest state.
    saved: tokio::sync::Mutex<(SavedRun, u64)>,
    /// Halts the run when a save fails.
    halt: Mutex<Option<CancellationToken>>,
    /// When the run's deadline passes, if it has one: each save records what is left.
    deadline: Mutex<Option<Instant>>,
    failed: Mutex<Option<CheckpointError>>,
}

impl std::fmt::Debug for CheckpointRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckpointRecorder")
            .field("run_id", &self.run_id)
            .finish_non_exhaustive()
    }
}

impl CheckpointRecorder {
    /// A recorder going on from `run`; its first save is `sequence` (0 for a new run).
    pub(super) fn new(
        store: Arc<dyn CheckpointStore>,
        run_id: String,
        run: SavedRun,
        sequence: u64,
    ) -> CheckpointRecorder {
        CheckpointRecorder {
            store,
            run_id,
            saved: tokio::sync::Mutex::new((run, sequence)),
            halt: Mutex::new(None),
            deadline: Mutex::new(None),
            failed: Mutex::new(None),
        }
    }

    async fn save(&self, edit: impl FnOnce(&mut SavedRun)) -> bool {
        let left = lock(&self.deadline).map(|at| at.saturating_duration_since(Instant::now()));
        let mut saved = self.saved.lock().await;
        let (run, sequence) = &mut *saved;
        edit(run);
        run.stamp_version();
        run.deadline_left_ms = left.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let state = serde_json::to_vec(run).map_err(CheckpointError::store);
        let checkpoint = state.map(|state| Checkpoint {
            run_id: self.run_id.clone(),
            sequence: *sequence,
            state,
        });
        let stored = match &checkpoint {
            Ok(checkpoint) => self.store.save(checkpoint).await,
            Err(_) => Ok(()),
        };
        let result = checkpoint.and(stored);
        if result.is_ok() {
            *sequence += 1;
        }
        drop(saved);
        self.settle(result)
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

impl CallRecorder for CheckpointRecorder {
    fn records(&self) -> bool {
        true
    }

    fn progress<'a>(
        &'a self,
        call_id: &'a str,
        progress: CallProgress,
        ctx: &'a RunContext,
    ) -> BoxFuture<'a, bool> {
        // The retries a call spends before it sleeps are saved with where it sleeps: a process
        // that dies in the sleep must not give them back.
        let recovery = ctx.recovery();
        Box::pin(self.save(move |run| {
            if let Some(pending) = run.pending.iter_mut().find(|p| *p.call.id == *call_id) {
                pending.progress = progress;
            }
            run.recovery = recovery;
        }))
    }
}

impl Recorder for CheckpointRecorder {
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
        Box::pin(self.save(move |run| run.recovery = recovery))
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
        Box::pin(self.save(move |run| {
            run.transcript = [history, std::slice::from_ref(asked)].concat();
            run.pending = pending;
            run.counts = counts;
            run.recovery = recovery;
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
        Box::pin(self.save(move |run| {
            if let Some(pending) = run.pending.iter_mut().find(|p| *p.call.id == *call_id) {
                pending.result = Some(result.clone());
                pending.stop = stop.and_then(SavedStop::of);
            }
            run.recovery = recovery;
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
        Box::pin(self.save(move |run| {
            run.transcript = transcript.to_vec();
            run.pending.clear();
            run.counts = counts;
            run.finished = Some(finished);
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

/// The run's one recorder, as the loop holds it and as the executor does.
pub(super) struct Recorders {
    pub(super) run: Arc<dyn Recorder>,
    pub(super) calls: Arc<dyn CallRecorder>,
}

impl Recorders {
    pub(super) fn none() -> Recorders {
        let none = NoRecorder::shared();
        Recorders {
            run: none.clone(),
            calls: none,
        }
    }

    pub(super) fn checkpoints(recorder: CheckpointRecorder) -> Recorders {
        let recorder = Arc::new(recorder);
        Recorders {
            run: recorder.clone(),
            calls: recorder,
        }
    }
}
