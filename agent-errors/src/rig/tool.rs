//! Any rig `Tool` as a tool of ours: [`ToolDef::from_rig`].

use std::fmt;
use std::sync::Arc;

use rig_core::tool::{
    IntoToolOutput, Tool, ToolContext, ToolContextError, ToolErrorKind, ToolExecutionError,
};

use super::key::{attempt_context, unguarded};
use crate::arguments::parse_args;
use crate::call::Extensions;
use crate::error::{BoxError, InvalidArguments, ToolError};
use crate::tool::{ToolDef, ToolFuture, ToolHandler};

impl ToolDef {
    /// A rig `Tool` as a tool of ours, unchanged: its name, description and argument schema
    /// come from the tool's own definition, and every policy of ours applies to it (per-tool,
    /// the agent's, the crate's `defaults!`, fixers, breakers, the permission gate, the run's
    /// retry budget) and shows in [`explain`](crate::Registry::explain).
    ///
    /// Its arguments are parsed as the tool's `Args` before it runs, so a call the model got
    /// wrong takes the `invalid_args` path (a fixer can repair it). A failure is the tool's
    /// `map_error` result, rig's `ToolExecutionError`, read by its `ToolErrorKind` (`rate_limited`
    /// is `quota`, `network` `transient`, `timeout` `timeout`, `permission_denied` `auth`,
    /// `not_found` `not_found`, `provider` `server_error`), its HTTP status when it names one,
    /// and its retryable flag (`false`, or a refusal, is never retried); an `invalid_args` one
    /// takes the `invalid_args` path. The model sees the tool's own model feedback, sanitized.
    ///
    /// Each attempt gets a fresh rig `ToolContext` holding the call's
    /// [`IdempotencyKey`](crate::call::IdempotencyKey) when the call has one (the agent loop
    /// gives every call one; a [`RunContext`](crate::RunContext) of your own, once it has a run
    /// id), read with `context.require::<IdempotencyKey>()` and the same on every attempt of the
    /// call: our retries, a fixer's repaired run, the fallback the call is handed to. Under a
    /// [`GuardedTool`](crate::rig::GuardedTool) in rig's own loop, it is the context rig built
    /// for the call (the values you gave rig's agent) with the key the guard made added.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::{Agent, ToolDef, policy::{Action, Policy, PolicyKey}};
    /// use agent_errors::testing::ScriptedModel;
    /// use rig_core::tool::{PortableTool, ToolExecutionError};
    ///
    /// /// A rig tool, as written for rig.
    /// struct Add;
    ///
    /// #[derive(serde::Deserialize)]
    /// struct AddArgs { x: i64, y: i64 }
    ///
    /// impl PortableTool for Add {
    ///     const NAME: &'static str = "add";
    ///     type Args = AddArgs;
    ///     type Output = i64;
    ///     type Error = ToolExecutionError;
    ///
    ///     fn description(&self) -> String { "Adds two numbers.".into() }
    ///     fn parameters(&self) -> serde_json::Value {
    ///         serde_json::json!({"type": "object", "properties": {
    ///             "x": {"type": "integer"}, "y": {"type": "integer"}}, "required": ["x", "y"]})
    ///     }
    ///     async fn call(&self, args: AddArgs) -> Result<i64, ToolExecutionError> {
    ///         Ok(args.x + args.y)
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let add = ToolDef::from_rig(Add).with_policy(Policy::new().on(PolicyKey::Execution, Action::retry(3)?));
    /// assert_eq!(add.name(), "add");
    ///
    /// let model = ScriptedModel::new().tool_call("add", r#"{"x": 2, "y": 3}"#).text("5");
    /// let agent = Agent::builder("calculator").model(model).tool(add).build()?;
    /// assert_eq!(agent.run("2 + 3?").await?, "5");
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// A rig tool with a side effect hands its call's key to the service, so a retried call
    /// is done once:
    ///
    /// ```
    /// use agent_errors::{Agent, RunOptions, ToolDef};
    /// use agent_errors::call::IdempotencyKey;
    /// use agent_errors::testing::ScriptedModel;
    /// use rig_core::tool::{Tool, ToolContext, ToolExecutionError};
    ///
    /// struct Charge;
    ///
    /// impl Tool for Charge {
    ///     const NAME: &'static str = "charge";
    ///     type Args = serde_json::Value;
    ///     type Output = String;
    ///     type Error = ToolExecutionError;
    ///
    ///     fn description(&self) -> String { "Charges the card.".into() }
    ///     fn parameters(&self) -> serde_json::Value { serde_json::json!({"type": "object"}) }
    ///     async fn call(
    ///         &self,
    ///         context: &mut ToolContext,
    ///         _: serde_json::Value,
    ///     ) -> Result<String, ToolExecutionError> {
    ///         let key = context.require::<IdempotencyKey>()?;
    ///         // A real tool sends `key.to_string()` as the payment API's idempotency key.
    ///         Ok(format!("charged with key {key}"))
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let model = ScriptedModel::new().tool_call("charge", "{}").text("done");
    /// let agent = Agent::builder("till").model(model).tool(ToolDef::from_rig(Charge)).build()?;
    /// let outcome = agent.run_with("charge it", RunOptions::new().run_id("run-7")).await;
    /// assert!(format!("{:?}", outcome.transcript[2]).contains("charged with key run-7:call_1"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn from_rig<T>(tool: T) -> ToolDef
    where
        T: Tool + 'static,
        T::Args: Send + 'static,
    {
        let description = tool.description();
        let parameters = tool.parameters();
        ToolDef::from_handler(
            T::NAME,
            description,
            parameters,
            RigToolHandler {
                tool: Arc::new(tool),
            },
        )
    }
}

/// Runs a rig tool for our executor.
struct RigToolHandler<T> {
    tool: Arc<T>,
}

impl<T: Tool> fmt::Debug for RigToolHandler<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RigToolHandler")
            .field("tool", &T::NAME)
            .finish()
    }
}

impl<T> ToolHandler for RigToolHandler<T>
where
    T: Tool + 'static,
    T::Args: Send + 'static,
{
    fn call(&self, raw_args: &str) -> Result<ToolFuture, ToolError> {
        self.call_with(raw_args, &Extensions::new())
    }

    fn call_with(&self, raw_args: &str, extensions: &Extensions) -> Result<ToolFuture, ToolError> {
        let args = parse_args::<T::Args>(raw_args)?;
        let (context, guarded) = attempt_context(extensions);
        let work = run(Arc::clone(&self.tool), context, args);
        if guarded {
            Ok(Box::pin(unguarded(work)))
        } else {
            Ok(Box::pin(work))
        }
    }
}

/// One attempt of a rig tool with the context it gets.
async fn run<T>(
    tool: Arc<T>,
    context: Result<ToolContext, ToolContextError>,
    args: T::Args,
) -> Result<String, BoxError>
where
    T: Tool + 'static,
    T::Args: Send + 'static,
{
    let mut context = context?;
    let output = match tool.call(&mut context, args).await {
        Ok(output) => output.into_tool_output(),
        Err(error) => Err(tool.map_error(error)),
    };
    match output {
        Ok(output) => Ok(output.render()),
        Err(error) => Err(failure(error)),
    }
}

/// A rig tool's failure as the executor reads it: arguments the tool refused go the
/// `invalid_args` way; anything else is classified from the `ToolExecutionError` below. Either
/// way its text is the tool's model feedback, not its operator message (which rig keeps from
/// the model: it may hold a source error's details).
fn failure(error: ToolExecutionError) -> BoxError {
    let feedback = crate::classify::rig::tool_feedback(&error);
    if error.kind() == ToolErrorKind::InvalidArgs {
        return Box::new(InvalidArguments::new(feedback).with_source(error));
    }
    Box::new(RigToolFailure { feedback, error })
}

/// A rig tool's failure, shown by its model feedback.
#[derive(Debug, thiserror::Error)]
#[error("{feedback}")]
struct RigToolFailure {
    feedback: String,
    #[source]
    error: ToolExecutionError,
}
