//! The seam a durable run goes through: the loop holds one [`Recorder`] and tells it each time
//! the run's state changes (the run starts, a model turn asks for calls, a call is answered, the
//! run ends); the executor tells the same recorder how far each call got. A run without a
//! checkpoint store holds a `NoRecorder`, which saves nothing and allocates nothing.

use std::time::Duration;

use super::RunError;
use super::counts::Counts;
use crate::chat::{Message, ToolResult};
use crate::checkpoint::CheckpointError;
use crate::error::BoxFuture;
use crate::executor::{CallRecorder, NoRecorder, Recorded, RunContext};

/// Where the loop records a run's state changes. Each method answers whether the record was
/// kept; once one was not, [`failure`](Recorder::failure) says why and the run ends with it.
pub(super) trait Recorder: CallRecorder {
    /// The run is starting (a new run, or a resumed one taking its checkpoint over) with
    /// `deadline` to go, if it has one: records the state it starts from, before anything runs.
    fn started<'a>(
        &'a self,
        ctx: &'a RunContext,
        deadline: Option<Duration>,
    ) -> BoxFuture<'a, bool>;

    /// A model turn (`asked`, after `history`) asked for calls: records them as pending, before
    /// any of them runs. `known` says which name a tool of the agent answers. The counts are
    /// lent, not saved for it: a recorder that keeps nothing copies nothing.
    fn turn<'a>(
        &'a self,
        history: &'a [Message],
        asked: &'a Message,
        known: &dyn Fn(&str) -> bool,
        counts: &Counts,
        ctx: &'a RunContext,
    ) -> BoxFuture<'a, bool>;

    /// A call was answered: records its result and the run error it carries, if any.
    fn answered<'a>(
        &'a self,
        call_id: &'a str,
        result: &'a ToolResult,
        stop: Option<&'a RunError>,
        ctx: &'a RunContext,
    ) -> BoxFuture<'a, bool>;

    /// The run ended: records the transcript and how it ended.
    fn finished<'a>(
        &'a self,
        transcript: &'a [Message],
        counts: &Counts,
        outcome: Result<(), &'a RunError>,
    ) -> BoxFuture<'a, bool>;

    /// The first record that could not be kept, if one could not.
    fn failure(&self) -> Option<CheckpointError>;
}

impl Recorder for NoRecorder {
    fn started<'a>(&'a self, _: &'a RunContext, _: Option<Duration>) -> BoxFuture<'a, bool> {
        Box::pin(Recorded)
    }

    fn turn<'a>(
        &'a self,
        _: &'a [Message],
        _: &'a Message,
        _: &dyn Fn(&str) -> bool,
        _: &Counts,
        _: &'a RunContext,
    ) -> BoxFuture<'a, bool> {
        Box::pin(Recorded)
    }

    fn answered<'a>(
        &'a self,
        _: &'a str,
        _: &'a ToolResult,
        _: Option<&'a RunError>,
        _: &'a RunContext,
    ) -> BoxFuture<'a, bool> {
        Box::pin(Recorded)
    }

    fn finished<'a>(
        &'a self,
        _: &'a [Message],
        _: &Counts,
        _: Result<(), &'a RunError>,
    ) -> BoxFuture<'a, bool> {
        Box::pin(Recorded)
    }

    fn failure(&self) -> Option<CheckpointError> {
        None
    }
}

/// The run error a record that was not kept becomes.
pub(super) fn unsaved(recorder: &dyn Recorder) -> RunError {
    let error = recorder
        .failure()
        .unwrap_or_else(|| CheckpointError::Store("a checkpoint save failed".into()));
    RunError::Checkpoint(error)
}
