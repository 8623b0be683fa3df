//! What one task run cost and how it ended, and the sums over many runs.

use std::time::Duration;

use crate::faults::Mix;
use crate::model::GAVE_UP;
use crate::strategies::RunEnd;

/// One task run, accounted.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct TaskRecord {
    /// The expected answer was reached.
    pub(crate) success: bool,
    /// The run ended with an answer, and it is not the expected one: built on a failure.
    pub(crate) wrong: bool,
    pub(crate) model_calls: u64,
    pub(crate) tokens: u64,
    /// Calls that reached a tool (fault injector included).
    pub(crate) tool_calls: u64,
    /// Calls of a request with a permanent failure, after its first.
    pub(crate) wasted_calls: u64,
    /// A write's effect applied again.
    pub(crate) duplicate_effects: u64,
    /// A write the service answered from its record, by a key it had seen: a repeat that a
    /// key kept from being applied again.
    pub(crate) repeats_answered: u64,
    /// Tool results the model was sent with a planted secret in them.
    pub(crate) secrets_shown: u64,
    /// The paused clock's time, backoff and `Retry-After` included.
    pub(crate) virtual_time: Duration,
    /// Real time on one thread, measured: not deterministic.
    pub(crate) cpu_time: Duration,
}

impl TaskRecord {
    /// Success or wrong answer, from how the run ended.
    pub(crate) fn judge(end: &RunEnd, expected: &str) -> (bool, bool) {
        match end {
            Ok(answer) if answer == expected => (true, false),
            Ok(answer) => (false, !answer.starts_with(GAVE_UP)),
            Err(_) => (false, false),
        }
    }
}

/// The sums of many runs of one strategy under one mix at one rate.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct CellStats {
    pub(crate) runs: u64,
    pub(crate) successes: u64,
    pub(crate) wrong: u64,
    pub(crate) model_calls: u64,
    pub(crate) tokens: u64,
    pub(crate) tool_calls: u64,
    pub(crate) wasted_calls: u64,
    pub(crate) duplicate_effects: u64,
    pub(crate) secrets_shown: u64,
    pub(crate) virtual_time: Duration,
    pub(crate) cpu_time: Duration,
}

impl CellStats {
    pub(crate) fn add(&mut self, record: &TaskRecord) {
        self.runs += 1;
        self.successes += u64::from(record.success);
        self.wrong += u64::from(record.wrong);
        self.model_calls += record.model_calls;
        self.tokens += record.tokens;
        self.tool_calls += record.tool_calls;
        self.wasted_calls += record.wasted_calls;
        self.duplicate_effects += record.duplicate_effects;
        self.secrets_shown += record.secrets_shown;
        self.virtual_time += record.virtual_time;
        self.cpu_time += record.cpu_time;
    }

    fn per_run(&self, total: u64) -> f64 {
        if self.runs == 0 {
            0.0
        } else {
            total as f64 / self.runs as f64
        }
    }

    pub(crate) fn success_rate(&self) -> f64 {
        self.per_run(self.successes)
    }

    pub(crate) fn model_calls_per_task(&self) -> f64 {
        self.per_run(self.model_calls)
    }

    pub(crate) fn tokens_per_task(&self) -> f64 {
        self.per_run(self.tokens)
    }

    pub(crate) fn virtual_secs_per_task(&self) -> f64 {
        self.virtual_time.as_secs_f64() / self.runs.max(1) as f64
    }

    pub(crate) fn cpu_micros_per_task(&self) -> f64 {
        self.cpu_time.as_secs_f64() * 1e6 / self.runs.max(1) as f64
    }
}

/// One strategy under one mix at one rate.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Cell {
    pub(crate) strategy: &'static str,
    pub(crate) mix: Mix,
    pub(crate) rate: f64,
    pub(crate) stats: CellStats,
}

/// Every cell of a benchmark run.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Results {
    pub(crate) cells: Vec<Cell>,
}

impl Results {
    pub(crate) fn cell(&self, strategy: &str, mix: Mix, rate: f64) -> Option<&CellStats> {
        self.cells
            .iter()
            .find(|c| c.strategy == strategy && c.mix == mix && c.rate == rate)
            .map(|c| &c.stats)
    }

    /// The strategy's fault-free cell (every mix at rate 0 is the same run).
    pub(crate) fn fault_free(&self, strategy: &str) -> Option<&CellStats> {
        self.cells
            .iter()
            .find(|c| c.strategy == strategy && c.rate == 0.0)
            .map(|c| &c.stats)
    }

    pub(crate) fn strategies(&self) -> Vec<&'static str> {
        let mut names: Vec<&'static str> = Vec::new();
        for cell in &self.cells {
            if !names.contains(&cell.strategy) {
                names.push(cell.strategy);
            }
        }
        names
    }
}
