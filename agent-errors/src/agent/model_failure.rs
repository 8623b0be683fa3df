//! The model's error as a run hands it out: redacted, with the original kept on purpose.
//!
//! `on_llm_error`: what the loop does when a model call fails.

use crate::classify::RedactedError;
use crate::error::BoxError;
use crate::llm::LlmErrorDecision;
use crate::retry::ZeroAttempts;
use std::error::Error;
use std::fmt;
use std::sync::Arc;

/// The error of a model call that ended a run ([`RunError::Model`](crate::RunError::Model)).
///
/// A model's error carries what its provider, its HTTP client or its author put in it (a
/// response body that echoes a key, a URL with a password, a header), and an application logs a
/// run's error with its causes (`anyhow`'s `{:#}`, `eyre`, tracing). So what it shows is a
/// redacted copy: its `Display` and `Debug` are the model error's words with every secret
/// replaced by [`REDACTED`](crate::redact::REDACTED), and its `source()` chain is a redacted
/// copy of the model error's causes, in which a [`HttpError`](crate::HttpError), a
/// [`StreamError`](crate::stream::StreamError) and a provider's `StatusError` keep their type
/// (redacted), so `find_in_chain` still finds them. Every other level is a
/// [`RedactedError`].
///
/// The original error, to downcast to its own type (an `io::Error`, a provider's error, an
/// error of yours), is [`unredacted_error`](ModelFailure::unredacted_error), also reached
/// through [`RunError::model_error`](crate::RunError::model_error). `on_llm_error` handlers are
/// shown the original: only what leaves the run is redacted.
///
/// # Examples
///
/// ```
/// use agent_errors::{Agent, HttpError, RunError};
/// use agent_errors::testing::ScriptedModel;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let failing = ScriptedModel::new().error(HttpError::new(500, "key sk-live-4f9a8b7c6d5e4f3a2b1c rejected"));
/// let agent = Agent::builder("a").model(failing).build()?;
/// let Err(RunError::Model(failure)) = agent.run("hi").await else { unreachable!() };
/// assert_eq!(failure.to_string(), "HTTP 500: key [REDACTED] rejected");
/// // The original, on purpose: never log it.
/// let http = failure.unredacted_error().downcast_ref::<HttpError>().unwrap();
/// assert_eq!(http.status(), 500);
/// # Ok(())
/// # }
/// ```
pub struct ModelFailure {
    /// The model's error as it was returned: never shown, never `source()`.
    original: BoxError,
    /// The stand-in for the model's error, redacted: what this error shows.
    redacted: BoxError,
}

impl ModelFailure {
    pub(crate) fn new(original: BoxError) -> Self {
        let redacted = RedactedError::chain_with(original.as_ref(), &typed_copy);
        ModelFailure { original, redacted }
    }

    /// The model's error as the model returned it, secrets and all: to downcast to its type.
    /// Do not log it; log the `ModelFailure` (or the run's error), whose chain is redacted.
    pub fn unredacted_error(&self) -> &ModelError {
        self.original.as_ref()
    }

    /// The model's error as the model returned it, owned. Do not log it.
    pub fn into_unredacted_error(self) -> BoxError {
        self.original
    }
}

impl fmt::Display for ModelFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.redacted, f)
    }
}

impl fmt::Debug for ModelFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ModelFailure").field(&self.redacted).finish()
    }
}

impl Error for ModelFailure {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.redacted.source()
    }
}

/// The levels of a model error a caller looks up by type, copied redacted: a stream error and
/// a provider's status error (an `HttpError` is kept by every redacted chain).
fn typed_copy(level: &(dyn Error + 'static), below: &mut Option<BoxError>) -> Option<BoxError> {
    if let Some(stream) = level.downcast_ref::<crate::stream::StreamError>() {
        return Some(Box::new(stream.redacted_copy(below.take())));
    }
    #[cfg(feature = "_provider")]
    if let Some(status) = level.downcast_ref::<crate::provider::StatusError>() {
        // Its source is its own `HttpError`, redacted with it.
        return Some(Box::new(status.redacted()));
    }
    None
}

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
