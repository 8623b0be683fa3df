//! One attempt at a tool: parse the arguments, ask the breakers, run the tool under its timeout,
//! and turn a panic into a failure. Every call, retry, repair and fallback goes through
//! [`attempt`], which takes nothing but a [`Cleared`]: the arguments the [gate](super::gate)
//! let through, for the tool it let them through to.

use std::any::Any;
use std::future::{Future, ready};
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use futures_util::future::Either;

use super::context::RunContext;
use super::failure::{CircuitOpen, Failed, ToolPanic, classify_tool_error};
use super::gate::Cleared;
use super::resume::SavedFailure;
use crate::breaker::{Admission, ServiceBreaker};
use crate::classify::{Classification, Classifier};
use crate::error::{BoxError, ToolError};
use crate::extensions::Extensions;
use crate::journal::{JournaledAttempt, JournaledFailure, RunJournal};
use crate::tool::{ToolDef, ToolFuture, ToolOutput};

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

/// Calls the cleared tool once with the cleared arguments.
///
/// Arguments are parsed before the service breaker is asked, so a call that never reaches the
/// service cannot take (and then strand) the half-open probe.
///
/// Not an `async fn`: what needs no waiting (the per-run breaker, parsing, making the tool's
/// future) happens here, and the future returned is the tool's run itself, not one more state
/// machine around it that every call would poll through.
pub(crate) fn attempt<'a>(
    ctx: &'a RunContext,
    cleared: &'a Cleared<'a>,
    extensions: &Extensions,
) -> impl Future<Output = Result<ToolOutput, Missed>> + 'a {
    let (tool, raw) = (cleared.tool(), cleared.arguments());
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
        // A body that reports a failure is one: the breaker and the ladder see it as such.
        Ok(Ok(output)) => match tool.output_check().map(|check| check.check(&output)) {
            Some(Err(rejected)) => Err(ToolError::execution(raw, rejected)),
            _ => Ok(output),
        },
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
