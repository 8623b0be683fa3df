//! The run's journal as the agent loop sees it: the executor's [`Journal`] (steps, waits, each
//! call's progress) and the loop's own save points, on one object. The loop tells it when the
//! run starts, when a model turn asks for calls, when a call is answered and when the run ends;
//! the executor tells the same object how far each call got.
//!
//! Each save point is a do-nothing by default: a journal that saves nothing (no store, or an
//! engine that replays the run from its own journal) implements none of them, and the run,
//! which holds its journal as [`SavePoints`], does not call it at them. The checkpoint store's journal
//! (`checkpoint_journal.rs`) implements them all.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::ready;

use crate::agent::RunError;
use crate::agent::counts::Counts;
use crate::chat::{Message, ToolResult};
use crate::checkpoint::CheckpointError;
use crate::error::BoxFuture;
use crate::executor::{Held, Journal, NoJournal, Recorded, RunContext, Saved};

/// Where the loop records a run's state changes. Each save point answers whether the record
/// was kept; once one was not, [`failure`](RunJournal::failure) says why and the run ends with
/// it.
pub(crate) trait RunJournal: Journal {
    /// The run is starting (a new run, or a resumed one taking its checkpoint over) with
    /// `deadline` to go, if it has one: records the state it starts from, before anything runs.
    fn started<'a>(
        &'a self,
        ctx: &'a RunContext,
        deadline: Option<Duration>,
    ) -> BoxFuture<'a, bool> {
        let _ = (ctx, deadline);
        Box::pin(Recorded)
    }

    /// A model turn (`asked`, after `history`) asked for calls: records them as pending, before
    /// any of them runs. `known` says which name a tool of the agent answers. The counts are
    /// lent, not saved for it: a journal that keeps nothing copies nothing.
    fn turn<'a>(
        &'a self,
        history: &'a [Message],
        asked: &'a Message,
        known: &dyn Fn(&str) -> bool,
        counts: &Counts,
        ctx: &'a RunContext,
    ) -> BoxFuture<'a, bool> {
        let _ = (history, asked, known, counts, ctx);
        Box::pin(Recorded)
    }

    /// A call was answered: records its result and the run error it carries, if any.
    fn answered<'a>(
        &'a self,
        call_id: &'a str,
        result: &'a ToolResult,
        stop: Option<&'a RunError>,
        ctx: &'a RunContext,
    ) -> BoxFuture<'a, bool> {
        let _ = (call_id, result, stop, ctx);
        Box::pin(Recorded)
    }

    /// The run ended: records the transcript and how it ended.
    fn finished<'a>(
        &'a self,
        transcript: &'a [Message],
        counts: &Counts,
        outcome: Result<(), &'a RunError>,
    ) -> BoxFuture<'a, bool> {
        let _ = (transcript, counts, outcome);
        Box::pin(Recorded)
    }

    /// The first record that could not be kept, if one could not.
    fn failure(&self) -> Option<CheckpointError> {
        None
    }
}

impl RunJournal for NoJournal {}

/// The loop's save points as the run holds them: its journal, and whether it records anything,
/// read once as the run starts. A journal that records nothing has nothing to keep at a save
/// point (its save points are the trait's do-nothing defaults), so a run that holds one tests
/// a flag at each instead of calling the journal and polling a boxed "saved".
#[derive(Clone)]
pub(crate) struct SavePoints {
    journal: Arc<dyn RunJournal>,
    records: bool,
}

impl SavePoints {
    fn new(journal: Arc<dyn RunJournal>) -> SavePoints {
        let records = journal.records();
        SavePoints { journal, records }
    }

    /// [`RunJournal::started`], when the journal records anything.
    pub(in crate::agent) fn started<'a>(
        &'a self,
        ctx: &'a RunContext,
        deadline: Option<Duration>,
    ) -> Saved<'a> {
        if !self.records {
            return ready(true).left_future();
        }
        self.journal.started(ctx, deadline).right_future()
    }

    /// [`RunJournal::turn`], when the journal records anything.
    pub(in crate::agent) fn turn<'a>(
        &'a self,
        history: &'a [Message],
        asked: &'a Message,
        known: &dyn Fn(&str) -> bool,
        counts: &Counts,
        ctx: &'a RunContext,
    ) -> Saved<'a> {
        if !self.records {
            return ready(true).left_future();
        }
        (self.journal)
            .turn(history, asked, known, counts, ctx)
            .right_future()
    }

    /// [`RunJournal::answered`], when the journal records anything.
    pub(in crate::agent) fn answered<'a>(
        &'a self,
        call_id: &'a str,
        result: &'a ToolResult,
        stop: Option<&'a RunError>,
        ctx: &'a RunContext,
    ) -> Saved<'a> {
        if !self.records {
            return ready(true).left_future();
        }
        (self.journal)
            .answered(call_id, result, stop, ctx)
            .right_future()
    }

    /// [`RunJournal::finished`], when the journal records anything.
    pub(in crate::agent) fn finished<'a>(
        &'a self,
        transcript: &'a [Message],
        counts: &Counts,
        outcome: Result<(), &'a RunError>,
    ) -> Saved<'a> {
        if !self.records {
            return ready(true).left_future();
        }
        (self.journal)
            .finished(transcript, counts, outcome)
            .right_future()
    }

    /// [`RunJournal::failure`]: none for a journal that records nothing.
    pub(in crate::agent) fn failure(&self) -> Option<CheckpointError> {
        if !self.records {
            return None;
        }
        self.journal.failure()
    }
}

/// The run error a record that was not kept becomes.
pub(in crate::agent) fn unsaved(journal: &SavePoints) -> RunError {
    let error = journal
        .failure()
        .unwrap_or_else(|| CheckpointError::Store("a checkpoint save failed".into()));
    RunError::Checkpoint(error)
}

/// The run's one journal, as the loop holds it (`run`) and as the executor does (`calls`): the
/// same object, twice, because a trait object cannot be viewed as its supertrait's before Rust
/// 1.86.
#[derive(Clone)]
pub(crate) struct Seam {
    pub(in crate::agent) run: SavePoints,
    pub(in crate::agent) calls: Held,
}

impl Seam {
    /// The seam of a run recording through `journal`.
    pub(crate) fn of<J: RunJournal>(journal: Arc<J>) -> Seam {
        Seam {
            run: SavePoints::new(journal.clone()),
            calls: Held::new(journal),
        }
    }

    /// The seam of a run that records nothing and replays nothing.
    pub(in crate::agent) fn none() -> Seam {
        Seam::of(NoJournal::shared())
    }
}

impl fmt::Debug for Seam {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.run.journal.fmt(f)
    }
}
