//! How a run and its model turns look to the observers (spans and metrics): the labels they
//! record, told from the run's own types so that observing needs nothing of the agent.

use tokio::time::Instant;

use crate::agent::{Agent, AgentOutput, RunError, RunOptions, RunOutcome};
use crate::chat::Message;
use crate::classify::classify;
use crate::observe::{self, RunEnd, TurnFailure, spans};

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
            RunError::InvalidLlmDecision(_) => "invalid_llm_decision",
            RunError::NoTimer => "no_timer",
            RunError::RunExists { .. } => "run_exists",
            RunError::InvalidUsageLimits(_) => "invalid_usage_limits",
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

/// A run's outcome, with the end of its last model turn when nothing after that turn counts
/// toward the run's duration (the run's end then shares that reading of the clock).
pub(in crate::agent) struct Ended<O> {
    pub(in crate::agent) outcome: RunOutcome<O>,
    pub(in crate::agent) at: Option<Instant>,
}

impl<O> From<RunOutcome<O>> for Ended<O> {
    fn from(outcome: RunOutcome<O>) -> Self {
        Ended { outcome, at: None }
    }
}

impl<O> RunEnd for Ended<O> {
    fn stop_reason(&self) -> Option<&'static str> {
        self.outcome
            .result
            .as_ref()
            .err()
            .map(RunError::stop_reason)
    }

    fn usage(&self) -> (u32, crate::usage::Usage, u32) {
        let report = &self.outcome.report;
        (report.model_calls, report.usage, report.tool_calls)
    }

    fn ended_at(&self) -> Option<Instant> {
        self.at
    }
}

impl<O: AgentOutput> Agent<O> {
    /// A new run inside its span and meters, started now (each public entry calls this as it is
    /// first polled). Not itself `async`: each layer of `async fn` around the run would copy the
    /// future it holds, and the outcome it hands back, once more.
    pub(in crate::agent) fn observed(
        &self,
        history: Vec<Message>,
        mut options: RunOptions,
    ) -> impl Future<Output = Ended<O>> + '_ {
        let inner = &self.inner;
        // The run's id is its span's: made here when none was given, and lent to the span.
        let run_id = options
            .run_id
            .take()
            .unwrap_or_else(crate::agent::new_run_id);
        let span = spans::invoke_agent(&inner.name, &*inner.model, (&run_id, false));
        options.run_id = Some(run_id);
        // Boxed: the loop's future holds a whole turn (its calls, their ladders, the journal) and
        // is several kilobytes; the caller's future then stays small wherever it is moved.
        let started = Instant::now();
        let run = Box::pin(inner.run(history, options, started));
        observe::run((&inner.name, span), &inner.meters, started, run)
    }
}
