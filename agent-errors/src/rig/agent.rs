//! Our policies inside rig's own agent loop, one typed rig tool at a time: [`GuardedTool`], a rig
//! `Tool` that runs each call through a [`Registry`].

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use rig_core::tool::{Tool, ToolContext, ToolExecutionError, ToolOutput};

use super::guard::{Core, StopHook};
use crate::executor::RunContext;
use crate::registry::Registry;

/// Why a [`GuardedTool`] could not be made.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use agent_errors::{Registry, RunContext};
/// use agent_errors::rig::{GuardError, GuardedTool};
/// # use rig_core::tool::{PortableTool, ToolExecutionError};
/// # struct Ping;
/// # impl PortableTool for Ping {
/// #     const NAME: &'static str = "ping";
/// #     type Args = serde_json::Value;
/// #     type Output = String;
/// #     type Error = ToolExecutionError;
/// #     fn description(&self) -> String { "Pings.".into() }
/// #     fn parameters(&self) -> serde_json::Value { serde_json::json!({"type": "object"}) }
/// #     async fn call(&self, _: serde_json::Value) -> Result<String, ToolExecutionError> { Ok("pong".into()) }
/// # }
///
/// let empty = Arc::new(Registry::builder().build().unwrap());
/// match GuardedTool::<Ping>::new(empty, Arc::new(RunContext::new())) {
///     Err(GuardError::UnknownTool(name)) => assert_eq!(name, "ping"),
///     Err(other) => panic!("{other}"),
///     Ok(_) => unreachable!("the registry is empty"),
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GuardError {
    /// No tool of this name is registered.
    #[error("the registry has no tool named `{0}`: register `ToolDef::from_rig(tool)` first")]
    UnknownTool(&'static str),
}

/// The rig tool `T`, run through our policies inside rig's own agent loop (`rig_agent`).
///
/// It is itself a rig `Tool` (same name, description and schema as `T`), so rig's agent offers
/// and dispatches it as it would `T`; each call goes to `registry.execute`, where the tool
/// (registered with [`ToolDef::from_rig`](crate::ToolDef::from_rig)) runs under its resolved
/// policy: retries and backoff, fixers repairing its arguments, fallbacks, degrade, escalate,
/// per-run and service breakers, the permission gate and the retry budget, all kept in one
/// [`RunContext`] shared by every guarded tool made from it. The model sees our sanitized
/// result; a failure that is still a failure reaches rig as an error result (kind `other`, our
/// surfaced text as its model feedback).
///
/// A failure that must end the run (an `auth` failure, an escalation, a tripped breaker, a call
/// waiting for a person) cannot end rig's loop from inside a tool: the tool answers "cancelled",
/// and the [`StopHook`] made by [`GuardedTool::stop_hook`] ends rig's run on that result. Add
/// that hook to the agent, and make the agent's other guarded tools with
/// [`sibling`](GuardedTool::sibling); or let [`RigGuard`](super::RigGuard) guard every tool of a
/// registry and add its hook for you. Without the hook, a guarded tool refuses every call after
/// its run was told to end, with an error that names the missing hook.
///
/// The wrapped rig tool is called with the `ToolContext` rig built for the call (the values
/// given to rig's agent), copied afresh for each attempt, and holding the call's
/// [`IdempotencyKey`](crate::call::IdempotencyKey): `context.require::<IdempotencyKey>()`, the same on every attempt of the
/// call (our retries, a fixer's repaired run, a fallback) and another for every other call.
/// Its run id is `ctx`'s [run id](RunContext::with_run_id); a `ctx` without one gets one made
/// when the guarded tool is (`run-` and 128 random bits, as the agent loop makes one for a run
/// given none), shared by its clones and [siblings](GuardedTool::sibling). Under `ctx`'s run
/// id, its call id is `rig-effect-` and the id of rig's dispatch of the call (what rig's hooks,
/// recorder and replayer name it by, numbered from 1 again in every agent built); under a run
/// id made here, for a call that did not come through rig's bus, or for a call whose rig id
/// an earlier call through this guard already had (a second agent built around the guard,
/// with its own count from 1), `rig-call-` and a count shared by the guard's clones and
/// siblings, so agents built around one guard never share a key. Only the first agent's keys
/// follow rig's ids, which a replay of that agent's run in another process finds again: give
/// each rig agent a `ctx` of its own run id (and each new start of a task whose effects a
/// service must not confuse with the last start's), and a second agent on one id is logged as
/// a warning.
///
/// # Examples
///
/// A rig agent whose tool fails once on a broken connection: our policy retries it inside
/// rig's loop, and rig's model sees only the answer.
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use agent_errors::{Registry, RunContext, ToolDef, policy::{Action, Policy, PolicyKey}};
/// use agent_errors::rig::GuardedTool;
/// use rig_core::test_utils::{MockCompletionModel, MockTurn};
/// use rig_core::tool::{PortableTool, ToolErrorKind, ToolExecutionError};
///
/// static CALLS: AtomicU32 = AtomicU32::new(0);
///
/// struct Ping;
///
/// impl PortableTool for Ping {
///     const NAME: &'static str = "ping";
///     type Args = serde_json::Value;
///     type Output = String;
///     type Error = ToolExecutionError;
///     fn description(&self) -> String { "Pings.".into() }
///     fn parameters(&self) -> serde_json::Value { serde_json::json!({"type": "object"}) }
///     async fn call(&self, _: serde_json::Value) -> Result<String, ToolExecutionError> {
///         if CALLS.fetch_add(1, Ordering::SeqCst) == 0 {
///             return Err(ToolExecutionError::new(ToolErrorKind::Network, "connection reset"));
///         }
///         Ok("pong".into())
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let ping = ToolDef::from_rig(Ping).with_policy(Policy::new().on(PolicyKey::Execution, Action::retry(3)?));
/// let registry = Arc::new(Registry::builder().tool(ping).build()?);
/// let guarded = GuardedTool::<Ping>::new(registry, Arc::new(RunContext::new()))?;
///
/// // Any rig model: `openai::Client::from_env()?.completion_model("gpt-4o")` and the like.
/// let model = MockCompletionModel::from_turns([
///     MockTurn::tool_call("call-1", "ping", serde_json::json!({})),
///     MockTurn::text("the server answered pong"),
/// ]);
/// let agent = rig_agent::AgentBuilder::new(model)
///     .default_max_turns(3)
///     .tool(guarded.clone())
///     .add_hook(guarded.stop_hook())
///     .build();
/// assert_eq!(agent.prompt("ping the server").await?.output(), "the server answered pong");
/// assert_eq!(CALLS.load(Ordering::SeqCst), 2, "failed once, retried once");
/// # Ok(())
/// # }
/// ```
///
/// A rig tool with a side effect reads its call's key from its `ToolContext`:
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use agent_errors::{Registry, RunContext, ToolDef};
/// use agent_errors::call::IdempotencyKey;
/// use agent_errors::rig::GuardedTool;
/// use rig_core::test_utils::{MockCompletionModel, MockTurn};
/// use rig_core::tool::{Tool, ToolContext, ToolExecutionError};
///
/// static SENT: Mutex<Vec<String>> = Mutex::new(Vec::new());
///
/// struct Refund;
///
/// impl Tool for Refund {
///     const NAME: &'static str = "refund";
///     type Args = serde_json::Value;
///     type Output = String;
///     type Error = ToolExecutionError;
///     fn description(&self) -> String { "Refunds an order.".into() }
///     fn parameters(&self) -> serde_json::Value { serde_json::json!({"type": "object"}) }
///     async fn call(
///         &self,
///         context: &mut ToolContext,
///         _: serde_json::Value,
///     ) -> Result<String, ToolExecutionError> {
///         let key = context.require::<IdempotencyKey>()?;
///         // A real tool sends it as the payment API's idempotency key.
///         SENT.lock().unwrap().push(key.to_string());
///         Ok("refunded".into())
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let registry = Arc::new(Registry::builder().tool(ToolDef::from_rig(Refund)).build()?);
/// let run = Arc::new(RunContext::new().with_run_id("run-7"));
/// let guarded = GuardedTool::<Refund>::new(registry, run)?;
/// let model = MockCompletionModel::from_turns([
///     MockTurn::tool_call("call-1", "refund", serde_json::json!({})),
///     MockTurn::text("refunded"),
/// ]);
/// let agent = rig_agent::AgentBuilder::new(model)
///     .default_max_turns(3)
///     .tool(guarded.clone())
///     .add_hook(guarded.stop_hook())
///     .build();
/// agent.prompt("refund order 7").await?;
/// assert!(SENT.lock().unwrap()[0].starts_with("run-7:rig-effect-"));
/// # Ok(())
/// # }
/// ```
pub struct GuardedTool<T> {
    core: Core,
    description: String,
    parameters: serde_json::Value,
    tool: PhantomData<fn() -> T>,
}

impl<T> Clone for GuardedTool<T> {
    fn clone(&self) -> Self {
        GuardedTool {
            core: self.core.clone(),
            description: self.description.clone(),
            parameters: self.parameters.clone(),
            tool: PhantomData,
        }
    }
}

impl<T: Tool> fmt::Debug for GuardedTool<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GuardedTool")
            .field("tool", &T::NAME)
            .finish_non_exhaustive()
    }
}

impl<T: Tool> GuardedTool<T> {
    /// `T`, as registered in `registry`, guarded in the run `ctx`. Fails when the registry has
    /// no tool named `T::NAME`. Its calls' keys start with `ctx`'s run id, or with one made
    /// now when `ctx` has none.
    pub fn new(registry: Arc<Registry>, ctx: Arc<RunContext>) -> Result<Self, GuardError> {
        GuardedTool::with_core(Core::new(registry, ctx))
    }

    pub(super) fn with_core(core: Core) -> Result<Self, GuardError> {
        let def = core
            .registry
            .tool(T::NAME)
            .ok_or(GuardError::UnknownTool(T::NAME))?;
        let (description, parameters) = (def.description().to_owned(), def.parameters().clone());
        Ok(GuardedTool {
            core,
            description,
            parameters,
            tool: PhantomData,
        })
    }

    /// The same registry, run and hook, guarding another of its tools: the tools of one rig
    /// agent share breakers, budget and the [`StopHook`].
    pub fn sibling<U: Tool>(&self) -> Result<GuardedTool<U>, GuardError> {
        GuardedTool::with_core(self.core.clone())
    }

    /// The hook that ends rig's run on the result of a guarded call of this tool or its
    /// siblings that must end it.
    pub fn stop_hook(&self) -> StopHook {
        self.core.hook()
    }

    /// Why a guarded call of this tool or its siblings (or their hook) last ended its run, if
    /// one did, typed ([`RigStop`](super::RigStop)); its `Display` is the reason rig's error
    /// gives. A stop belongs to its run: the agent's next prompt starts clean.
    pub fn stopped(&self) -> Option<super::RigStop> {
        self.core.last_stop()
    }
}

impl<T: Tool> Tool for GuardedTool<T> {
    const NAME: &'static str = T::NAME;
    // The raw arguments: our gate parses them, so a fixer can repair what `T::Args` refuses.
    type Args = serde_json::Value;
    type Output = ToolOutput;
    type Error = ToolExecutionError;

    fn description(&self) -> String {
        self.description.clone()
    }

    fn parameters(&self) -> serde_json::Value {
        self.parameters.clone()
    }

    async fn call(
        &self,
        context: &mut ToolContext,
        arguments: serde_json::Value,
    ) -> Result<ToolOutput, ToolExecutionError> {
        self.core.call(T::NAME, context, arguments).await
    }
}
