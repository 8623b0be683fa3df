//! What a checkpoint holds: the saved run (its transcript, the calls of the turn being answered,
//! its counts and recovery state), the format version it is written in and the compatibility
//! rule, how a finished run is recorded, why a run cannot be resumed, and a new run's id.

use serde::{Deserialize, Serialize};

use super::saved_stop::SavedStop;
use crate::agent::RunError;
use crate::agent::counts::SavedCounts;
use crate::chat::{Message, ToolCall, ToolResult};
use crate::checkpoint::{Checkpoint, CheckpointError};
use crate::executor::{CallProgress, RecoveryState};
use crate::usage::UsageLimits;

/// The version of the saved state this build writes for a run that waits on nobody.
///
/// Compatibility rule: a build reads the state version it writes and the ones before it, so a
/// fleet can be upgraded one process at a time while runs are resumed across the versions.
/// Anything else is refused with [`CheckpointError::Corrupt`] naming the version found and the
/// versions this build reads. Version 2 added the deadline left; version 1 is read as a run
/// that had no deadline saved (it gets the agent's).
const STATE_VERSION: u32 = 2;

/// The version written while a call waits for a person. A build that knows no approvals reads
/// versions 1 and 2 only, so it refuses such a run instead of resuming the waiting call as an
/// interrupted one and running its tool unapproved; every other run stays readable by it.
const WAITING_VERSION: u32 = 3;

/// The version of a snapshot in a store that keeps a journal, waiting or not. Builds before the
/// journal read a run's snapshot without the steps saved after it, so they must refuse it: they
/// read versions 1 to 3 only. A run they saved is read by this build, and its first save here
/// is a snapshot in this version, after which they refuse it.
const JOURNAL_VERSION: u32 = 4;

/// The state versions this build reads.
const READS: [u32; 4] = [
    STATE_VERSION - 1,
    STATE_VERSION,
    WAITING_VERSION,
    JOURNAL_VERSION,
];

/// How a finished durable run ended, as its last checkpoint records it.
///
/// # Examples
///
/// Resuming a run that already finished says how it ended:
///
/// ```
/// use agent_errors::{Agent, RunError, RunOptions};
/// use agent_errors::checkpoint::MemoryCheckpoints;
/// use agent_errors::run::{FinishedRun, ResumeError};
/// use agent_errors::testing::ScriptedModel;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let agent = Agent::builder("a")
///     .model(ScriptedModel::new().text("42"))
///     .checkpoints(MemoryCheckpoints::new())
///     .build()?;
/// agent.run_with("question", RunOptions::new().run_id("run-7")).await.result?;
/// let resumed = agent.resume("run-7", RunOptions::new()).await;
/// let Err(RunError::Resume(ResumeError::Finished { outcome, .. })) = resumed.result else { unreachable!() };
/// let answer = match outcome {
///     FinishedRun::Answered { text } => text,
///     FinishedRun::Failed { reason, message } => Some(format!("failed ({reason}): {message}")),
///     _ => None, // the enum is non-exhaustive
/// };
/// assert_eq!(answer.as_deref(), Some("42"));
/// # Ok(())
/// # }
/// ```
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

/// Why [`Agent::resume`](crate::Agent::resume) could not go on with a run.
///
/// # Examples
///
/// What a worker that picks up runs after a restart does with each refusal:
///
/// ```
/// use agent_errors::{Agent, RunError, RunOptions};
/// use agent_errors::checkpoint::MemoryCheckpoints;
/// use agent_errors::run::ResumeError;
/// use agent_errors::testing::ScriptedModel;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let agent = Agent::builder("a").model(ScriptedModel::new()).checkpoints(MemoryCheckpoints::new()).build()?;
/// let outcome = agent.resume("run-unknown", RunOptions::new()).await;
/// let action = match outcome.result {
///     Ok(_) => "done",
///     Err(RunError::Resume(error)) => match error {
///         ResumeError::NotFound { .. } | ResumeError::Finished { .. } => "nothing to do",
///         ResumeError::UnknownTool { .. } => "leave it for an agent that has the tool",
///         ResumeError::BrokenTranscript { .. } | ResumeError::NoStore => "page a person",
///         _ => "page a person", // the enum is non-exhaustive
///     },
///     Err(_) => "the resumed run failed",
/// };
/// assert_eq!(action, "nothing to do");
/// # Ok(())
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResumeError {
    /// The agent was built without [`checkpoints`](crate::AgentBuilder::checkpoints).
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
    /// by an agent with other tools, and what the call did cannot be told. The checkpoint is
    /// left as it was (an agent with the tool can still resume it); the transcript handed back
    /// answers every call of the last turn, this one with an error result saying it was not
    /// resumed.
    #[error("run {run_id} has a call of `{tool}`, a tool this agent does not have")]
    UnknownTool {
        /// The run.
        run_id: String,
        /// The tool's name.
        tool: String,
    },
    /// The checkpoint breaks the rule every transcript keeps (each call the model made gets
    /// exactly one result, right after its turn): a call id given twice, a call answered twice,
    /// a result for a call the turn does not have, a call left without a result. Resuming it
    /// would send the model a transcript it refuses, so the run is not resumed.
    #[error("run {run_id} cannot be resumed: its checkpoint {problem} (call `{call_id}`)")]
    BrokenTranscript {
        /// The run.
        run_id: String,
        /// The call at fault, as the checkpoint names it (sanitized and bounded).
        call_id: String,
        /// What is wrong.
        problem: BrokenTranscript,
    },
    /// The run was started by an agent with an [answer key](crate::AgentBuilder::answer_key),
    /// and its checkpoint says so: its answers must be signed, and this agent (built without
    /// the key, by a code path that forgot it) could not check a signature, so it does not
    /// resume the run. Resume it with an agent given the same key.
    #[error(
        "run {run_id} takes only signed answers (it was started with an answer key), and this \
         agent has none: build the agent that resumes it with `AgentBuilder::answer_key`"
    )]
    AnswerKeyRequired {
        /// The run.
        run_id: String,
    },
}

impl ResumeError {
    /// This error with the texts it shows redacted: a run id is the caller's text, a tool's
    /// name and a call's id the checkpoint's.
    fn redacted(self) -> Self {
        let text = |t: String| crate::redact::redact(&t).into_owned();
        match self {
            ResumeError::NoStore => ResumeError::NoStore,
            ResumeError::NotFound { run_id } => ResumeError::NotFound {
                run_id: text(run_id),
            },
            ResumeError::Finished { run_id, outcome } => ResumeError::Finished {
                run_id: text(run_id),
                outcome,
            },
            ResumeError::UnknownTool { run_id, tool } => ResumeError::UnknownTool {
                run_id: text(run_id),
                tool: text(tool),
            },
            ResumeError::BrokenTranscript {
                run_id,
                call_id,
                problem,
            } => ResumeError::BrokenTranscript {
                run_id: text(run_id),
                call_id: text(call_id),
                problem,
            },
            ResumeError::AnswerKeyRequired { run_id } => ResumeError::AnswerKeyRequired {
                run_id: text(run_id),
            },
        }
    }
}

impl RunError {
    /// A refused resume's error as the run hands it out: a checkpoint or resume error with
    /// its texts (and a store error's chain) redacted.
    pub(in crate::agent) fn redacted(self) -> Self {
        match self {
            RunError::Checkpoint(error) => RunError::Checkpoint(error.redacted()),
            RunError::Resume(error) => RunError::Resume(error.redacted()),
            other => other,
        }
    }
}

/// How a checkpoint breaks the one-result rule (see [`ResumeError::BrokenTranscript`]).
///
/// # Examples
///
/// ```
/// use agent_errors::run::BrokenTranscript;
///
/// fn explain(problem: BrokenTranscript) -> &'static str {
///     match problem {
///         BrokenTranscript::DuplicateCallId | BrokenTranscript::AnsweredTwice => "a call is there twice",
///         BrokenTranscript::OrphanResult | BrokenTranscript::PendingMismatch => "a result or pending call has no call",
///         BrokenTranscript::Unanswered => "an earlier call has no result",
///         _ => "the checkpoint is inconsistent", // the enum is non-exhaustive
///     }
/// }
/// assert_eq!(explain(BrokenTranscript::Unanswered), "an earlier call has no result");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BrokenTranscript {
    /// Two calls of one turn share an id.
    #[error("gives two calls of one turn the same id")]
    DuplicateCallId,
    /// A call has two results.
    #[error("answers a call twice")]
    AnsweredTwice,
    /// A result answers a call its turn does not have.
    #[error("has a result for a call its turn does not make")]
    OrphanResult,
    /// A call of a turn before the last has no result.
    #[error("leaves a call of an earlier turn without a result")]
    Unanswered,
    /// The calls saved as pending are not the calls of the transcript's last turn.
    #[error("saves pending calls its last turn does not make")]
    PendingMismatch,
}
/// One call of the turn being answered.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(in crate::agent) struct PendingCall {
    pub(in crate::agent) call: ToolCall,
    /// Whether the agent had a tool of this name when the turn was saved.
    pub(in crate::agent) known: bool,
    pub(in crate::agent) progress: CallProgress,
    pub(in crate::agent) result: Option<ToolResult>,
    pub(in crate::agent) stop: Option<SavedStop>,
}

impl PendingCall {
    /// A call the model just made, not started yet.
    pub(in crate::agent) fn new(call: ToolCall, known: bool) -> PendingCall {
        PendingCall {
            call,
            known,
            progress: CallProgress::default(),
            result: None,
            stop: None,
        }
    }

    /// The call's answer, if it was saved: the result and the run error it carried.
    pub(in crate::agent) fn answer(&self) -> Option<(ToolResult, Option<RunError>)> {
        let result = self.result.clone()?;
        Some((result, self.stop.clone().map(SavedStop::into_error)))
    }
}

/// Everything a resumed run needs, serialized as the checkpoint's state.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(in crate::agent) struct SavedRun {
    version: u32,
    pub(in crate::agent) transcript: Vec<Message>,
    /// The calls of the transcript's last assistant message, while that turn is being answered.
    pub(in crate::agent) pending: Vec<PendingCall>,
    pub(in crate::agent) counts: SavedCounts,
    pub(in crate::agent) recovery: RecoveryState,
    /// What was left of the run's deadline at this save, when it had one: a resumed run gets
    /// this much, not a fresh deadline. Version 1 did not save it.
    #[serde(default)]
    pub(in crate::agent) deadline_left_ms: Option<u64>,
    /// The caps the run was started with, which a resumed run keeps; added within version 2
    /// (a checkpoint without them is resumed under the agent's).
    #[serde(default)]
    pub(in crate::agent) usage_limits: Option<UsageLimits>,
    /// Whether the run was started with an answer key: its answers must then be signed, by
    /// whichever agent resumes it. Added within version 4 (a checkpoint without it was saved
    /// by a build that did not record it, and is resumed as before).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(in crate::agent) signed_answers: bool,
    pub(in crate::agent) finished: Option<FinishedRun>,
}

impl SavedRun {
    /// The state a new run starts from.
    pub(in crate::agent) fn new(transcript: Vec<Message>) -> SavedRun {
        SavedRun {
            version: STATE_VERSION,
            transcript,
            pending: Vec::new(),
            counts: SavedCounts::default(),
            recovery: RecoveryState::default(),
            deadline_left_ms: None,
            usage_limits: None,
            signed_answers: false,
            finished: None,
        }
    }

    /// Reads a checkpoint's state, saved by this build's version or the one before it.
    pub(in crate::agent) fn read(checkpoint: &Checkpoint) -> Result<SavedRun, CheckpointError> {
        let corrupt = |reason: String| CheckpointError::Corrupt {
            run_id: checkpoint.run_id.clone(),
            reason,
        };
        let run: SavedRun =
            serde_json::from_slice(&checkpoint.state).map_err(|e| corrupt(e.to_string()))?;
        if !READS.contains(&run.version) {
            return Err(corrupt(format!(
                "saved by state version {}, this build reads versions {} to {JOURNAL_VERSION}",
                run.version, READS[0]
            )));
        }
        Ok(run)
    }

    /// Sets the version this state is written in. In a journaling store, the journal's (which
    /// builds before it refuse); otherwise the waiting version while a call waits for a person,
    /// so that builds which know no approvals refuse it.
    pub(in crate::agent) fn stamp_version(&mut self, journals: bool) {
        let waiting = self.pending.iter().any(|p| p.progress.waiting.is_some());
        self.version = match (journals, waiting) {
            (true, _) => JOURNAL_VERSION,
            (false, true) => WAITING_VERSION,
            (false, false) => STATE_VERSION,
        };
    }

    /// The first pending call without a result whose tool was known then and is not now.
    pub(in crate::agent) fn unknown_tool(&self, known: impl Fn(&str) -> bool) -> Option<&str> {
        self.pending
            .iter()
            .find(|p| p.result.is_none() && p.known && !known(&p.call.name))
            .map(|p| &*p.call.name)
    }

    /// The transcript with every pending call answered: its saved result, or an error result
    /// saying the run was not resumed. What a refused resume hands back.
    pub(in crate::agent) fn answered_transcript(
        mut self,
        why: impl Fn(&ToolCall) -> String,
    ) -> Vec<Message> {
        for pending in self.pending {
            let result = pending
                .result
                .unwrap_or_else(|| ToolResult::error(&pending.call, why(&pending.call)));
            self.transcript.push(Message::Tool(result));
        }
        self.transcript
    }
}

/// How a run that ended is recorded.
pub(in crate::agent) fn finished(
    result: Result<(), &RunError>,
    transcript: &[Message],
) -> FinishedRun {
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
pub(crate) fn new_run_id() -> String {
    run_id_of(fastrand::u128(..))
}

/// `run-` and `bits` as 32 lowercase hex digits, eight at a time ([`hex_digits`]):
/// `format!("{:032x}")` costs a run about ten times as many instructions as a table lookup per
/// digit did, and that lookup (two per byte of `bits`) about three times as many as this.
fn run_id_of(bits: u128) -> String {
    let mut id = *b"run-00000000000000000000000000000000";
    let quarters = [bits >> 96, bits >> 64, bits >> 32, bits].map(|q| q as u32);
    for (digits, quarter) in id[4..].chunks_exact_mut(8).zip(quarters) {
        digits.copy_from_slice(&hex_digits(quarter).to_be_bytes());
    }
    // Every byte is ASCII, so this never takes the fallback.
    String::from_utf8(id.to_vec()).unwrap_or_default()
}

/// The eight lowercase hex digits of `x` as the bytes of a `u64`, the most significant digit
/// in its most significant byte: each nibble spread to a byte of its own, then `'0'` added to
/// each, and the gap from `'9'` to `'a'` to each past 9 (a nibble past 9 is one that carries
/// into the byte's fifth bit when 6 is added).
fn hex_digits(x: u32) -> u64 {
    let x = u64::from(x);
    let x = ((x & 0xffff_0000) << 16) | (x & 0xffff);
    let x = ((x & 0x0000_ff00_0000_ff00) << 8) | (x & 0x0000_00ff_0000_00ff);
    let x = ((x & 0x00f0_00f0_00f0_00f0) << 4) | (x & 0x000f_000f_000f_000f);
    let letters = ((x + 0x0606_0606_0606_0606) >> 4) & 0x0101_0101_0101_0101;
    x + 0x3030_3030_3030_3030 + letters * u64::from(b'a' - b'9' - 1)
}

#[cfg(test)]
mod tests {
    use super::{new_run_id, run_id_of};

    #[test]
    fn a_run_id_is_run_and_32_lowercase_hex_digits_of_its_bits() {
        for bits in [
            0,
            1,
            0xab,
            u128::MAX,
            0x0123_4567_89ab_cdef_fedc_ba98_7654_3210,
        ] {
            assert_eq!(run_id_of(bits), format!("run-{bits:032x}"));
        }
        let id = new_run_id();
        assert_eq!(id.len(), 36);
        assert!(id.starts_with("run-"));
        assert!(
            id[4..]
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        );
        assert_ne!(new_run_id(), id, "two runs get two ids");
    }
}
