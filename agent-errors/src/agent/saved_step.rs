//! One save of a durable run as its journal records it: what the save changed, never the whole
//! state. A run's state is its latest snapshot (a [`SavedRun`]) with the steps saved after it
//! applied in order; the recorder applies each step to the state it holds the same way, so what
//! a resumed run reads is what the run had.

use serde::{Deserialize, Serialize};

use super::durable::{FinishedRun, PendingCall, SavedCounts, SavedRun};
use super::saved_stop::SavedStop;
use crate::chat::{Message, ToolResult};
use crate::executor::{CallProgress, RecoveryState};

/// What one save changed. Fields a save leaves alone are absent from what is written.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct SavedStep {
    /// Messages that joined the end of the transcript.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) appended: Vec<Message>,
    /// The whole transcript, when it changed other than at its end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) transcript: Option<Vec<Message>>,
    /// A new turn's calls, in place of the last turn's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) pending: Option<Vec<PendingCall>>,
    /// How far one call of the turn got, or its answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) call: Option<CallStep>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) counts: Option<SavedCounts>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) recovery: Option<RecoveryState>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) deadline_left_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) finished: Option<FinishedRun>,
}

/// One call's change: its progress, or its answer and the stop it carried.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct CallStep {
    /// The call's place among the turn's pending calls.
    pub(super) index: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) progress: Option<CallProgress>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) result: Option<ToolResult>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) stop: Option<SavedStop>,
}

impl SavedStep {
    /// The step that makes `saved`'s transcript `now` followed by `then`: the messages after
    /// the saved ones when `now` goes on from them, the whole transcript when it does not. The
    /// loop only ever adds to its transcript; comparing the last saved message (not every
    /// one) keeps a save's cost independent of the run's length.
    pub(super) fn transcript(saved: &[Message], now: &[Message], then: Option<&Message>) -> Self {
        let goes_on = match saved.last() {
            None => true,
            Some(last) => now.len() >= saved.len() && now[saved.len() - 1] == *last,
        };
        let mut step = SavedStep::default();
        let target = if goes_on {
            step.appended = now[saved.len()..].to_vec();
            &mut step.appended
        } else {
            step.transcript.insert(now.to_vec())
        };
        target.extend(then.cloned());
        step
    }

    /// Applies this step to `run`; an error names what in it does not fit the run.
    pub(super) fn apply(self, run: &mut SavedRun) -> Result<(), String> {
        if let Some(transcript) = self.transcript {
            run.transcript = transcript;
        }
        run.transcript.extend(self.appended);
        if let Some(pending) = self.pending {
            run.pending = pending;
        }
        if let Some(call) = self.call {
            let pending = (run.pending.get_mut(call.index))
                .ok_or_else(|| format!("a step names call {} of a turn with fewer", call.index))?;
            if let Some(progress) = call.progress {
                pending.progress = progress;
            }
            if call.result.is_some() {
                pending.result = call.result;
                pending.stop = call.stop;
            }
        }
        if let Some(counts) = self.counts {
            run.counts = counts;
        }
        if let Some(recovery) = self.recovery {
            run.recovery = recovery;
        }
        if self.deadline_left_ms.is_some() {
            run.deadline_left_ms = self.deadline_left_ms;
        }
        if let Some(finished) = self.finished {
            run.pending.clear();
            run.finished = Some(finished);
        }
        Ok(())
    }
}
