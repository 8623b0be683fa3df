//! The test kit: a scripted model, fault-injecting tools and report assertions, for testing
//! agents and their policies deterministically.
//!
//! Everything here waits only on tokio timers, so under `tokio::time::pause()` (or
//! `#[tokio::test(start_paused = true)]`) retries and backoff take no real time and sleeps can
//! be measured exactly with `tokio::time::Instant`.
//!
//! ```
//! use agent_errors::Agent;
//! use agent_errors::testing::{FaultyTool, ReportAssertions, ScriptedModel, echo_tool, transcript_violations};
//! use agent_errors::HttpError;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let model = ScriptedModel::new()
//!     .tool_call("echo", r#"{"text": "hi"}"#)
//!     .text("done");
//! let echo = FaultyTool::new(echo_tool("echo")).fail_times(1, || HttpError::new(404, "gone"));
//! let agent = Agent::builder("test").model(model.clone()).tool(echo.tool()).build()?;
//!
//! let outcome = agent.run_with_report("go").await;
//! assert_eq!(outcome.result?, "done");
//! assert_eq!(echo.calls(), 1);
//! assert_eq!(model.calls(), 2);
//! outcome.report.assert_turns(2).assert_tool_calls(1);
//! assert!(transcript_violations(&outcome.transcript).is_empty());
//! # Ok(())
//! # }
//! ```

mod assert;
mod faults;
mod model;

pub use assert::{ReportAssertions, TranscriptViolation, transcript_violations};
pub use faults::{Fault, FaultyTool, echo_tool};
pub use model::{Reply, ScriptExhausted, ScriptedModel};

use crate::ToolDef;
use crate::call::ToolHandler;

/// A tool's handler on its own, around the gate: for tests of how a handler parses its
/// arguments and for benchmarks that measure a handler without an executor.
///
/// A run never calls a tool this way: every call it makes passes the gate (availability,
/// repeated keys, the permission hook, a person's approval) and starts the body from what the
/// gate cleared. This goes around all of it, so it lives in the test kit only; never hand it a
/// model's arguments.
///
/// # Examples
///
/// ```
/// use agent_errors::testing::{echo_tool, handler_of};
///
/// let echo = echo_tool("echo");
/// assert!(handler_of(&echo).call("{not json").is_err());
/// ```
pub fn handler_of(tool: &ToolDef) -> &dyn ToolHandler {
    tool.handler()
}
