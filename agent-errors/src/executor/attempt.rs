//! One attempt at a tool: parse the arguments, ask the breakers, run the tool under its timeout,
//! and turn a panic into a failure. Every call, retry, repair and fallback goes through
//! [`attempt`], which takes nothing but a [`Cleared`]: the arguments the [gate](super::gate)
//! let through, for the tool it let them through to.

use std::any::Any;
use std::future::{Future, ready};
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::Either;
use serde::{Deserialize, Serialize};

use super::context::RunContext;
use super::failure::{CircuitOpen, Failed, ToolPanic, classify_tool_error};
use super::gate::Cleared;
use super::resume::{CallInterrupted, SavedFailure};
use crate::breaker::{Admission, ServiceBreaker};
use crate::classify::{Classification, Classifier, ErrorKind, Evidence};
use crate::error::{BoxError, ToolError};
use crate::extensions::Extensions;
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
    // What the attempt did (output, or failure with its classification) is kept as a value,
    // so an engine never retries it on its own and a replay hands the same outcome to the
    // ladder without calling the tool again.
    let keep = move |attempt| KeptAttempt::of(attempt, ctx);
    let read = move |kept: KeptAttempt| kept.into_attempt(raw);
    // A step its journal could not keep: whether the tool took effect is unknown.
    let lost = move || {
        Err(Missed::Failed(
            ToolError::execution(raw, CallInterrupted).into(),
        ))
    };
    Either::Right(ctx.journal().run_step(
        || format!("tool:{}", tool.name()),
        || run(ctx, tool, raw, future),
        (keep, read),
        lost,
    ))
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
        Ok(Err(args_error)) => {
            // The count is made before the handler, so that no body can start past a cap; a
            // handler that refused the arguments started none, and its count is taken back.
            ctx.meter().not_started(tool.name());
            Err(Missed::Failed(args_error.into()))
        }
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
        Ok(Ok(output)) => checked(tool, raw, output),
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

/// `output` as the tool's output check sees it: a rejection is a failure of the check's kind,
/// and a check that panics is a bug, as a tool body that panics is.
fn checked(tool: &ToolDef, raw: &str, output: ToolOutput) -> Result<ToolOutput, ToolError> {
    let Some(check) = tool.output_check() else {
        return Ok(output);
    };
    match std::panic::catch_unwind(AssertUnwindSafe(|| check.check(&output))) {
        Ok(Ok(())) => Ok(output),
        Ok(Err(rejected)) => Err(ToolError::execution(raw, rejected)),
        Err(payload) => Err(panicked(raw, payload)),
    }
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

/// A tool attempt's outcome as a journal that replays the run keeps it: the output, or the
/// failure's words and everything its classification said (the error itself cannot be kept). So
/// the engine never retries an attempt on its own, and a replay hands the same outcome to the
/// ladder without calling the tool again.
#[derive(Debug, Serialize, Deserialize)]
enum KeptAttempt {
    Output(ToolOutput),
    Failed(KeptFailure),
    /// The per-run breaker had tripped after this many failures: the tool was not called.
    Tripped(u32),
}

/// A failure as the journal keeps it.
#[derive(Debug, Serialize, Deserialize)]
struct KeptFailure {
    kind: ErrorKind,
    /// The failure's words, redacted: the journal is stored outside the process.
    message: String,
    retry_after_ms: Option<u64>,
    should_retry: Option<bool>,
    status: Option<u16>,
}

impl KeptAttempt {
    fn of(attempt: Result<ToolOutput, Missed>, ctx: &RunContext) -> KeptAttempt {
        let failed = match attempt {
            Ok(output) => return KeptAttempt::Output(output),
            Err(Missed::Tripped { failures }) => return KeptAttempt::Tripped(failures),
            Err(Missed::Failed(failed)) => *failed,
        };
        let Failed { error, class } = failed;
        let class = class.unwrap_or_else(|| classify_tool_error(&error, ctx.hooks().classifier()));
        KeptAttempt::Failed(KeptFailure {
            kind: class.kind,
            message: crate::redact::redact(&error.to_string()).into_owned(),
            retry_after_ms: class
                .retry_after
                .map(|delay| u64::try_from(delay.as_millis()).unwrap_or(u64::MAX)),
            should_retry: class.should_retry,
            status: class.status,
        })
    }

    /// The attempt as the ladder reads it, on the arguments `raw`.
    fn into_attempt(self, raw: &str) -> Result<ToolOutput, Missed> {
        let failure = match self {
            KeptAttempt::Output(output) => return Ok(output),
            KeptAttempt::Tripped(failures) => return Err(Missed::Tripped { failures }),
            KeptAttempt::Failed(failure) => failure,
        };
        let mut class = Classification::new(failure.kind, Evidence::Type("Journaled"));
        class.retry_after = failure.retry_after_ms.map(Duration::from_millis);
        class.should_retry = failure.should_retry;
        class.status = failure.status;
        let saved = SavedFailure {
            kind: failure.kind,
            message: failure.message,
        };
        let error = ToolError::execution(raw, saved);
        Err(Missed::Failed(Box::new(Failed {
            error,
            class: Some(class),
        })))
    }
}
