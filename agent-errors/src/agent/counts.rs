//! What the loop counts over a run (turns, model and tool calls, usage), saved with a durable
//! run so a resumed one goes on counting, and the run's usage accounting as the loop sees it:
//! the loop asks before each model request, after each response and when a turn's tool calls
//! arrive, and is told whether the run may go on. What is counted lives in the run's one meter
//! ([`RunMeter`]), which every other path of the run charges too (model wrappers, tool
//! attempts, fixer agents); the loop adds the one thing only it knows: the final answer a
//! graceful stop asks for.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::RunError;
use crate::chat::ToolCall;
use crate::events::Event;
use crate::executor::RunContext;
use crate::usage::{
    Answerer, OnExceed, RunMeter, RunUsage, Usage, UsageLimit, UsageLimitExceeded, UsageLimits,
};

pub(crate) struct Counts {
    pub(super) turns: u32,
    pub(super) model_calls: u32,
    pub(super) tool_calls: u32,
    pub(super) usage: Usage,
    /// What the run's usage caps count.
    pub(super) meter: UsageMeter,
}

impl Counts {
    /// A run's counts from zero, its caps held by `meter`.
    pub(super) fn new(meter: UsageMeter) -> Counts {
        Counts {
            turns: 0,
            model_calls: 0,
            tool_calls: 0,
            usage: Usage::default(),
            meter,
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

/// The loop's counts, as saved.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct SavedCounts {
    pub(super) turns: u32,
    pub(super) model_calls: u32,
    pub(super) tool_calls: u32,
    pub(super) usage: Usage,
    /// Calls of each tool with a cap of its own; added within version 2 (read as none).
    #[serde(default)]
    pub(super) calls_of: BTreeMap<String, u32>,
    /// What the run's tokens cost; added within version 2 (read as 0).
    #[serde(default)]
    pub(super) cost: f64,
    /// What the run's meter counted on every path (model wrappers, fixer agents, each tool
    /// body), when the run has caps; added within version 2 (read from the counts above).
    #[serde(default)]
    pub(super) metered: Option<crate::usage::RunUsage>,
}

/// Where the one last request of a graceful stop is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum FinalRequest {
    #[default]
    NotAsked,
    /// Asked for; the next request is let through past the run's own caps.
    Allowed,
    /// Made: nothing more is let through.
    Made,
}

/// The run's caps and the meter they hold on.
#[derive(Debug)]
pub(super) struct UsageMeter {
    limits: Arc<UsageLimits>,
    meter: RunMeter,
    last: FinalRequest,
}

impl UsageMeter {
    pub(super) fn new(limits: Arc<UsageLimits>, meter: RunMeter) -> Self {
        UsageMeter {
            limits,
            meter,
            last: FinalRequest::NotAsked,
        }
    }

    /// What the meter counted, to be saved with a checkpoint.
    pub(super) fn saved(&self) -> Option<RunUsage> {
        self.meter.used()
    }

    /// Takes up what an interrupted run had counted.
    pub(super) fn restore(&self, used: RunUsage) {
        self.meter.restore(used);
    }
}

impl Counts {
    /// What the run has used so far: what its meter counted, or, in a run without a cap across
    /// the run (which has no meter), the loop's own counts.
    pub(super) fn run_usage(&self) -> RunUsage {
        self.meter.meter.used().unwrap_or_else(|| RunUsage {
            requests: self.model_calls,
            tokens: self.usage,
            tool_calls: self.tool_calls,
            calls_of: BTreeMap::new(),
            cost: 0.0,
        })
    }

    fn exceeded(&self, (limit, allowed): (UsageLimit, String)) -> RunError {
        let exceeded = UsageLimitExceeded::new(limit, allowed, self.run_usage());
        RunError::UsageLimit(Box::new(exceeded))
    }

    /// Before a model request: refused when it would go past the request cap or the run went
    /// past another (the one last request of a graceful stop goes through once).
    #[inline]
    pub(super) fn may_ask(&mut self) -> Result<(), RunError> {
        if self.meter.last == FinalRequest::NotAsked {
            return self.meter.meter.request().map_err(RunError::UsageLimit);
        }
        self.may_ask_last()
    }

    /// [`Counts::may_ask`] once a graceful stop asked for its final answer.
    fn may_ask_last(&mut self) -> Result<(), RunError> {
        if self.meter.last == FinalRequest::Allowed {
            self.meter.last = FinalRequest::Made;
            return self
                .meter
                .meter
                .final_request()
                .map_err(RunError::UsageLimit);
        }
        let allowed = self.model_calls.to_string();
        Err(self.exceeded((UsageLimit::Requests, allowed)))
    }

    /// After a response from `model` that `reported` its usage (already added to the run's
    /// report) or did not (then counted as the caps say, from `estimate` by default): counted,
    /// and an error when the run went past a token or cost cap. The first response without
    /// usage under such a cap is told as an event and a warning.
    pub(super) fn answered(
        &mut self,
        ctx: &RunContext,
        model: Answerer<'_>,
        reported: Option<Usage>,
        estimate: impl FnOnce() -> Usage,
    ) -> Result<(), RunError> {
        // The final answer is counted, not capped: it is what the stop asked for.
        let capped = self.meter.last == FinalRequest::NotAsked;
        let charged = self.meter.meter.answered(model, reported, estimate, capped);
        if charged.first_missing {
            ctx.events().emit(Event::UsageMissing {
                model: model.asked.to_owned(),
            });
        }
        charged.result.map_err(RunError::UsageLimit)
    }

    /// Whether a turn of `calls` calls is past the per-turn cap, and so refused whole: checked
    /// before any call of it is looked at.
    #[inline]
    pub(super) fn turn_too_long(&self, calls: usize) -> bool {
        calls > 1 && self.meter.limits.turn_refused(calls).is_some()
    }

    /// When a turn's calls arrive: refused (none of them runs) when they would go past a
    /// tool-call cap. The report counts them here; the meter counts each tool body as it runs.
    #[inline]
    pub(super) fn may_run(&mut self, calls: &[ToolCall]) -> Result<(), RunError> {
        if self.meter.meter.is_metered() {
            let names = calls.iter().map(|call| &*call.name);
            self.meter
                .meter
                .calls_refused(names)
                .map_err(RunError::UsageLimit)?;
        } else if let Some(refused) = self.meter.limits.turn_refused(calls.len()) {
            // A run without a meter has no cap across the run: only the per-turn cap applies.
            return Err(self.exceeded(refused));
        }
        self.tool_calls += u32::try_from(calls.len()).unwrap_or(u32::MAX);
        Ok(())
    }

    /// A resumed run's turn: the checkpoint counted before any of its calls ran, so the runs
    /// of a tool body each call had made by its last save (one that may have been running
    /// included) are counted now.
    pub(super) fn count_resumed<'a>(&self, runs: impl IntoIterator<Item = (&'a str, u32)>) {
        for (tool, attempts) in runs {
            self.meter.meter.ran(tool, attempts);
        }
    }

    /// Whether the run, ended by `error`, asks the model once more for a final answer: only
    /// for a cap the limits chose that for, and only once.
    pub(super) fn asks_final_answer(&mut self, error: &RunError) -> bool {
        let RunError::UsageLimit(exceeded) = error else {
            return false;
        };
        let graceful = self.meter.limits.on_exceeding(&exceeded.limit) == OnExceed::FinalAnswer;
        if !graceful || self.meter.last != FinalRequest::NotAsked {
            return false;
        }
        self.meter.last = FinalRequest::Allowed;
        true
    }
}
