//! The key that names one tool call across retries, repairs and a resumed run, so a tool with
//! side effects can hand it downstream and the service can do the work once.

use std::fmt;
use std::sync::Arc;

/// A stable name for one tool call: the run's id and the call's id. Every attempt of the call
/// (its retries, a run again after a fixer repaired it, a run again after the durable run it
/// belongs to resumed in another process) sees the same key, so a tool that passes it on (an
/// `Idempotency-Key` header, a unique column) lets the service do the work once. A call the
/// ladder retries after a timeout or a 504 keeps its key on every attempt, and so does the
/// fallback it hands the call to.
///
/// The key names a call, not an effect: when the model, shown an error, asks for the same thing
/// again, that is a new call with a new id and so a new key. A tool whose effect must happen once
/// whatever the model does derives its own key from the arguments (an order number, a hash).
///
/// A tool asks for it like any per-run value, with a `Ctx<IdempotencyKey>` parameter; the
/// agent loop gives every call its key (a [`RunContext`](crate::RunContext) of your own gives
/// one once it has a [run id](crate::RunContext::with_run_id)).
///
/// # Examples
///
/// ```
/// use agent_errors::prelude::*;
/// use agent_errors::{Ctx, RunOptions, call::IdempotencyKey};
/// use agent_errors::testing::ScriptedModel;
///
/// /// Charges the card once, however often it is called for one call.
/// #[tool]
/// async fn charge(key: Ctx<IdempotencyKey>, cents: u64) -> String {
///     // A real tool sends `key.to_string()` as the payment API's idempotency key.
///     format!("charged {cents} with key {}", *key)
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let model = ScriptedModel::new().tool_call("charge", r#"{"cents": 250}"#).text("done");
/// let agent = Agent::builder("till").model(model).tools(tools![charge]).build()?;
/// let outcome = agent.run_with("charge 2.50", RunOptions::new().run_id("run-7")).await;
/// let result = &outcome.transcript[2];
/// assert!(format!("{result:?}").contains("charged 250 with key run-7:call_1"));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey {
    run_id: Arc<str>,
    call_id: Arc<str>,
}

impl IdempotencyKey {
    /// The key of call `call_id` of run `run_id`.
    pub fn new(run_id: impl Into<Arc<str>>, call_id: impl Into<Arc<str>>) -> Self {
        IdempotencyKey {
            run_id: run_id.into(),
            call_id: call_id.into(),
        }
    }

    /// The run's id.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The call's id, as the model gave it.
    pub fn call_id(&self) -> &str {
        &self.call_id
    }
}

/// `run_id:call_id`.
impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.run_id, self.call_id)
    }
}
