//! The answer of an `on_llm_error` handler.

use std::num::NonZeroU32;
use std::time::Duration;

use crate::retry::ZeroAttempts;

/// What to do when a model call fails: the answer of an `on_llm_error` handler.
///
/// # Examples
///
/// Decisions are usually built inside [`AgentBuilder::on_llm_error`](crate::AgentBuilder::on_llm_error);
/// a wrapper of your own can read one back:
///
/// ```
/// use std::time::Duration;
/// use agent_errors::LlmErrorDecision;
///
/// let decision: LlmErrorDecision = LlmErrorDecision::retry(3, Duration::from_millis(500))?;
/// let calls_at_most = match &decision {
///     LlmErrorDecision::Rethrow | LlmErrorDecision::RespondWith(_) => 1,
///     LlmErrorDecision::Retry { max_attempts, .. }
///     | LlmErrorDecision::RetryRegardless { max_attempts, .. } => max_attempts.get(),
/// };
/// assert_eq!(calls_at_most, 3);
/// # Ok::<(), agent_errors::retry::ZeroAttempts>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum LlmErrorDecision<O = String> {
    /// Return the original error to the caller (the default).
    #[default]
    Rethrow,
    /// End the run with this output.
    RespondWith(O),
    /// Call the model again after `initial_backoff · 2^(k-1)`, capped at 32 s like every
    /// [`RetrySchedule`](crate::retry::RetrySchedule) (a server's `Retry-After`, up to 60 s, replaces
    /// it); `max_attempts` counts the first call and the budget is per model turn. Each retry
    /// also spends the run's retry allowance ([`Limits::max_retries`](crate::Limits)).
    ///
    /// A failure that cannot succeed on retry is not retried: one [`classify`](crate::classify::classify())
    /// calls conclusively non-retryable (an invalid request such as a 400 or a context overflow,
    /// 401/403, a used-up quota or spending limit, `x-should-retry: false`). Such a call is
    /// rethrown after one attempt; say [`RetryRegardless`](LlmErrorDecision::RetryRegardless)
    /// to retry it anyway. A failure nothing recognises (kind `Unknown`) is retried.
    Retry {
        /// Calls at most in this turn, counting the first.
        max_attempts: NonZeroU32,
        /// The first delay.
        initial_backoff: Duration,
    },
    /// Like [`Retry`](LlmErrorDecision::Retry), and retried even when the classification says
    /// calling again cannot help: for a handler that knows better than the status (a gateway
    /// that answers 400 while a backend restarts). The run's retry allowance still bounds it.
    RetryRegardless {
        /// Calls at most in this turn, counting the first.
        max_attempts: NonZeroU32,
        /// The first delay.
        initial_backoff: Duration,
    },
}

impl<O> LlmErrorDecision<O> {
    /// `Retry`, which retries only what can succeed on retry; rejected when `max_attempts` is
    /// zero.
    pub fn retry(max_attempts: u32, initial_backoff: Duration) -> Result<Self, ZeroAttempts> {
        NonZeroU32::new(max_attempts)
            .map(|max_attempts| LlmErrorDecision::Retry {
                max_attempts,
                initial_backoff,
            })
            .ok_or(ZeroAttempts)
    }

    /// `RetryRegardless`, which retries whatever the failure; rejected when `max_attempts` is
    /// zero.
    pub fn retry_regardless(
        max_attempts: u32,
        initial_backoff: Duration,
    ) -> Result<Self, ZeroAttempts> {
        NonZeroU32::new(max_attempts)
            .map(|max_attempts| LlmErrorDecision::RetryRegardless {
                max_attempts,
                initial_backoff,
            })
            .ok_or(ZeroAttempts)
    }
}
