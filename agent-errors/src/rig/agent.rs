//! Our policies inside rig's own agent loop: [`GuardedTool`], a rig `Tool` that runs each call
//! through a [`Registry`], and [`StopHook`], which ends rig's run when one of them must.

use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rig_agent::agent::hook::{AgentHook, CompletionCallAction, CompletionCallEvent, HookContext};
use rig_core::tool::{Tool, ToolContext, ToolExecutionError, ToolOutput};

use super::key::{GuardedCall, guarding, rig_call_id};
use crate::chat::ToolCall;
use crate::executor::{CallOutcome, RunContext};
use crate::idempotency::IdempotencyKey;
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

/// Why a guarded tool ended the run, shared by the tools of one run and its [`StopHook`].
#[derive(Debug, Clone, Default)]
struct RunStop(Arc<Mutex<Option<String>>>);

impl RunStop {
    fn set(&self, reason: String) {
        let mut stop = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        stop.get_or_insert(reason);
    }

    fn get(&self) -> Option<String> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
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
/// A failure that must end the run (an `auth` failure, an escalation, a tripped breaker) cannot
/// end rig's loop from inside a tool: the tool answers "cancelled", and the [`StopHook`] made by
/// [`GuardedTool::stop_hook`] stops rig's run before its next model call. Add that hook to the
/// agent.
///
/// The wrapped rig tool is called with the `ToolContext` rig built for the call (the values
/// given to rig's agent), copied afresh for each attempt, and holding the call's
/// [`IdempotencyKey`]: `context.require::<IdempotencyKey>()`, the same on every attempt of the
/// call (our retries, a fixer's repaired run, a fallback) and another for every other call.
/// Its run id is `ctx`'s [run id](RunContext::with_run_id); a `ctx` without one gets one made
/// when the guarded tool is (`run-` and 128 random bits, as the agent loop makes one for a run
/// given none), shared by its clones and [siblings](GuardedTool::sibling). Under `ctx`'s run
/// id, its call id is `rig-effect-` and the id of rig's dispatch of the call (what rig's hooks,
/// recorder and replayer name it by, numbered from 1 again in every agent built); under a run
/// id made here, or for a call that did not come through rig's bus, `rig-call-` and a count
/// shared by the guard's clones and siblings, so agents built around one guard never share a
/// key. Keys name calls within the run id, so give a `ctx` of its own id to each rig agent, and
/// to each new start of a task whose effects a service must not confuse with the last start's.
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
    registry: Arc<Registry>,
    ctx: Arc<RunContext>,
    /// The run id of the guarded calls' keys: `ctx`'s, or one made for it.
    run_id: Arc<str>,
    description: String,
    parameters: serde_json::Value,
    next_call: Arc<AtomicU64>,
    stop: RunStop,
    tool: PhantomData<fn() -> T>,
}

impl<T> Clone for GuardedTool<T> {
    fn clone(&self) -> Self {
        GuardedTool {
            registry: Arc::clone(&self.registry),
            ctx: Arc::clone(&self.ctx),
            run_id: Arc::clone(&self.run_id),
            description: self.description.clone(),
            parameters: self.parameters.clone(),
            next_call: Arc::clone(&self.next_call),
            stop: self.stop.clone(),
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
        let def = registry
            .tool(T::NAME)
            .ok_or(GuardError::UnknownTool(T::NAME))?;
        let (description, parameters) = (def.description().to_owned(), def.parameters().clone());
        let run_id = ctx
            .run_id()
            .map_or_else(|| crate::agent::new_run_id().into(), Arc::from);
        Ok(GuardedTool {
            registry,
            ctx,
            run_id,
            description,
            parameters,
            next_call: Arc::new(AtomicU64::new(1)),
            stop: RunStop::default(),
            tool: PhantomData,
        })
    }

    /// The same registry and run, guarding another of its tools: the tools of one rig agent
    /// share breakers, budget and the [`StopHook`].
    pub fn sibling<U: Tool>(&self) -> Result<GuardedTool<U>, GuardError> {
        let mut sibling = GuardedTool::<U>::new(Arc::clone(&self.registry), Arc::clone(&self.ctx))?;
        sibling.next_call = Arc::clone(&self.next_call);
        sibling.run_id = Arc::clone(&self.run_id);
        sibling.stop = self.stop.clone();
        Ok(sibling)
    }

    /// The hook that stops rig's run before its next model call once a guarded tool of this
    /// run ended it.
    pub fn stop_hook(&self) -> StopHook {
        StopHook {
            stop: self.stop.clone(),
        }
    }

    /// Why a guarded tool of this run ended it, if one did.
    pub fn stopped(&self) -> Option<String> {
        self.stop.get()
    }

    async fn run(
        &self,
        context: &ToolContext,
        arguments: serde_json::Value,
    ) -> Result<ToolOutput, ToolExecutionError> {
        // rig numbers a call by its agent's bus, from 1 again in every agent built: a name
        // only within a run id the user gives each agent. A run id made here is shared by every
        // agent built around this guard and its clones, so their calls are counted instead.
        let rig_id = self.ctx.run_id().and_then(|_| rig_call_id(context));
        let id = rig_id.unwrap_or_else(|| {
            format!(
                "rig-call-{}",
                self.next_call.fetch_add(1, Ordering::Relaxed)
            )
        });
        let guarded = GuardedCall {
            context: context.for_dispatch(),
            key: IdempotencyKey::new(Arc::clone(&self.run_id), id.as_str()),
        };
        let call = ToolCall::new(id, T::NAME, arguments.to_string());
        let outcome = match rig_tool_span() {
            Some(span) => {
                let work = self.registry.execute_in_span(&self.ctx, &call, span);
                guarding(guarded, work).await
            }
            None => guarding(guarded, self.registry.execute(&self.ctx, &call)).await,
        };
        match outcome {
            CallOutcome::Result(result) if result.is_error => {
                Err(ToolExecutionError::other(result.content).with_retryable(false))
            }
            CallOutcome::Result(result) => Ok(ToolOutput::text(result.content)),
            CallOutcome::Stop(terminated) => {
                let reason = format!("`{}` ended the run: {}", terminated.tool, terminated.kind);
                self.stop.set(reason);
                Err(ToolExecutionError::cancelled(terminated.user_message).with_retryable(false))
            }
        }
    }
}

/// The `execute_tool` span rig's loop opened for the call being run, if it is in one: the call's
/// recovery is traced there, one span per call under rig's call id, rather than in a second
/// span of ours nested in it under another id.
fn rig_tool_span() -> Option<tracing::Span> {
    let current = tracing::Span::current();
    let named = current.metadata().map(|meta| meta.name());
    (named == Some("execute_tool")).then_some(current)
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
        self.run(context, arguments).await
    }
}

/// A rig `AgentHook` that stops rig's run before its next model call once a [`GuardedTool`]
/// of the run ended it (rig's loop cannot be ended from inside a tool). Made by
/// [`GuardedTool::stop_hook`].
///
/// # Examples
///
/// A tool whose credentials are refused ends the run: rig's model is not asked again.
///
/// ```
/// use std::sync::Arc;
/// use agent_errors::{Registry, RunContext, ToolDef};
/// use agent_errors::rig::{GuardedTool, StopHook};
/// use rig_core::test_utils::{MockCompletionModel, MockTurn};
/// use rig_core::tool::{PortableTool, ToolErrorKind, ToolExecutionError};
///
/// struct Billing;
///
/// impl PortableTool for Billing {
///     const NAME: &'static str = "billing";
///     type Args = serde_json::Value;
///     type Output = String;
///     type Error = ToolExecutionError;
///     fn description(&self) -> String { "Reads an invoice.".into() }
///     fn parameters(&self) -> serde_json::Value { serde_json::json!({"type": "object"}) }
///     async fn call(&self, _: serde_json::Value) -> Result<String, ToolExecutionError> {
///         Err(ToolExecutionError::new(ToolErrorKind::PermissionDenied, "API key revoked"))
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let registry = Arc::new(Registry::builder().tool(ToolDef::from_rig(Billing)).build()?);
/// let guarded = GuardedTool::<Billing>::new(registry, Arc::new(RunContext::new()))?;
/// let stop: StopHook = guarded.stop_hook();
///
/// let model = MockCompletionModel::from_turns([
///     MockTurn::tool_call("call-1", "billing", serde_json::json!({})),
///     MockTurn::text("never asked"),
/// ]);
/// let agent = rig_agent::AgentBuilder::new(model.clone())
///     .default_max_turns(3)
///     .tool(guarded.clone())
///     .add_hook(stop)
///     .build();
/// assert!(agent.prompt("what do we owe?").await.is_err());
/// assert_eq!(model.request_count(), 1, "no model call after the tool ended the run");
/// assert!(guarded.stopped().is_some_and(|why| why.contains("billing")));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct StopHook {
    stop: RunStop,
}

impl AgentHook for StopHook {
    fn name(&self) -> Option<String> {
        Some("agent_errors::StopHook".to_owned())
    }

    async fn on_completion_call(
        &self,
        _ctx: &HookContext,
        _event: CompletionCallEvent<'_>,
    ) -> CompletionCallAction {
        match self.stop.get() {
            Some(reason) => CompletionCallAction::Stop(reason),
            None => CompletionCallAction::Continue,
        }
    }
}
