//! How a tool call fails without its tool's own error, and what kind of failure each is: a
//! tool (or hook, or fixer) that panicked, an open circuit, an interrupted call, missing
//! context; [`classify_tool_error`] names the kind of any failure, for the ladder.

use std::any::Any;

use super::permission::PermissionDenied;
use super::resume::{CallInterrupted, SavedFailure};
use crate::classify::{Classification, Classifier, ErrorKind, Evidence, classify};
use crate::error::{BoxError, InvalidArguments, ToolError};
use crate::extensions::MissingContext;
use crate::output_check::OutputRejected;

/// A tool panicked; classified [`ErrorKind::Bug`].
///
/// # Examples
///
/// A panicking tool does not take the process down: the call fails, and the model is told the
/// tool crashed.
///
/// ```
/// use agent_errors::{Registry, RunContext, ToolCall};
/// use agent_errors::testing::{FaultyTool, echo_tool};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let crashing = FaultyTool::new(echo_tool("parse")).panic_times(1, "index out of bounds");
/// let registry = Registry::builder().tool(crashing.tool()).build()?;
/// let call = ToolCall::new("c1", "parse", r#"{"text": "x"}"#);
/// let outcome = registry.execute(&RunContext::new(), &call).await;
/// let result = outcome.result().expect("shown to the model, not the end of the run");
/// assert!(result.is_error && result.content.contains("index out of bounds"));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the tool panicked: {message}")]
pub struct ToolPanic {
    /// The panic's message, when it had one.
    pub message: String,
}

impl ToolPanic {
    pub(crate) fn from_payload(payload: Box<dyn Any + Send>) -> Self {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "non-string panic payload".to_owned());
        ToolPanic { message }
    }
}

/// The service breaker was open, so the tool was not called.
///
/// # Examples
///
/// The error a call fails with when its service breaker refused it; a fixer, fallback or log
/// line can tell it from the tool's own failures:
///
/// ```
/// use agent_errors::ToolError;
/// use agent_errors::call::CircuitOpen;
///
/// let error = ToolError::execution(serde_json::json!({}), CircuitOpen { tool: "search".into() });
/// let not_called = error.cause().downcast_ref::<CircuitOpen>().is_some();
/// assert!(not_called);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{tool}` is failing and its circuit is open: not called")]
pub struct CircuitOpen {
    /// The tool.
    pub tool: String,
}

/// A call that failed once its request may have reached the service (a timeout, a dropped
/// connection, a 5xx), of a tool whose second call could apply the effect twice (neither
/// idempotent nor keyed): under `retry(n, when_safe)`, as in the recommended preset, it is not
/// called again but answered as an [`OutcomeUnknown`](ErrorKind::OutcomeUnknown) failure. The
/// failure it stands for is its source.
///
/// # Examples
///
/// ```
/// use agent_errors::ToolError;
/// use agent_errors::call::MayHaveTakenEffect;
///
/// let error = ToolError::execution(serde_json::json!({}), MayHaveTakenEffect::new("timed out"));
/// let may_have = error.cause().downcast_ref::<MayHaveTakenEffect>().is_some();
/// assert!(may_have);
/// assert!(error.cause().to_string().starts_with("the call may have taken effect"));
/// ```
#[derive(Debug, thiserror::Error)]
#[error("the call may have taken effect before it failed, so it was not made again")]
pub struct MayHaveTakenEffect {
    #[source]
    source: BoxError,
}

impl MayHaveTakenEffect {
    /// Stands for the failure `source`.
    pub fn new(source: impl Into<BoxError>) -> Self {
        MayHaveTakenEffect {
            source: source.into(),
        }
    }
}

/// A failed attempt's error, with its classification when the attempt already made one (to
/// tell the service breaker how the call went), so that a failure is classified once.
#[derive(Debug)]
pub(crate) struct Failed {
    pub(crate) error: ToolError,
    pub(crate) class: Option<Classification>,
}

impl From<ToolError> for Failed {
    fn from(error: ToolError) -> Self {
        Failed { error, class: None }
    }
}

impl From<ToolError> for Box<Failed> {
    fn from(error: ToolError) -> Self {
        Box::new(error.into())
    }
}

impl From<Box<Failed>> for Failed {
    fn from(failed: Box<Failed>) -> Self {
        *failed
    }
}

/// Classifies a tool failure: bad arguments (unparsed, or refused by the running tool) are
/// `Validation`, panics and missing context are `Bug`, an open circuit is a transient that must
/// not be retried, and anything else goes to the run's classifier when it has one (which also
/// consults the process-wide rules, after its own), or to [`classify`].
pub(crate) fn classify_tool_error(
    error: &ToolError,
    classifier: Option<&Classifier>,
) -> Classification {
    let cause = error.cause();
    if error.is_invalid_args() {
        let evidence = if cause.is::<InvalidArguments>() {
            "InvalidArguments"
        } else {
            "serde_json::Error"
        };
        return Classification::new(ErrorKind::Validation, Evidence::Type(evidence));
    }
    if cause.downcast_ref::<ToolPanic>().is_some() {
        return Classification::new(ErrorKind::Bug, Evidence::Type("ToolPanic"));
    }
    if cause.downcast_ref::<PermissionDenied>().is_some() {
        return Classification::new(ErrorKind::Auth, Evidence::Type("PermissionDenied"));
    }
    if cause.downcast_ref::<MissingContext>().is_some() {
        return Classification::new(ErrorKind::Bug, Evidence::Type("MissingContext"));
    }
    if cause.downcast_ref::<MayHaveTakenEffect>().is_some() {
        return Classification::new(
            ErrorKind::OutcomeUnknown,
            Evidence::Type("MayHaveTakenEffect"),
        );
    }
    if cause.downcast_ref::<CallInterrupted>().is_some() {
        return Classification::new(ErrorKind::OutcomeUnknown, Evidence::Type("CallInterrupted"));
    }
    if let Some(saved) = cause.downcast_ref::<SavedFailure>() {
        return Classification::new(saved.kind, Evidence::Type("SavedFailure"));
    }
    if let Some(rejected) = cause.downcast_ref::<OutputRejected>() {
        return Classification::new(rejected.kind(), Evidence::Type("OutputRejected"));
    }
    if cause.downcast_ref::<CircuitOpen>().is_some() {
        let mut c = Classification::new(ErrorKind::Transient, Evidence::Type("CircuitOpen"));
        c.should_retry = Some(false);
        return c;
    }
    match classifier {
        Some(classifier) => classifier.classify(cause),
        None => classify(cause),
    }
}
