//! One attempt at a tool: parse the arguments, ask the breakers, run the tool under its timeout,
//! and turn a panic into a failure. Every call, retry, repair and fallback goes through
//! [`attempt`], with arguments that passed the [gate](super::gate) for that tool.

use std::any::Any;
use std::future::{Future, ready};
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use futures_util::future::Either;

use super::context::RunContext;
use super::permission::PermissionDenied;
use super::resume::{CallInterrupted, SavedFailure};
use crate::breaker::{Admission, ServiceBreaker};
use crate::classify::{Classification, Classifier, ErrorKind, Evidence, classify};
use crate::error::{BoxError, InvalidArguments, ToolError};
use crate::extensions::{Extensions, MissingContext};
use crate::journal::{JournaledAttempt, JournaledFailure, RunJournal};
use crate::tool::{ToolDef, ToolFuture, ToolOutput};

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

/// Why an attempt produced no output.
#[derive(Debug)]
pub(crate) enum Missed {
    /// The tool failed, or could not be called: the ladder answers it. Boxed: an attempt's
    /// output is moved out of each layer of a call, and a failure is the rare case that can
    /// pay for its allocation.
    Failed(Box<Failed>),
    /// A concurrent call of this run tripped the tool's per-run breaker after `failures`
    /// failures: the run is ending, so the tool is not called again.
    Tripped { failures: u32 },
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
    if cause.downcast_ref::<CallInterrupted>().is_some() {
        return Classification::new(ErrorKind::OutcomeUnknown, Evidence::Type("CallInterrupted"));
    }
    if let Some(saved) = cause.downcast_ref::<SavedFailure>() {
        return Classification::new(saved.kind, Evidence::Type("SavedFailure"));
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

/// Calls `tool` once with `raw` arguments.
///
/// Arguments are parsed before the service breaker is asked, so a call that never reaches the
/// service cannot take (and then strand) the half-open probe.
///
/// Not an `async fn`: what needs no waiting (the per-run breaker, parsing, making the tool's
/// future) happens here, and the future returned is the tool's run itself, not one more state
/// machine around it that every call would poll through.
pub(crate) fn attempt<'a>(
    ctx: &'a RunContext,
    tool: &'a ToolDef,
    raw: &'a str,
    extensions: &Extensions,
) -> impl Future<Output = Result<ToolOutput, Missed>> + 'a {
    let future = match start(ctx, tool, raw, extensions) {
        Ok(future) => future,
        Err(missed) => return Either::Left(ready(Err(missed))),
    };
    Either::Right(match ctx.journal() {
        // Boxed: an attempt without a journal must not carry this future's space.
        Some(journal) => Either::Left(Box::pin(journaled(journal, ctx, tool, raw, future))),
        None => Either::Right(run(ctx, tool, raw, future)),
    })
}

/// The tool's future for `raw`, unless the per-run breaker tripped, the arguments do not fit or
/// making the future panicked.
fn start(
    ctx: &RunContext,
    tool: &ToolDef,
    raw: &str,
    extensions: &Extensions,
) -> Result<ToolFuture, Missed> {
    // A retry or fallback still sleeping when a concurrent call tripped the breaker must not call.
    if let Some(failures) = ctx.learnt().breaker_tripped(tool.name()) {
        return Err(Missed::Tripped { failures });
    }
    // Every run of a tool body counts on the run's meter, whatever path asked for it; past a
    // cap the body does not run and the run ends (its loop reads the cap from the meter).
    if let Err(capped) = ctx.meter().tool_body(tool.name()) {
        ctx.halting().halt();
        return Err(Missed::Failed(ToolError::execution(raw, *capped).into()));
    }
    match std::panic::catch_unwind(AssertUnwindSafe(|| {
        tool.handler().call_with(raw, extensions)
    })) {
        Ok(Ok(future)) => Ok(future),
        Ok(Err(args_error)) => Err(Missed::Failed(args_error.into())),
        Err(payload) => Err(Missed::Failed(panicked(raw, payload).into())),
    }
}

/// The failure of a tool that panicked on `raw`.
fn panicked(raw: &str, payload: Box<dyn Any + Send>) -> ToolError {
    ToolError::execution(raw, ToolPanic::from_payload(payload))
}

/// Runs the tool's `future`, admitted by the service breaker and under its timeout, and
/// classifies a failure when the breaker needed it. A run without a breaker or a timeout awaits
/// the tool's future with nothing but the panic guard around it.
async fn run(
    ctx: &RunContext,
    tool: &ToolDef,
    raw: &str,
    future: ToolFuture,
) -> Result<ToolOutput, Missed> {
    let mut admitted = match ctx.hooks().service_breaker() {
        None => None,
        Some(breaker) => match admit(breaker, ctx.hooks().classifier(), tool, raw).await {
            Ok(admitted) => Some(admitted),
            Err(open) => return Err(Missed::Failed(open.into())),
        },
    };
    let caught = match tool.timeout().or(ctx.limits().default_tool_timeout) {
        None => AssertUnwindSafe(future).catch_unwind().await,
        Some(limit) => AssertUnwindSafe(tokio::time::timeout(limit, future))
            .catch_unwind()
            .await
            .map(|timed| timed.unwrap_or_else(|elapsed| Err(Box::new(elapsed) as BoxError))),
    };
    let result = match caught {
        Ok(Ok(output)) => Ok(output),
        Ok(Err(source)) => Err(ToolError::Execution {
            args: raw.into(),
            source,
        }),
        Err(payload) => Err(panicked(raw, payload)),
    };
    let class = admitted
        .as_mut()
        .and_then(|admitted| admitted.record(&result));
    result.map_err(|error| Missed::Failed(Box::new(Failed { error, class })))
}

/// Asks the run's service breaker to let this call through.
async fn admit<'a>(
    breaker: &'a ServiceBreaker,
    classifier: Option<&'a Classifier>,
    tool: &'a ToolDef,
    raw: &str,
) -> Result<Admitted<'a>, ToolError> {
    match breaker.admit(tool.breaker_key()).await {
        Admission::Rejected => {
            let open = CircuitOpen {
                tool: tool.name().to_owned(),
            };
            Err(ToolError::execution(raw, open))
        }
        admission => Ok(Admitted {
            breaker,
            classifier,
            key: tool.breaker_key(),
            probe: admission == Admission::Probe,
            recorded: false,
        }),
    }
}

/// A call the service breaker let through. A half-open probe that is dropped before its outcome
/// is recorded (the run was cancelled mid-call) gives the probe back, or the circuit would stay
/// open for good.
struct Admitted<'a> {
    breaker: &'a ServiceBreaker,
    classifier: Option<&'a Classifier>,
    key: &'a str,
    probe: bool,
    recorded: bool,
}

impl Admitted<'_> {
    /// Tells the breaker how the call went, and gives back the failure's classification for
    /// the ladder. Only failures that say the service is unwell (retryable kinds) count against
    /// it: a 404 is the caller's problem, not the service's.
    fn record(&mut self, result: &Result<ToolOutput, ToolError>) -> Option<Classification> {
        let class = result
            .as_ref()
            .err()
            .map(|e| classify_tool_error(e, self.classifier));
        let healthy = class.as_ref().is_none_or(|c| !c.kind.is_retryable());
        self.breaker.record(self.key, healthy);
        self.recorded = true;
        class
    }
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        if self.probe && !self.recorded {
            self.breaker.release_probe(self.key);
        }
    }
}

/// An attempt as a step of the run's journal: what it did (output, or failure with its
/// classification) is journaled as a value, so the engine never retries it on its own and a
/// replay hands the same outcome to the ladder without calling the tool again.
async fn journaled(
    journal: &RunJournal,
    ctx: &RunContext,
    tool: &ToolDef,
    raw: &str,
    future: ToolFuture,
) -> Result<ToolOutput, Missed> {
    let work = async {
        match run(ctx, tool, raw, future).await {
            Ok(output) => JournaledAttempt::Output(output),
            Err(Missed::Tripped { failures }) => JournaledAttempt::Tripped(failures),
            Err(Missed::Failed(failed)) => {
                let Failed { error, class } = *failed;
                let class =
                    class.unwrap_or_else(|| classify_tool_error(&error, ctx.hooks().classifier()));
                JournaledAttempt::Failed(JournaledFailure::new(&error.to_string(), &class))
            }
        }
    };
    let name = format!("tool:{}", tool.name());
    match journal.step(&name, work).await {
        Some(JournaledAttempt::Output(output)) => Ok(output),
        Some(JournaledAttempt::Tripped(failures)) => Err(Missed::Tripped { failures }),
        Some(JournaledAttempt::Failed(failure)) => {
            let (kind, message, class) = failure.into_parts();
            let error = ToolError::execution(raw, SavedFailure { kind, message });
            Err(Missed::Failed(Box::new(Failed {
                error,
                class: Some(class),
            })))
        }
        None => Err(Missed::Failed(
            ToolError::execution(raw, crate::executor::CallInterrupted).into(),
        )),
    }
}
