//! How a run and its model turns look to the observers (spans and metrics): the labels they
//! record, told from the run's own types so that observing needs nothing of the agent.

use super::{RunError, RunOutcome};
use crate::classify::classify;
use crate::observe::{RunEnd, TurnFailure};

impl RunError {
    /// Why a run ended without an output, as a label: `terminated`, `turn_cap`, ...
    pub(crate) fn stop_reason(&self) -> &'static str {
        match self {
            RunError::Terminated(_) => "terminated",
            RunError::BreakerTripped { .. } => "breaker_tripped",
            RunError::TurnCap { .. } => "turn_cap",
            RunError::Cancelled => "cancelled",
            RunError::Model(_) => "model",
            RunError::Escalated { .. } => "escalated",
            RunError::InvalidOutput { .. } => "invalid_output",
            RunError::EmptyResponse => "empty_response",
            RunError::Refused { .. } => "refused",
            RunError::DeadlineExceeded { .. } => "deadline_exceeded",
            RunError::CallbackPanicked { .. } => "callback_panicked",
            RunError::Checkpoint(_) => "checkpoint",
            RunError::Resume(_) => "resume",
            RunError::InvalidHistory(_) => "invalid_history",
            RunError::WaitingForPerson { .. } => "waiting_for_person",
            RunError::UsageLimit(_) => "usage_limit",
            RunError::MissingContext { .. } => "missing_context",
        }
    }
}

impl TurnFailure for RunError {
    fn error_type(&self) -> &'static str {
        match self {
            RunError::Model(error) => classify(error.unredacted_error()).kind.as_str(),
            other => other.stop_reason(),
        }
    }
}

impl<O> RunEnd for RunOutcome<O> {
    fn stop_reason(&self) -> Option<&'static str> {
        self.result.as_ref().err().map(RunError::stop_reason)
    }

    fn usage(&self) -> (u32, crate::usage::Usage, u32) {
        let report = &self.report;
        (report.model_calls, report.usage, report.tool_calls)
    }
}
