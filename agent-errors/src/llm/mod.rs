//! When a model call fails: what to do about it ([`LlmErrorDecision`]), and model wrappers that
//! retry, fall back and persist around any [`ChatModel`](crate::ChatModel).

use std::num::NonZeroU32;
use std::time::Duration;

// The model wrappers below speak the chat types; they live in `chat`.
pub(crate) use crate::chat::{CallSource, ChatModel, ChatRequest, ChatResponse};

pub mod fallback;
pub mod persistent;
pub mod retryability;
mod sleep;

pub use fallback::FallbackModel;
pub use persistent::{Heartbeat, PersistentRetry};
pub use retryability::{ContextOverflow, RetryRules, StopReason, Verdict};
pub use sleep::{Sleeper, TokioSleeper};

/// What to do when a model call fails: the answer of an `on_llm_error` handler.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum LlmErrorDecision<O = String> {
    /// Return the original error to the caller (the default).
    #[default]
    Rethrow,
    /// End the run with this output.
    RespondWith(O),
    /// Call the model again with backoff `initial_backoff · 2^(k-1)`; `max_attempts` counts the
    /// first call and the budget is per model turn.
    Retry {
        /// Calls at most in this turn, counting the first.
        max_attempts: NonZeroU32,
        /// The first delay.
        initial_backoff: Duration,
    },
}

/// `Retry` was asked for with zero attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("LlmErrorDecision::Retry needs max_attempts >= 1 (it counts the first call)")]
pub struct ZeroRetryAttempts;

impl<O> LlmErrorDecision<O> {
    /// `Retry`; rejected when `max_attempts` is zero.
    pub fn retry(max_attempts: u32, initial_backoff: Duration) -> Result<Self, ZeroRetryAttempts> {
        NonZeroU32::new(max_attempts)
            .map(|max_attempts| LlmErrorDecision::Retry {
                max_attempts,
                initial_backoff,
            })
            .ok_or(ZeroRetryAttempts)
    }
}
