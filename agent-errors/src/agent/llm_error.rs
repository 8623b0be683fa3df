//! `on_llm_error`: what the loop does when a model call fails.

use std::error::Error;
use std::sync::Arc;

use crate::llm::LlmErrorDecision;
use crate::retry::ZeroAttempts;

/// The error a handler is shown: the model's own error, downcastable to its concrete type.
pub type ModelError = dyn Error + Send + Sync + 'static;

/// What an `on_llm_error` handler may return: a decision, or the `Result` that
/// [`LlmErrorDecision::retry`] gives, so `|_, _| LlmErrorDecision::retry(3, ms(500))` works as is.
///
/// # Examples
///
/// Both a decision and the `Result` of [`LlmErrorDecision::retry`] are accepted. A `Retry` with
/// zero attempts is never read as something else: the run ends with
/// [`RunError::InvalidLlmDecision`](crate::RunError::InvalidLlmDecision), which says so.
///
/// ```
/// use std::time::Duration;
/// use agent_errors::LlmErrorDecision;
/// use agent_errors::run::IntoLlmDecision;
///
/// let plain: Result<LlmErrorDecision, _> = LlmErrorDecision::<String>::Rethrow.into_decision();
/// assert_eq!(plain, Ok(LlmErrorDecision::Rethrow));
/// let zero = LlmErrorDecision::<String>::retry(0, Duration::from_secs(1));
/// assert!(zero.into_decision().is_err());
/// ```
pub trait IntoLlmDecision<O> {
    /// The decision, or `Err` for a `Retry` built with zero attempts (which ends the run with
    /// [`RunError::InvalidLlmDecision`](crate::RunError::InvalidLlmDecision)).
    fn into_decision(self) -> Result<LlmErrorDecision<O>, ZeroAttempts>;
}

impl<O> IntoLlmDecision<O> for LlmErrorDecision<O> {
    fn into_decision(self) -> Result<LlmErrorDecision<O>, ZeroAttempts> {
        Ok(self)
    }
}

impl<O> IntoLlmDecision<O> for Result<LlmErrorDecision<O>, ZeroAttempts> {
    fn into_decision(self) -> Result<LlmErrorDecision<O>, ZeroAttempts> {
        self
    }
}

/// The handler as the loop calls it: `Err` is a decision that cannot be carried out.
pub(crate) type LlmErrorHandler<O> = Arc<
    dyn Fn(&ModelError, u32) -> Result<LlmErrorDecision<O>, ZeroAttempts> + Send + Sync + 'static,
>;

pub(crate) fn erase_handler<O, F, R>(handler: F) -> LlmErrorHandler<O>
where
    F: Fn(&ModelError, u32) -> R + Send + Sync + 'static,
    R: IntoLlmDecision<O>,
{
    Arc::new(move |error, attempt| handler(error, attempt).into_decision())
}
