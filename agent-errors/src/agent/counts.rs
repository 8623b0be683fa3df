//! What the loop counts over a run (turns, model and tool calls, usage), saved with a durable
//! run so a resumed one goes on counting.

use std::sync::Arc;

use tokio::time::Instant;

use super::durable::SavedCounts;
use super::stream::DeltaSender;
use super::usage_meter::UsageMeter;
use crate::model::ChatModel;
use crate::usage::{RunUsage, Usage};

pub(crate) struct Counts {
    pub(super) turns: u32,
    pub(super) model_calls: u32,
    pub(super) tool_calls: u32,
    pub(super) usage: Usage,
    /// Where the run streams the model's answers, if anywhere.
    pub(super) deltas: Option<DeltaSender>,
    /// What the run's usage caps count.
    pub(super) meter: UsageMeter,
    /// A reading of the clock nothing timed has happened since (the run's start until its first
    /// turn, a turn's end until the run does something else), for the next timing to start or
    /// end at instead of reading the clock again.
    pub(super) clock: Option<Instant>,
    /// Whether the model is sent earlier failures of a tool as one-line summaries.
    pub(super) compact_failures: bool,
    /// The model answering the run's requests when it is not the agent's own: the output
    /// policy's fallback, once it took over.
    pub(super) model: Option<Arc<dyn ChatModel>>,
}

impl Counts {
    /// A run's counts from zero, its caps held by `meter`.
    pub(super) fn new(deltas: Option<DeltaSender>, meter: UsageMeter) -> Counts {
        Counts {
            turns: 0,
            model_calls: 0,
            tool_calls: 0,
            usage: Usage::default(),
            deltas,
            meter,
            clock: None,
            compact_failures: false,
            model: None,
        }
    }

    pub(super) fn saved(&self) -> SavedCounts {
        let metered = self.meter.saved();
        let (calls_of, cost) = metered
            .as_ref()
            .map(|used| (used.calls_of.clone(), used.cost))
            .unwrap_or_default();
        SavedCounts {
            turns: self.turns,
            model_calls: self.model_calls,
            tool_calls: self.tool_calls,
            usage: self.usage,
            calls_of,
            cost,
            metered,
        }
    }

    pub(super) fn restore(&mut self, saved: SavedCounts) {
        self.turns = saved.turns;
        self.model_calls = saved.model_calls;
        self.tool_calls = saved.tool_calls;
        self.usage = saved.usage;
        // A checkpoint from before the meter counted every path: its own counts are the best
        // account of what the run used.
        let metered = saved.metered.unwrap_or(RunUsage {
            requests: saved.model_calls,
            tokens: saved.usage,
            tool_calls: saved.tool_calls,
            calls_of: saved.calls_of,
            cost: saved.cost,
        });
        self.meter.restore(metered);
    }
}
