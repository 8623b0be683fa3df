//! The HTTP status a web service answers for a run that ended without an output:
//! [`RunError::http_status`].

use crate::agent::{ResumeError, RunError};
use crate::checkpoint::CheckpointError;
use crate::classify::ErrorKind;
use crate::executor::TerminationReason;

impl RunError {
    /// The HTTP status a web service answers a request whose run ended this way, by what it
    /// means for the caller:
    ///
    /// | status | the run |
    /// | --- | --- |
    /// | 202 Accepted | waits for a person ([`WaitingForPerson`](RunError::WaitingForPerson)): nothing is lost, it goes on once answered |
    /// | 400 Bad Request | was handed a broken history ([`InvalidHistory`](RunError::InvalidHistory)) |
    /// | 403 Forbidden | was stopped by the permission hook's denials (`PermissionDenials`) |
    /// | 404 Not Found | has no checkpoint to resume ([`ResumeError::NotFound`]) |
    /// | 409 Conflict | already exists or finished ([`RunExists`](RunError::RunExists), [`ResumeError::Finished`]), or another process owns it (a checkpoint conflict), or cannot be resumed by this agent |
    /// | 422 Unprocessable Content | escalated, or the model declined ([`Escalated`](RunError::Escalated), [`Refused`](RunError::Refused)) |
    /// | 429 Too Many Requests | went past its usage limits ([`UsageLimit`](RunError::UsageLimit)) |
    /// | 499 | was cancelled ([`Cancelled`](RunError::Cancelled), the client went away) |
    /// | 500 Internal Server Error | met a fault of the service itself: a `throw`, a panicking callback, a missing context value, a runtime without its timer, a store that cannot be read |
    /// | 502 Bad Gateway | was failed by what it depends on: the model's answer, a model call (refused credentials included: the service's, not the caller's), a tool whose credentials were refused (`Auth`) |
    /// | 503 Service Unavailable | found a dependency down: retries used up, an open circuit, a tripped breaker, a checkpoint store that failed |
    /// | 504 Gateway Timeout | ran out of time ([`DeadlineExceeded`](RunError::DeadlineExceeded), a model call that timed out), or of model turns |
    ///
    /// A caller's own credentials are the service's to check before a run starts (401): no
    /// run error is the caller's fault but a broken history.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::{Agent, HttpError, RunError};
    /// use agent_errors::testing::ScriptedModel;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let agent = Agent::builder("a").model(ScriptedModel::new().error(HttpError::new(401, "bad key"))).build()?;
    /// let error = agent.run("hi").await.unwrap_err();
    /// assert_eq!(error.http_status(), 502, "the service's own model key was refused");
    /// assert_eq!(RunError::WaitingForPerson { pending: Vec::new() }.http_status(), 202);
    /// # Ok(())
    /// # }
    /// ```
    pub fn http_status(&self) -> u16 {
        match self {
            RunError::WaitingForPerson { .. } => 202,
            RunError::InvalidHistory(_) => 400,
            RunError::InvalidUsageLimits(_) => 500,
            RunError::Terminated(stop) => match &stop.reason {
                TerminationReason::WaitingForPerson(_) => 202,
                TerminationReason::PermissionDenials { .. } => 403,
                TerminationReason::Auth => 502,
                TerminationReason::Thrown(_) => 500,
                TerminationReason::RetriesExhausted { .. }
                | TerminationReason::CircuitOpen
                | TerminationReason::BreakerTripped { .. } => 503,
            },
            RunError::BreakerTripped { .. } => 503,
            RunError::Resume(ResumeError::NotFound { .. }) => 404,
            RunError::Resume(_) | RunError::RunExists { .. } => 409,
            RunError::Checkpoint(CheckpointError::Conflict { .. }) => 409,
            RunError::Checkpoint(CheckpointError::Store(_)) => 503,
            RunError::Escalated { .. } | RunError::Refused { .. } => 422,
            RunError::UsageLimit(_) => 429,
            RunError::Cancelled => 499,
            RunError::Model(failure) if timed_out(failure.unredacted_error()) => 504,
            RunError::Model(_) | RunError::InvalidOutput { .. } | RunError::EmptyResponse => 502,
            RunError::DeadlineExceeded { .. } | RunError::TurnCap { .. } => 504,
            _ => 500,
        }
    }
}

/// Whether a model call failed by timing out.
fn timed_out(error: &(dyn std::error::Error + Send + Sync + 'static)) -> bool {
    crate::classify::classify(error).kind == ErrorKind::Timeout
}
