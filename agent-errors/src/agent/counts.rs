//! What the loop counts over a run (turns, model and tool calls, usage), saved with a durable
//! run so a resumed one goes on counting.

use super::durable::SavedCounts;
use super::stream::DeltaSender;
use crate::usage::Usage;

#[derive(Default)]
pub(super) struct Counts {
    pub(super) turns: u32,
    pub(super) model_calls: u32,
    pub(super) tool_calls: u32,
    pub(super) usage: Usage,
    /// Where the run streams the model's answers, if anywhere.
    pub(super) deltas: Option<DeltaSender>,
}

impl Counts {
    pub(super) fn saved(&self) -> SavedCounts {
        SavedCounts {
            turns: self.turns,
            model_calls: self.model_calls,
            tool_calls: self.tool_calls,
            usage: self.usage,
        }
    }

    pub(super) fn restore(&mut self, saved: SavedCounts) {
        self.turns = saved.turns;
        self.model_calls = saved.model_calls;
        self.tool_calls = saved.tool_calls;
        self.usage = saved.usage;
    }
}
