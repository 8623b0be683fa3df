//! Durable runs: the run's state saved to a [`CheckpointStore`] after every model turn (before
//! any of its tools runs) and after every tool result, so another process can resume it.

use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::RunError;
use crate::chat::{Message, ToolCall, ToolResult};
use crate::checkpoint::{Checkpoint, CheckpointError, CheckpointStore};
use crate::classify::ErrorKind;
use crate::error::BoxFuture;
use crate::error::Severity;
use crate::executor::{
    CallJournal, CallProgress, RecoveryState, RunContext, Terminated, TerminationReason,
};
use crate::usage::Usage;

/// The version of the saved state this build writes and reads.
const STATE_VERSION: u32 = 1;

/// How a finished durable run ended, as its last checkpoint records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum FinishedRun {
    /// The run produced its output: the model's final text, when the model gave one (an
    /// `on_llm_error` handler may have answered instead).
    Answered {
        /// The final text.
        text: Option<String>,
    },
    /// The run ended without an output.
    Failed {
        /// Why, as the `agent_errors.run.stops` metric names it (`terminated`, `cancelled`,
        /// ...).
        reason: String,
        /// The error's message, redacted.
        message: String,
    },
}

/// Why [`Agent::resume`](super::Agent::resume) could not go on with a run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResumeError {
    /// The agent was built without [`checkpoints`](super::AgentBuilder::checkpoints).
    #[error("the agent has no checkpoint store to resume from")]
    NoStore,
    /// The store has no checkpoint of this run.
    #[error("no checkpoint of run {run_id}")]
    NotFound {
        /// The run.
        run_id: String,
    },
    /// The run had already finished; its checkpoint says how.
    #[error("run {run_id} already finished")]
    Finished {
        /// The run.
        run_id: String,
        /// How it ended.
        outcome: FinishedRun,
    },
    /// A call left without a result names a tool this agent does not have: the run was started
    /// by an agent with other tools, and what the call did cannot be told.
    #[error("run {run_id} has a call of `{tool}`, a tool this agent does not have")]
    UnknownTool {
        /// The run.
        run_id: String,
        /// The tool's name.
        tool: String,
    },
}

/// A stop a call's answer carried, saved so a resumed run ends the way the original would have.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
enum SavedStop {
    Terminated {
        tool: String,
        kind: ErrorKind,
        reason: SavedReason,
    },
    BreakerTripped {
        tool: String,
        failures: u32,
    },
    Escalated {
        reason: String,
        severity: Severity,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
enum SavedReason {
    Auth,
    RetriesExhausted { attempts: u32 },
    CircuitOpen,
    BreakerTripped { failures: u32 },
    Thrown(String),
    PermissionDenials { denials: u32 },
}

impl SavedStop {
    fn of(error: &RunError) -> Option<SavedStop> {
        Some(match error {
            RunError::Terminated(t) => SavedStop::Terminated {
                tool: t.tool.clone(),
                kind: t.kind,
                reason: match &t.reason {
                    TerminationReason::Auth => SavedReason::Auth,
                    TerminationReason::RetriesExhausted { attempts } => {
                        SavedReason::RetriesExhausted {
                            attempts: *attempts,
                        }
                    }
                    TerminationReason::CircuitOpen => SavedReason::CircuitOpen,
                    TerminationReason::BreakerTripped { failures } => SavedReason::BreakerTripped {
                        failures: *failures,
                    },
                    TerminationReason::Thrown(reason) => {
                        SavedReason::Thrown(crate::redact::redact(reason).into_owned())
                    }
                    TerminationReason::PermissionDenials { denials } => {
                        SavedReason::PermissionDenials { denials: *denials }
                    }
                },
            },
            RunError::BreakerTripped { tool, failures } => SavedStop::BreakerTripped {
                tool: tool.clone(),
                failures: *failures,
            },
            RunError::Escalated { reason, severity } => SavedStop::Escalated {
                reason: reason.clone(),
                severity: *severity,
            },
            _ => return None,
        })
    }

    /// The run error it stands for; the original tool error is not saved, so it has none.
    fn into_error(self) -> RunError {
        match self {
            SavedStop::Terminated { tool, kind, reason } => {
                let reason = match reason {
                    SavedReason::Auth => TerminationReason::Auth,
                    SavedReason::RetriesExhausted { attempts } => {
                        TerminationReason::RetriesExhausted { attempts }
                    }
                    SavedReason::CircuitOpen => TerminationReason::CircuitOpen,
                    SavedReason::BreakerTripped { failures } => {
                        TerminationReason::BreakerTripped { failures }
                    }
                    SavedReason::Thrown(reason) => TerminationReason::Thrown(reason),
                    SavedReason::PermissionDenials { denials } => {
                        TerminationReason::PermissionDenials { denials }
                    }
                };
                RunError::Terminated(Box::new(Terminated::new(tool, kind, reason, None)))
            }
            SavedStop::BreakerTripped { tool, failures } => {
                RunError::BreakerTripped { tool, failures }
            }
            SavedStop::Escalated { reason, severity } => RunError::Escalated { reason, severity },
        }
    }
}

/// One call of the turn being answered.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct PendingCall {
    pub(super) call: ToolCall,
    /// Whether the agent had a tool of this name when the turn was saved.
    known: bool,
    progress: CallProgress,
    result: Option<ToolResult>,
    stop: Option<SavedStop>,
}

impl PendingCall {
    /// The call's answer, if it was saved: the result and the run error it carried.
    pub(super) fn answer(&self) -> Option<(ToolResult, Option<RunError>)> {
        let result = self.result.clone()?;
        Some((result, self.stop.clone().map(SavedStop::into_error)))
    }

    pub(super) fn progress(&self) -> CallProgress {
        self.progress.clone()
    }
}

/// The loop's counts, as saved.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub(super) struct SavedCounts {
    pub(super) turns: u32,
    pub(super) model_calls: u32,
    pub(super) tool_calls: u32,
    pub(super) usage: Usage,
}

/// Everything a resumed run needs, serialized as the checkpoint's state.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct SavedRun {
    version: u32,
    pub(super) transcript: Vec<Message>,
    /// The calls of the transcript's last assistant message, while that turn is being answered.
    pub(super) pending: Vec<PendingCall>,
    pub(super) counts: SavedCounts,
    pub(super) recovery: RecoveryState,
    pub(super) finished: Option<FinishedRun>,
}

impl SavedRun {
    /// Reads a checkpoint's state.
    pub(super) fn read(checkpoint: &Checkpoint) -> Result<SavedRun, CheckpointError> {
        let corrupt = |reason: String| CheckpointError::Corrupt {
            run_id: checkpoint.run_id.clone(),
            reason,
        };
        let run: SavedRun =
            serde_json::from_slice(&checkpoint.state).map_err(|e| corrupt(e.to_string()))?;
        if run.version != STATE_VERSION {
            return Err(corrupt(format!(
                "saved by state version {}, this build reads {STATE_VERSION}",
                run.version
            )));
        }
        Ok(run)
    }

    /// The first pending call without a result whose tool was known then and is not now.
    pub(super) fn unknown_tool(&self, known: impl Fn(&str) -> bool) -> Option<&str> {
        self.pending
            .iter()
            .find(|p| p.result.is_none() && p.known && !known(&p.call.name))
            .map(|p| p.call.name.as_str())
    }
}

/// Where one run's checkpoints go, and the state it last saved.
pub(super) struct Journal {
    store: Arc<dyn CheckpointStore>,
    run_id: String,
    /// The state and the next sequence; saves are made one at a time under this lock, so the
    /// stored sequence only ever moves forward and the latest save holds the latest state.
    saved: tokio::sync::Mutex<(SavedRun, u64)>,
    /// Halts the run when a save fails.
    halt: Mutex<Option<CancellationToken>>,
    failed: Mutex<Option<CheckpointError>>,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("run_id", &self.run_id)
            .finish_non_exhaustive()
    }
}

impl Journal {
    /// A journal for a new run, whose first save will be sequence 0.
    pub(super) fn new(store: Arc<dyn CheckpointStore>, run_id: String) -> Journal {
        let run = SavedRun {
            version: STATE_VERSION,
            transcript: Vec::new(),
            pending: Vec::new(),
            counts: SavedCounts::default(),
            recovery: RecoveryState::default(),
            finished: None,
        };
        Journal::resumed(store, run_id, run, 0)
    }

    /// A journal going on from `run`, saved last as `sequence - 1`.
    pub(super) fn resumed(
        store: Arc<dyn CheckpointStore>,
        run_id: String,
        run: SavedRun,
        sequence: u64,
    ) -> Journal {
        Journal {
            store,
            run_id,
            saved: tokio::sync::Mutex::new((run, sequence)),
            halt: Mutex::new(None),
            failed: Mutex::new(None),
        }
    }

    /// Ties the journal to the run it saves, so a failed save halts it.
    pub(super) fn attach(&self, ctx: &RunContext) {
        *lock(&self.halt) = Some(ctx.halt_token().clone());
    }

    /// The first save that failed, if one did.
    pub(super) fn failure(&self) -> Option<CheckpointError> {
        lock(&self.failed).take()
    }

    /// Saves the transcript and counts, with `calls` pending when a turn's calls are about to
    /// run.
    pub(super) async fn turn(
        &self,
        transcript: &[Message],
        calls: &[ToolCall],
        known: impl Fn(&str) -> bool,
        counts: SavedCounts,
        ctx: &RunContext,
    ) -> Result<(), CheckpointError> {
        let pending = calls
            .iter()
            .map(|call| PendingCall {
                call: call.clone(),
                known: known(&call.name),
                progress: CallProgress::default(),
                result: None,
                stop: None,
            })
            .collect();
        let recovery = ctx.recovery();
        self.save(|run| {
            run.transcript = transcript.to_vec();
            run.pending = pending;
            run.counts = counts;
            run.recovery = recovery;
        })
        .await
    }

    /// Saves a call's answer and the recovery state after it.
    pub(super) async fn answered(
        &self,
        call_id: &str,
        result: &ToolResult,
        stop: Option<&RunError>,
        ctx: &RunContext,
    ) -> bool {
        let recovery = ctx.recovery();
        let saved = self
            .save(|run| {
                if let Some(pending) = run.pending.iter_mut().find(|p| p.call.id == call_id) {
                    pending.result = Some(result.clone());
                    pending.stop = stop.and_then(SavedStop::of);
                }
                run.recovery = recovery;
            })
            .await;
        self.settle(saved)
    }

    /// Records how the run ended.
    pub(super) async fn finish(
        &self,
        transcript: &[Message],
        counts: SavedCounts,
        finished: FinishedRun,
    ) -> Result<(), CheckpointError> {
        self.save(|run| {
            run.transcript = transcript.to_vec();
            run.pending.clear();
            run.counts = counts;
            run.finished = Some(finished);
        })
        .await
    }

    async fn save(&self, edit: impl FnOnce(&mut SavedRun)) -> Result<(), CheckpointError> {
        let mut saved = self.saved.lock().await;
        let (run, sequence) = &mut *saved;
        edit(run);
        let state = serde_json::to_vec(run).map_err(|e| CheckpointError::Store(Box::new(e)))?;
        let checkpoint = Checkpoint {
            run_id: self.run_id.clone(),
            sequence: *sequence,
            state,
        };
        self.store.save(&checkpoint).await?;
        *sequence += 1;
        Ok(())
    }

    /// Keeps the first failed save and halts the run, so no tool runs past an unsaved state.
    fn settle(&self, saved: Result<(), CheckpointError>) -> bool {
        let Err(error) = saved else {
            return true;
        };
        let mut failed = lock(&self.failed);
        if failed.is_none() {
            *failed = Some(error);
        }
        drop(failed);
        if let Some(halt) = lock(&self.halt).as_ref() {
            halt.cancel();
        }
        false
    }
}

impl CallJournal for Journal {
    fn progress<'a>(&'a self, call_id: &'a str, progress: CallProgress) -> BoxFuture<'a, bool> {
        Box::pin(async move {
            let saved = self
                .save(|run| {
                    if let Some(pending) = run.pending.iter_mut().find(|p| p.call.id == call_id) {
                        pending.progress = progress;
                    }
                })
                .await;
            self.settle(saved)
        })
    }
}

/// How a run that ended is recorded.
pub(super) fn finished<O>(result: &Result<O, RunError>, transcript: &[Message]) -> FinishedRun {
    match result {
        Ok(_) => FinishedRun::Answered {
            text: match transcript.last() {
                Some(Message::Assistant {
                    content: Some(text),
                    tool_calls,
                }) if tool_calls.is_empty() => Some(text.clone()),
                _ => None,
            },
        },
        Err(error) => FinishedRun::Failed {
            reason: error.stop_reason().to_owned(),
            message: crate::redact::redact(&error.to_string()).into_owned(),
        },
    }
}

/// A new run's id: 128 random bits, so runs of many processes sharing a store never collide.
pub(super) fn new_run_id() -> String {
    format!("run-{:032x}", fastrand::u128(..))
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Each critical section is one assignment: a panic cannot leave it torn.
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}
