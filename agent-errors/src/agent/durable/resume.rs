//! Reading a run back to resume it: its snapshot and the steps saved after it, and the checks a
//! saved run passes before it goes on (the one-result rule, a finished run, a tool the resuming
//! agent lacks).

use super::one_result::violation;
use super::saved_run::{ResumeError, SavedRun};
use super::saved_step::SavedStep;
use crate::agent::RunError;
use crate::chat::Message;
use crate::checkpoint::{CheckpointError, CheckpointStore, StoredRun};
use crate::classify::ErrorKind;
use crate::sanitize::SurfacedError;

impl SavedRun {
    /// Reads the run `run_id` from its journal: the snapshot, then each step after it in order.
    /// Returns the state and the sequence of the last save it holds. A snapshot or record that
    /// names another run is refused as corrupt, like a gap or a repeat in the sequence.
    pub(in crate::agent) fn from_journal(
        run_id: &str,
        stored: &StoredRun,
    ) -> Result<(SavedRun, u64), CheckpointError> {
        if stored.snapshot.run_id != run_id {
            return Err(CheckpointError::Corrupt {
                run_id: run_id.to_owned(),
                reason: another_run("the snapshot", &stored.snapshot.run_id),
            });
        }
        let mut run = SavedRun::read(&stored.snapshot)?;
        let mut sequence = stored.snapshot.sequence;
        for record in &stored.records {
            let corrupt = |reason: String| CheckpointError::Corrupt {
                run_id: run_id.to_owned(),
                reason: format!("record {}: {reason}", record.sequence),
            };
            if record.run_id != run_id {
                return Err(corrupt(another_run("it", &record.run_id)));
            }
            if Some(record.sequence) != sequence.checked_add(1) {
                return Err(corrupt(format!("does not follow {sequence}")));
            }
            let step: SavedStep =
                serde_json::from_slice(&record.state).map_err(|e| corrupt(e.to_string()))?;
            step.apply(&mut run).map_err(corrupt)?;
            sequence = record.sequence;
        }
        Ok((run, sequence))
    }
}

/// Why a save naming `named` is not one of the run read: `what` names another run.
fn another_run(what: &str, named: &str) -> String {
    let named = crate::escapes::Visible(named, 128);
    format!("{what} names another run ({named})")
}

/// A run that can be resumed, as its journal holds it, with the sequence its next save takes;
/// or why it cannot be, with the transcript to hand back.
pub(in crate::agent) async fn resumable(
    store: &dyn CheckpointStore,
    run_id: &str,
    knows: impl Fn(&str) -> bool,
    max_message_chars: usize,
) -> Result<(SavedRun, u64), (RunError, Vec<Message>)> {
    let refused = |error: RunError| (error, Vec::new());
    let stored = match store.load_journal(run_id).await {
        Ok(Some(stored)) => stored,
        Ok(None) => {
            let run_id = run_id.to_owned();
            return Err(refused(RunError::Resume(ResumeError::NotFound { run_id })));
        }
        Err(error) => return Err(refused(RunError::Checkpoint(error))),
    };
    let (saved, last) =
        SavedRun::from_journal(run_id, &stored).map_err(|e| refused(RunError::Checkpoint(e)))?;
    if let Some((call_id, problem)) = violation(&saved) {
        let run_id = run_id.to_owned();
        let error = ResumeError::BrokenTranscript {
            run_id,
            call_id,
            problem,
        };
        return Err(refused(RunError::Resume(error)));
    }
    if let Some(outcome) = saved.finished.clone() {
        let run_id = run_id.to_owned();
        let error = ResumeError::Finished { run_id, outcome };
        return Err((RunError::Resume(error), saved.transcript));
    }
    if let Some(tool) = saved.unknown_tool(knows) {
        let error = ResumeError::UnknownTool {
            run_id: run_id.to_owned(),
            tool: tool.to_owned(),
        };
        let transcript = saved.answered_transcript(|call| {
            let message = "the run was not resumed (the agent resuming it lacks a tool this turn \
                           called): whether this call took effect is unknown";
            SurfacedError::bounded(
                &call.name,
                ErrorKind::OutcomeUnknown,
                message,
                max_message_chars,
            )
            .to_content()
        });
        return Err((RunError::Resume(error), transcript));
    }
    Ok((saved, last.saturating_add(1)))
}
