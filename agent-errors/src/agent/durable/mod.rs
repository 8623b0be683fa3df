//! Durable runs: what a checkpoint holds (the saved run, its format version and compatibility
//! rule, the steps saved between snapshots), how a run is read back from its journal and why a
//! run cannot be resumed. The saving is done by the run's journal (`checkpoint_journal`), after
//! every model turn (before any of its tools runs), every step of a call and every tool result,
//! so another process can resume the run.

mod checkpoint_journal;
mod journal;
mod one_result;
mod pending;
mod resume;
mod saved_run;
mod saved_step;
mod saved_stop;

pub(in crate::agent) use checkpoint_journal::CheckpointJournal;
#[cfg(feature = "restate")]
pub(crate) use journal::RunJournal;
pub(in crate::agent) use journal::unsaved;
pub(crate) use journal::{SavePoints, Seam};
pub(in crate::agent) use resume::resumable;
pub(crate) use saved_run::new_run_id;
pub use saved_run::{BrokenTranscript, FinishedRun, ResumeError};
pub(in crate::agent) use saved_run::{PendingCall, SavedRun};
