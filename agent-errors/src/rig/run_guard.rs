//! One value that guards every tool of a registry inside rig's own agent loop, and builds the
//! rig agent with the tools and the hook together: [`RigGuard`].

use std::fmt;
use std::sync::Arc;

use rig_agent::agent::{AgentBuilder, WithBuilderTools};
use rig_core::DynModel;
use rig_core::message::ToolName;
use rig_core::operation::Completion;
use rig_core::tool::{DynamicTool, Tool, ToolContext, ToolExecutionError, ToolOutput};
use rig_core::wasm_compat::WasmBoxedFuture;

use super::agent::{GuardError, GuardedTool};
use super::guard::{Core, StopHook};
use super::recover::RecoveringModel;
use crate::executor::RunContext;
use crate::registry::{ConfigError, Registry, caps_that_never_apply};
use crate::retry::RetrySchedule;
use crate::usage::UsageLimits;

/// Every tool of a [`Registry`] under our policies inside rig's own agent loop (`rig_agent`),
/// with the hook that ends rig's run when one of them must: the way to keep a rig agent on
/// rig's loop with nothing to wire by hand.
///
/// [`agent`](RigGuard::agent) starts a rig `AgentBuilder` with every tool of the registry (rig
/// tools registered with [`ToolDef::from_rig`](crate::ToolDef::from_rig), `#[tool]`s, MCP
/// tools: any tool of ours becomes a rig tool of the same name and schema) and the guard's
/// [`StopHook`]. Each call runs as a [`GuardedTool`]'s does: through `registry.execute` in the
/// run `ctx` (retries, fixers, fallbacks, breakers, the permission gate, the retry budget), with
/// its idempotency key in the rig tool's `ToolContext`. A call that must end the run (an
/// `auth` failure, an escalation, a tripped breaker, a call waiting for a person) ends rig's run
/// on its result, and rig's error names why (`` `billing` ended the run: Auth, ... ``). A stop
/// belongs to its run: the agent, built once, serves any number of prompts.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use agent_errors::{HttpError, Registry, RunContext};
/// use agent_errors::rig::RigGuard;
/// use agent_errors::testing::{FaultyTool, echo_tool};
/// use rig_core::test_utils::{MockCompletionModel, MockTurn};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // A CRM whose token was revoked: a 401 must end the run, not be shown to the model.
/// let crm = FaultyTool::new(echo_tool("crm")).fail_times(1, || HttpError::new(401, "revoked"));
/// let registry = Arc::new(Registry::builder().tool(crm.tool()).build()?);
/// let guard = RigGuard::new(registry, Arc::new(RunContext::new()));
///
/// let model = MockCompletionModel::from_turns([
///     MockTurn::tool_call("call-1", "crm", serde_json::json!({"text": "acme"})),
///     MockTurn::text("never asked"),
/// ]);
/// let agent = guard.agent(model.clone()).default_max_turns(3).build();
/// let error = agent.prompt("look up acme").await.unwrap_err();
/// assert!(error.to_string().contains("`crm` ended the run: Auth"));
/// assert_eq!(model.request_count(), 1, "rig's model is not asked again");
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RigGuard {
    core: Core,
}

impl fmt::Debug for RigGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tools: Vec<&str> = self
            .core
            .registry
            .tools()
            .iter()
            .map(|t| t.name())
            .collect();
        f.debug_struct("RigGuard")
            .field("tools", &tools)
            .finish_non_exhaustive()
    }
}

impl RigGuard {
    /// Guards every tool of `registry` in the run `ctx`. The calls' keys start with `ctx`'s run
    /// id, or with one made now when `ctx` has none.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use agent_errors::{Registry, RunContext};
    /// use agent_errors::rig::RigGuard;
    /// use agent_errors::testing::echo_tool;
    ///
    /// let registry = Arc::new(Registry::builder().tool(echo_tool("echo")).build().unwrap());
    /// let guard = RigGuard::new(registry, Arc::new(RunContext::new().with_run_id("run-7")));
    /// assert_eq!(guard.tools().len(), 1);
    /// ```
    pub fn new(registry: Arc<Registry>, ctx: Arc<RunContext>) -> Self {
        RigGuard {
            core: Core::new(registry, ctx),
        }
    }

    /// Caps each rig run of the guard's agents, as [`AgentBuilder::usage_limits`](crate::AgentBuilder::usage_limits)
    /// caps a run of ours: its model requests, tokens, cost and tool calls, counted per rig run
    /// (each prompt is a run of its own) by the guard's hook. Past a cap the run ends with rig's
    /// error naming it (`the run went past its limit on model requests: at most 2`), or, for a
    /// cap the limits answer with [`OnExceed::FinalAnswer`](crate::run::OnExceed), the calls of
    /// the turn that went past are not run and the model is asked once more, without tools, for
    /// the best answer it has: rig's run ends with that answer.
    ///
    /// Only the guard's hook counts, and it counts what rig's loop shows it: a tool call is one
    /// call the model asked for that rig dispatches (its retries, a run after a fixer's repair
    /// and a fallback tool's run inside the guarded call are not counted, where our loop counts
    /// each run of a tool body), and a [`RecoveringModel`](super::RecoveringModel)'s retries and
    /// fallback calls inside one of rig's requests count as that one request. In an agent
    /// without the hook ([`agent`](Self::agent) adds it), the guard's tools refuse every call,
    /// naming the missing hook, rather than run uncapped.
    ///
    /// The limits are checked as the agent builder checks them, and refused with every
    /// problem listed: a per-tool cap on a tool the registry does not have, a graceful stop
    /// ([`OnExceed::FinalAnswer`](crate::run::OnExceed)) for a cap the limits do not set, and a
    /// cost cap or price that is not a finite, non-negative amount. (rig's model is not known
    /// here, so a cost cap's missing price is not: give every model you use a price.)
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use agent_errors::{Registry, RunContext};
    /// use agent_errors::rig::RigGuard;
    /// use agent_errors::run::{OnExceed, UsageLimit, UsageLimits};
    /// use agent_errors::testing::echo_tool;
    /// use rig_core::test_utils::{MockCompletionModel, MockTurn};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let registry = Arc::new(Registry::builder().tool(echo_tool("search")).build()?);
    /// let limits = UsageLimits::new()
    ///     .max_tool_calls(1)
    ///     .on_exceed(UsageLimit::ToolCalls, OnExceed::FinalAnswer);
    /// let guard = RigGuard::new(registry, Arc::new(RunContext::new())).with_usage_limits(limits)?;
    /// let search = |id| MockTurn::tool_call(id, "search", serde_json::json!({"text": "rust"}));
    /// let model = MockCompletionModel::from_turns([
    ///     search("call-1"),
    ///     search("call-2"), // one call too many: not run
    ///     MockTurn::text("Rust is a language (from one search)."),
    /// ]);
    /// let agent = guard.agent(model.clone()).default_max_turns(5).build();
    /// let answer = agent.prompt("what is rust?").await?;
    /// assert_eq!(answer.output(), "Rust is a language (from one search).");
    /// assert!(model.requests()[2].tools.is_empty(), "the last request offers no tools");
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_usage_limits(mut self, limits: UsageLimits) -> Result<Self, ConfigError> {
        let registry = &self.core.registry;
        let called = |tool: &str| registry.tool(tool).is_some();
        let problems = caps_that_never_apply(&limits, registry, called, []);
        if !problems.is_empty() {
            return Err(ConfigError::new(problems));
        }
        self.core.limits = Some(Arc::new(limits));
        Ok(self)
    }

    /// A rig agent builder over `model` with every guarded tool and the guard's hook: go on
    /// with rig's builder (`preamble`, `default_max_turns`, more tools, more hooks) and `build`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use agent_errors::{Registry, RunContext};
    /// use agent_errors::rig::RigGuard;
    /// use agent_errors::testing::echo_tool;
    /// use rig_core::test_utils::{MockCompletionModel, MockTurn};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let registry = Arc::new(Registry::builder().tool(echo_tool("echo")).build()?);
    /// let guard = RigGuard::new(registry, Arc::new(RunContext::new()));
    /// let model = MockCompletionModel::from_turns([
    ///     MockTurn::tool_call("call-1", "echo", serde_json::json!({"text": "hi"})),
    ///     MockTurn::text("it said hi"),
    /// ]);
    /// let agent = guard.agent(model).preamble("You echo.").default_max_turns(3).build();
    /// assert_eq!(agent.prompt("echo hi").await?.output(), "it said hi");
    /// # Ok(())
    /// # }
    /// ```
    pub fn agent(&self, model: impl Into<DynModel<Completion>>) -> AgentBuilder<WithBuilderTools> {
        AgentBuilder::new(model)
            .dynamic_tools(self.tools())
            .add_hook(self.hook())
    }

    /// Every tool of the registry as a guarded rig tool, for a rig agent built by hand: add
    /// [`hook`](RigGuard::hook) to it too.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use agent_errors::{Registry, RunContext};
    /// use agent_errors::rig::RigGuard;
    /// use agent_errors::testing::echo_tool;
    /// use rig_core::test_utils::MockCompletionModel;
    ///
    /// let registry = Arc::new(Registry::builder().tool(echo_tool("echo")).build().unwrap());
    /// let guard = RigGuard::new(registry, Arc::new(RunContext::new()));
    /// let agent = rig_agent::AgentBuilder::new(MockCompletionModel::from_turns([]))
    ///     .dynamic_tools(guard.tools())
    ///     .add_hook(guard.hook())
    ///     .build();
    /// # let _ = agent;
    /// ```
    pub fn tools(&self) -> Vec<DynamicTool> {
        let tools = self.core.registry.tools().iter();
        tools
            .filter_map(|def| {
                let name = ToolName::new(def.name()).ok()?;
                let callback = call_through(self.core.clone(), Arc::from(def.name()));
                let parameters = def.parameters().clone();
                Some(DynamicTool::new_with_context(
                    name,
                    def.description(),
                    parameters,
                    callback,
                ))
            })
            .collect()
    }

    /// The hook that ends rig's run on the result of a guarded call that must end it.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use agent_errors::{Registry, RunContext};
    /// use agent_errors::rig::{RigGuard, StopHook};
    ///
    /// let guard = RigGuard::new(Arc::new(Registry::builder().build().unwrap()), Arc::new(RunContext::new()));
    /// let _hook: StopHook = guard.hook();
    /// ```
    pub fn hook(&self) -> StopHook {
        self.core.hook()
    }

    /// The registry's tool `T`, as a typed rig tool under this guard (its calls share the
    /// guard's run, keys and hook).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use agent_errors::{Registry, RunContext};
    /// use agent_errors::rig::{GuardError, RigGuard};
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
    /// let guard = RigGuard::new(Arc::new(Registry::builder().build().unwrap()), Arc::new(RunContext::new()));
    /// assert_eq!(guard.tool::<Ping>().unwrap_err(), GuardError::UnknownTool("ping"));
    /// ```
    pub fn tool<T: Tool>(&self) -> Result<GuardedTool<T>, GuardError> {
        GuardedTool::with_core(self.core.clone())
    }

    /// `model`, retried under `schedule` in this guard's run: each retry spends the run's
    /// retry allowance (the one the guarded tools' retries spend) and is an event of the run, as
    /// is each switch to a [`fallback`](RecoveringModel::fallback).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use agent_errors::{Registry, RunContext};
    /// use agent_errors::retry::RetrySchedule;
    /// use agent_errors::rig::RigGuard;
    /// use rig_core::test_utils::{MockCompletionModel, MockTurn};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let run = Arc::new(RunContext::new());
    /// let guard = RigGuard::new(Arc::new(Registry::builder().build()?), Arc::clone(&run));
    /// let primary = MockCompletionModel::from_turns([]); // fails
    /// let backup = MockCompletionModel::from_turns([MockTurn::text("hello")]);
    /// let model = guard.recovering(primary, RetrySchedule::attempts(2)?).fallback(backup);
    /// let agent = guard.agent(model).build();
    /// assert_eq!(agent.prompt("hi").await?.output(), "hello");
    /// let switches = run.events().snapshot().iter().filter(|e| e.name() == "llm_fallback").count();
    /// assert_eq!(switches, 1);
    /// # Ok(())
    /// # }
    /// ```
    pub fn recovering(
        &self,
        model: impl Into<DynModel<Completion>>,
        schedule: RetrySchedule,
    ) -> RecoveringModel {
        RecoveringModel::new(model, schedule, Arc::clone(&self.core.ctx))
    }

    /// Why the guard last ended a run of rig's loop, if it did, typed: a guarded call that had
    /// to end it (its question, when it waits for a person), a usage limit, or a runtime
    /// without its timer. Its `Display` is the reason rig's error gives, and
    /// [`RigStop::into_run_error`](super::RigStop::into_run_error) the [`RunError`](crate::RunError)
    /// our loop would end with.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use agent_errors::{Registry, RunContext};
    /// use agent_errors::rig::RigGuard;
    ///
    /// let guard = RigGuard::new(Arc::new(Registry::builder().build().unwrap()), Arc::new(RunContext::new()));
    /// assert!(guard.stopped().is_none());
    /// ```
    pub fn stopped(&self) -> Option<super::RigStop> {
        self.core.last_stop()
    }
}

/// The callback of the guarded rig tool `tool`: each call through the guard's core.
fn call_through(
    core: Core,
    tool: Arc<str>,
) -> impl for<'a> Fn(
    &'a mut ToolContext,
    serde_json::Value,
) -> WasmBoxedFuture<'a, Result<ToolOutput, ToolExecutionError>>
+ Send
+ Sync
+ 'static {
    move |context, arguments| {
        let (core, tool) = (core.clone(), Arc::clone(&tool));
        Box::pin(async move { core.call(&tool, context, arguments).await })
    }
}
