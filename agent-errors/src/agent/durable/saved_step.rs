//! One save of a durable run as its journal records it: what the save changed, never the whole
//! state. A run's state is its latest snapshot (a [`SavedRun`]) with the steps saved after it
//! applied in order; the checkpoint journal applies each step to the state it holds the same
//! way, so what a resumed run reads is what the run had.
//!
//! A call's answer is written once: with the call, when it is answered. The transcript message
//! that carries it to the model joins the transcript a save later (with the next turn) and is
//! written there as the call's place among the pending calls, not as its 4 KB again.

use serde::{Deserialize, Serialize};

use super::saved_run::{FinishedRun, PendingCall, SavedRun};
use super::saved_stop::SavedStop;
use crate::agent::counts::SavedCounts;
use crate::chat::{Message, ToolResult};
use crate::executor::{CallProgress, RecoveryState};

/// What one save changed. Fields a save leaves alone are absent from what is written.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(in crate::agent) struct SavedStep {
    /// Messages that joined the end of the transcript.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(in crate::agent) appended: Vec<Joined>,
    /// The whole transcript, when it changed other than at its end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::agent) transcript: Option<Vec<Message>>,
    /// A new turn's calls, in place of the last turn's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::agent) pending: Option<Vec<PendingCall>>,
    /// How far one call of the turn got, or its answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::agent) call: Option<CallStep>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::agent) counts: Option<SavedCounts>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::agent) recovery: Option<RecoveryState>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::agent) deadline_left_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::agent) finished: Option<FinishedRun>,
}

/// One call's change: its progress, or its answer and the stop it carried.
#[derive(Debug, Serialize, Deserialize)]
pub(in crate::agent) struct CallStep {
    /// The call's place among the turn's pending calls.
    pub(in crate::agent) index: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::agent) progress: Option<CallProgress>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::agent) result: Option<ToolResult>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::agent) stop: Option<SavedStop>,
}

/// A message that joined the transcript, as a step writes it.
#[derive(Debug, Serialize, Deserialize)]
#[serde(untagged)]
pub(in crate::agent) enum Joined {
    /// The answer of a call the run saved with its result: the message is that result.
    Answer(AnswerOf),
    Message(Message),
}

/// Which pending call's saved result a message is.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(in crate::agent) struct AnswerOf {
    answer: usize,
}

impl Joined {
    /// `message` as a step writes it: a tool message that is a pending call's saved result
    /// names the call.
    fn of(message: &Message, pending: &[PendingCall]) -> Joined {
        if let Message::Tool(result) = message {
            let saved = |p: &PendingCall| p.result.as_ref() == Some(result);
            if let Some(answer) = pending.iter().position(saved) {
                return Joined::Answer(AnswerOf { answer });
            }
        }
        Joined::Message(message.clone())
    }

    /// The message, read against the pending calls of the state the step applies to.
    fn message(self, pending: &[PendingCall]) -> Result<Message, String> {
        match self {
            Joined::Message(message) => Ok(message),
            Joined::Answer(AnswerOf { answer }) => (pending.get(answer))
                .and_then(|p| p.result.clone())
                .map(Message::Tool)
                .ok_or_else(|| format!("a step names the answer of call {answer}, not saved")),
        }
    }
}

impl SavedStep {
    /// The step that makes `saved`'s transcript `now` followed by `then`: the messages after
    /// the saved ones when `now` goes on from them, the whole transcript when it does not. The
    /// loop only ever adds to its transcript; comparing the last saved message (not every
    /// one) keeps a save's cost independent of the run's length.
    pub(in crate::agent) fn transcript(
        saved: &SavedRun,
        now: &[Message],
        then: Option<&Message>,
    ) -> Self {
        let (transcript, pending) = (&saved.transcript, &saved.pending[..]);
        let goes_on = match transcript.last() {
            None => true,
            Some(last) => now.len() >= transcript.len() && now[transcript.len() - 1] == *last,
        };
        let mut step = SavedStep::default();
        if goes_on {
            let joined = now[transcript.len()..].iter().chain(then);
            step.appended = joined.map(|m| Joined::of(m, pending)).collect();
        } else {
            step.transcript = Some(now.iter().chain(then).cloned().collect());
        }
        step
    }

    /// Applies this step to `run`; an error names what in it does not fit the run.
    pub(in crate::agent) fn apply(self, run: &mut SavedRun) -> Result<(), String> {
        if let Some(transcript) = self.transcript {
            run.transcript = transcript;
        }
        // Read before the step replaces the pending calls: the answers it names are theirs.
        for joined in self.appended {
            let message = joined.message(&run.pending)?;
            run.transcript.push(message);
        }
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
