//! Tools that fail on purpose: wrap a tool, script its faults, count its calls.

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

use crate::error::{BoxError, ToolError};
use crate::extensions::Extensions;
use crate::tool::{ToolDef, ToolFuture, ToolHandler};

type ErrorFactory = Arc<dyn Fn() -> BoxError + Send + Sync>;

/// What one call of a [`FaultyTool`] does instead of (or before) running the real tool.
///
/// # Examples
///
/// A tool that is slow once, then crashes once, then works:
///
/// ```
/// use std::time::Duration;
/// use agent_errors::testing::{Fault, FaultyTool, echo_tool};
///
/// let plan = [
///     Fault::Delay(Duration::from_secs(5)),
///     Fault::Panic("index out of bounds".into()),
///     Fault::error(|| std::io::Error::other("reset")),
/// ];
/// for fault in &plan {
///     let what = match fault {
///         Fault::Error(_) => "fails".to_owned(),
///         Fault::Panic(message) => format!("panics: {message}"),
///         Fault::Delay(delay) => format!("runs after {delay:?}"),
///         Fault::Hang => "never answers".to_owned(),
///         _ => format!("{fault:?}"), // the enum is non-exhaustive
///     };
///     println!("next call {what}");
/// }
/// let tool = plan.into_iter().fold(FaultyTool::new(echo_tool("fetch")), FaultyTool::then);
/// # let _ = tool;
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub enum Fault {
    /// Fails with a fresh error from the factory.
    Error(ErrorFactory),
    /// Panics with this message (the executor catches it as a `Bug`).
    Panic(String),
    /// Sleeps this long, then runs the real tool.
    Delay(Duration),
    /// Never completes (until the call is cancelled or dropped).
    Hang,
}

impl Fault {
    /// Fails with a fresh error from `make`.
    pub fn error<E: Into<BoxError>>(make: impl Fn() -> E + Send + Sync + 'static) -> Self {
        Fault::Error(Arc::new(move || make().into()))
    }
}

impl fmt::Debug for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // Not `make()`: a factory may count its calls.
            Fault::Error(_) => f.write_str("Error(<factory>)"),
            Fault::Panic(msg) => f.debug_tuple("Panic").field(msg).finish(),
            Fault::Delay(d) => f.debug_tuple("Delay").field(d).finish(),
            Fault::Hang => f.write_str("Hang"),
        }
    }
}

#[derive(Default)]
struct Plan {
    queued: VecDeque<Fault>,
    forever: Option<Fault>,
}

struct State {
    plan: Mutex<Plan>,
    calls: AtomicU32,
}

/// Wraps a tool so that its next calls fail as scripted, then behave normally; counts the calls
/// that ran (arguments that do not parse never reach the tool, so they are not counted and use
/// up no fault).
///
/// # Examples
///
/// ```
/// use agent_errors::HttpError;
/// use agent_errors::testing::{FaultyTool, echo_tool};
///
/// let flaky = FaultyTool::new(echo_tool("fetch")).fail_times(2, || HttpError::new(503, "busy"));
/// let tool = flaky.tool(); // register this one
/// assert_eq!(tool.name(), "fetch");
/// assert_eq!(flaky.calls(), 0);
/// ```
#[derive(Clone)]
pub struct FaultyTool {
    tool: ToolDef,
    state: Arc<State>,
}

impl fmt::Debug for FaultyTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultyTool")
            .field("tool", &self.tool.name())
            .field("calls", &self.calls())
            .finish_non_exhaustive()
    }
}

struct FaultyHandler {
    inner: ToolDef,
    state: Arc<State>,
}

impl ToolHandler for FaultyHandler {
    fn call(&self, raw_args: &str) -> Result<ToolFuture, ToolError> {
        self.call_with(raw_args, &Extensions::new())
    }

    // The wrapped tool gets the run's values (its `Ctx` parameters, the call's idempotency key)
    // as it would unwrapped.
    fn call_with(&self, raw_args: &str, extensions: &Extensions) -> Result<ToolFuture, ToolError> {
        let real = self.inner.handler().call_with(raw_args, extensions)?;
        let state = Arc::clone(&self.state);
        // Counted and planned when polled, like real work: a call the executor drops unpolled
        // (an open circuit) never happened.
        Ok(Box::pin(async move {
            state.calls.fetch_add(1, Ordering::SeqCst);
            let fault = {
                let mut plan = state.plan.lock().unwrap_or_else(|p| p.into_inner());
                plan.queued.pop_front().or_else(|| plan.forever.clone())
            };
            match fault {
                None => real.await,
                Some(Fault::Error(make)) => Err(make()),
                Some(Fault::Panic(message)) => panic!("{message}"),
                Some(Fault::Delay(delay)) => {
                    tokio::time::sleep(delay).await;
                    real.await
                }
                Some(Fault::Hang) => std::future::pending().await,
            }
        }))
    }
}

impl FaultyTool {
    /// Wraps `tool`: the same tool in every respect (name, description, schema, policy,
    /// optionality, timeout) but for the faults it is told to inject.
    pub fn new(tool: ToolDef) -> Self {
        let state = Arc::new(State {
            plan: Mutex::new(Plan::default()),
            calls: AtomicU32::new(0),
        });
        let wrapped = tool.clone().with_handler(FaultyHandler {
            inner: tool,
            state: Arc::clone(&state),
        });
        FaultyTool {
            tool: wrapped,
            state,
        }
    }

    /// Queues a fault for the next call not yet scripted.
    #[must_use]
    pub fn then(self, fault: Fault) -> Self {
        self.state
            .plan
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .queued
            .push_back(fault);
        self
    }

    /// The next `n` calls fail with a fresh error from `make`.
    #[must_use]
    pub fn fail_times<E: Into<BoxError>>(
        self,
        n: u32,
        make: impl Fn() -> E + Send + Sync + 'static,
    ) -> Self {
        let fault = Fault::error(make);
        (0..n).fold(self, |tool, _| tool.then(fault.clone()))
    }

    /// The next `n` calls panic.
    #[must_use]
    pub fn panic_times(self, n: u32, message: &str) -> Self {
        (0..n).fold(self, |tool, _| tool.then(Fault::Panic(message.to_owned())))
    }

    /// The next `n` calls never complete.
    #[must_use]
    pub fn hang_times(self, n: u32) -> Self {
        (0..n).fold(self, |tool, _| tool.then(Fault::Hang))
    }

    /// Every call after the scripted faults fails with `fault` too.
    #[must_use]
    pub fn then_always(self, fault: Fault) -> Self {
        self.state
            .plan
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .forever = Some(fault);
        self
    }

    /// The tool to register.
    pub fn tool(&self) -> ToolDef {
        self.tool.clone()
    }

    /// Calls that reached the tool (faulty or not).
    pub fn calls(&self) -> u32 {
        self.state.calls.load(Ordering::SeqCst)
    }
}

#[derive(Deserialize, JsonSchema)]
struct EchoArgs {
    /// What to say back.
    text: String,
}

/// A tool that answers its `text` argument: `{"text": "hi"}` gives `hi`. Handy to wrap in a
/// [`FaultyTool`].
///
/// # Examples
///
/// ```
/// use agent_errors::testing::echo_tool;
///
/// let echo = echo_tool("say");
/// assert_eq!(echo.name(), "say");
/// assert_eq!(echo.parameters()["required"][0], "text");
/// ```
pub fn echo_tool(name: impl Into<String>) -> ToolDef {
    ToolDef::new(
        name.into(),
        "Says back the text it is given.",
        |args: EchoArgs| async move { Ok::<_, std::convert::Infallible>(args.text) },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn fails_as_scripted_then_runs_the_tool() {
        let flaky = FaultyTool::new(echo_tool("e")).fail_times(2, || std::io::Error::other("boom"));
        let tool = flaky.tool();
        for _ in 0..2 {
            let err = tool
                .handler()
                .call(r#"{"text":"x"}"#)
                .unwrap()
                .await
                .unwrap_err();
            assert!(err.downcast_ref::<std::io::Error>().is_some());
        }
        let ok = tool
            .handler()
            .call(r#"{"text":"x"}"#)
            .unwrap()
            .await
            .unwrap();
        assert_eq!(ok, "x");
        assert_eq!(flaky.calls(), 3);
    }

    #[tokio::test]
    async fn bad_arguments_neither_count_nor_use_up_a_fault() {
        let flaky = FaultyTool::new(echo_tool("e")).fail_times(1, || std::io::Error::other("boom"));
        let tool = flaky.tool();
        assert!(tool.handler().call("{not json").is_err());
        assert_eq!(flaky.calls(), 0);
        assert!(
            tool.handler()
                .call(r#"{"text":"x"}"#)
                .unwrap()
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn the_wrapped_tool_gets_the_runs_values() {
        struct NeedsKey;
        impl ToolHandler for NeedsKey {
            fn call(&self, _: &str) -> Result<ToolFuture, ToolError> {
                Ok(Box::pin(async { Err("no key".into()) }))
            }
            fn call_with(&self, _: &str, ext: &Extensions) -> Result<ToolFuture, ToolError> {
                let key = ext.get::<String>().cloned();
                Ok(Box::pin(async move { key.ok_or_else(|| "no key".into()) }))
            }
        }
        let tool = ToolDef::from_handler("k", "Reads a key.", serde_json::json!({}), NeedsKey);
        let flaky = FaultyTool::new(tool);
        let mut extensions = Extensions::new();
        extensions.insert(String::from("run-1:call_1"));
        let output = flaky
            .tool()
            .handler()
            .call_with("{}", &extensions)
            .unwrap()
            .await
            .unwrap();
        assert_eq!(output, "run-1:call_1");
        assert_eq!(flaky.calls(), 1);
    }

    #[tokio::test]
    async fn then_always_keeps_failing() {
        let flaky = FaultyTool::new(echo_tool("e"))
            .then_always(Fault::error(|| std::io::Error::other("down")));
        for _ in 0..5 {
            assert!(
                flaky
                    .tool()
                    .handler()
                    .call(r#"{"text":"x"}"#)
                    .unwrap()
                    .await
                    .is_err()
            );
        }
        assert_eq!(flaky.calls(), 5);
    }
}
