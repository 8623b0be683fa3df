//! What every guarded rig tool of an agent shares, and the hook that ends rig's run for them.
//!
//! A guarded call that must end the run (an `auth` failure, an escalation, a tripped breaker, a
//! call waiting for a person) cannot end rig's loop from inside a tool: the tool answers
//! "cancelled" and marks its result ([`RunEnded`]), and the [`StopHook`] stops rig's run on that
//! very result. The mark travels with the call's result, so a stop belongs to the run it
//! happened in: the next prompt of the same agent starts clean, and any guard's hook stops any
//! guarded tool's run. A guard whose hook never ran in any run of an agent cannot have its stops
//! delivered: its tools then refuse every call after a stop, with an error that names the hook.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rig_agent::agent::hook::{
    AgentHook, CompletionCallAction, CompletionCallEvent, DispatchAction, DispatchEvent,
    HookContext, ModelTurnAction, ModelTurnFinished, OutcomeAction, OutcomeEvent, RunStart,
    RunStartAction,
};
use rig_core::tool::{ContextValue, ToolContext, ToolExecutionError, ToolOutput};

use super::key::{GuardedCall, guarding, rig_effect};
use super::stop::RigStop;
use crate::chat::ToolCall;
use crate::executor::{CallOutcome, RunContext};
use crate::idempotency::IdempotencyKey;
use crate::registry::Registry;
use crate::usage::UsageLimits;

/// The `execute_tool` span rig's loop opened for the call being run, if it is in one: the call's
/// recovery is traced there, one span per call under rig's call id, rather than in a second
/// span of ours nested in it under another id.
fn rig_tool_span() -> Option<tracing::Span> {
    let current = tracing::Span::current();
    let named = current.metadata().map(|meta| meta.name());
    (named == Some("execute_tool")).then_some(current)
}

/// The mark a guarded call leaves on its result when it ended the run: why, for the hook.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(super) struct RunEnded {
    pub(super) reason: String,
}

impl ContextValue for RunEnded {
    const KEY: &'static str = "agent_errors.run_ended";
}

/// Whether the hook of a guard ever ran, and the stop it could not deliver when it did not.
#[derive(Debug, Default)]
struct Wiring {
    hooked: AtomicBool,
    undelivered: Mutex<Option<String>>,
    last_stop: Mutex<Option<RigStop>>,
}

impl Wiring {
    fn lock<T>(slot: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
        slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The guard ended a run for `stop`.
    fn record(&self, stop: RigStop) {
        *Wiring::lock(&self.last_stop) = Some(stop);
    }

    /// A guarded call of `tool` ended its run for `stop`.
    fn stopped(&self, tool: &str, stop: RigStop) {
        let reason = stop.to_string();
        self.record(stop);
        let reason = reason.as_str();
        if !self.hooked.load(Ordering::Acquire) {
            tracing::error!(
                tool,
                reason,
                "a guarded rig tool ended its run, but no hook of its guard runs in the agent: \
                 rig's loop goes on; add the guard's hook (`RigGuard::agent` adds it)"
            );
            Wiring::lock(&self.undelivered).get_or_insert_with(|| reason.to_owned());
        }
    }
}

/// How the calls of one run are keyed, shared by every guard made over its [`RunContext`]: two
/// guards of one run never give two calls one key.
struct Keys {
    /// The run id of the guarded calls' keys: `ctx`'s, or one made for it.
    run_id: Arc<str>,
    next_call: AtomicU64,
    /// The rig ids the run's calls were keyed by: rig's ids start from 1 in every agent
    /// built, so one seen again is another agent's call.
    keyed: Mutex<HashSet<u64>>,
}

impl Keys {
    fn of(ctx: &RunContext) -> Arc<Keys> {
        let make = || Keys {
            run_id: ctx
                .run_id()
                .map_or_else(|| crate::agent::new_run_id().into(), Arc::from),
            next_call: AtomicU64::new(1),
            keyed: Mutex::default(),
        };
        let Some((keys, shared)) = ctx.guarded(make) else {
            return Arc::new(make());
        };
        if shared {
            let run_id = &*keys.run_id;
            tracing::warn!(
                run_id,
                "a second rig guard over one RunContext: the two share its breakers, budget and \
                 keys, and the calls of their agents are keyed by a count a replay in another \
                 process does not find again; make one guard per run (its `tool::<T>()`, \
                 `sibling` and `agent` share it), or give each guard a RunContext of its own \
                 run id"
            );
        }
        keys
    }
}

/// What the guarded tools of one guard share: the registry, the run, the keys of its calls, and
/// the wiring of the guard's hook.
#[derive(Clone)]
pub(super) struct Core {
    pub(super) registry: Arc<Registry>,
    pub(super) ctx: Arc<RunContext>,
    keys: Arc<Keys>,
    wiring: Arc<Wiring>,
    /// The caps of each rig run, counted by the hook.
    pub(super) limits: Option<Arc<UsageLimits>>,
}

impl Core {
    pub(super) fn new(registry: Arc<Registry>, ctx: Arc<RunContext>) -> Self {
        Core {
            registry,
            keys: Keys::of(&ctx),
            ctx,
            wiring: Arc::default(),
            limits: None,
        }
    }

    /// The hook that ends rig's run when a guarded call of this guard must.
    pub(super) fn hook(&self) -> StopHook {
        StopHook {
            wiring: Arc::clone(&self.wiring),
            limits: self.limits.clone(),
            run: Arc::clone(&self.ctx),
        }
    }

    /// Why a guarded call of this guard last ended its run, if one did.
    pub(super) fn last_stop(&self) -> Option<RigStop> {
        Wiring::lock(&self.wiring.last_stop).clone()
    }

    /// One call of `tool` as rig dispatched it, through the registry.
    pub(super) async fn call(
        &self,
        tool: &str,
        context: &mut ToolContext,
        arguments: serde_json::Value,
    ) -> Result<ToolOutput, ToolExecutionError> {
        if let Some(reason) = Wiring::lock(&self.wiring.undelivered).clone() {
            return Err(missing_hook(tool, &reason));
        }
        // Tokio would panic at the first backoff or timeout: the call does not run, and the
        // run ends on a typed stop.
        if !crate::executor::runtime_has_timer() {
            return Err(self.ended(tool, context, RigStop::NoTimer, NO_TIMER_USER));
        }
        // The caps are counted by the hook alone: without it, a capped guard would cap nothing.
        if self.limits.is_some() && !self.wiring.hooked.load(Ordering::Acquire) {
            return Err(uncounted(tool));
        }
        let call = ToolCall::new(self.call_id(context), tool, arguments.to_string());
        let guarded = GuardedCall {
            context: context.for_dispatch(),
            key: IdempotencyKey::new(Arc::clone(&self.keys.run_id), &*call.id),
        };
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
                let stop = RigStop::of(&terminated);
                Err(self.ended(tool, context, stop, terminated.user_message))
            }
        }
    }

    /// A guarded call of `tool` ends its run for `stop`: its result is marked for the hook, and
    /// the model (were rig to go on) is told `user_message`.
    fn ended(
        &self,
        tool: &str,
        context: &mut ToolContext,
        stop: RigStop,
        user_message: &'static str,
    ) -> ToolExecutionError {
        let reason = stop.to_string();
        // An encoding failure is impossible for a string; the stop is logged either way.
        let _ = context.insert_result(RunEnded { reason });
        self.wiring.stopped(tool, stop);
        ToolExecutionError::cancelled(user_message).with_retryable(false)
    }

    /// The call's id in its key. rig numbers a call by its agent's bus, from 1 again in every
    /// agent built: a name only within a run id the user gives each agent, and only for the
    /// first agent to use a number. A run id made here is shared by every agent built around
    /// this guard, and a number seen before is another agent's: those calls are counted
    /// instead.
    fn call_id(&self, context: &ToolContext) -> String {
        let effect = self.ctx.run_id().and_then(|_| rig_effect(context));
        if let Some(effect) = effect {
            if Wiring::lock(&self.keys.keyed).insert(effect) {
                return format!("rig-effect-{effect}");
            }
            let run_id = &*self.keys.run_id;
            tracing::warn!(
                run_id,
                "a second rig agent calls through a guard of one run id: its calls are keyed \
                 by a count a replay in another process does not find again; give each agent \
                 a RunContext of its own run id"
            );
        }
        let count = self.keys.next_call.fetch_add(1, Ordering::Relaxed);
        format!("rig-call-{count}")
    }
}

/// What the model is told of a guarded call refused on a runtime without its timer.
const NO_TIMER_USER: &str = "I couldn't finish that: the service is misconfigured.";

/// The error of a guarded call made after its run was told to end, with no hook to end it.
fn missing_hook(tool: &str, reason: &str) -> ToolExecutionError {
    let message = format!(
        "`{tool}` refused: its run was told to end ({reason}), but no hook of its guard runs in \
         this agent, so rig's loop went on. Build the agent with `RigGuard::agent`, or add the \
         guard's hook (`.add_hook(guarded.stop_hook())`) to the agent"
    );
    tracing::error!(tool, reason, "{message}");
    // The model is told too: nothing in it is the tool's, and it explains the refusal.
    ToolExecutionError::cancelled(message).with_retryable(false)
}

/// The error of a call of a capped guard whose hook never ran: nothing would count it.
fn uncounted(tool: &str) -> ToolExecutionError {
    let message = format!(
        "`{tool}` refused: its guard caps usage (`RigGuard::with_usage_limits`), but no hook of \
         its guard runs in this agent, so nothing would be counted. Build the agent with \
         `RigGuard::agent`, or add the guard's hook (`.add_hook(guard.hook())`) to the agent"
    );
    tracing::error!(tool, "{message}");
    ToolExecutionError::cancelled(message).with_retryable(false)
}

/// A rig `AgentHook` that ends rig's run on the result of a guarded call that must end it (rig's
/// loop cannot be ended from inside a tool). Made by [`RigGuard::hook`](super::RigGuard::hook) and
/// [`GuardedTool::stop_hook`](super::GuardedTool::stop_hook); [`RigGuard::agent`](super::RigGuard::agent)
/// adds it.
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
/// let error = agent.prompt("what do we owe?").await.unwrap_err();
/// assert!(error.to_string().contains("`billing` ended the run: Auth"));
/// assert_eq!(model.request_count(), 1, "no model call after the tool ended the run");
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct StopHook {
    wiring: Arc<Wiring>,
    limits: Option<Arc<UsageLimits>>,
    run: Arc<RunContext>,
}

impl std::fmt::Debug for StopHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StopHook")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl StopHook {
    /// `action`, after keeping the cap it ended the run on, when it did, as the guard's stop.
    fn noted<A>(&self, ctx: &HookContext, action: A) -> A {
        if let Some(ended) = super::usage::ended(ctx.scratchpad()) {
            self.wiring.record(RigStop::UsageLimit(ended));
        }
        action
    }
}

impl AgentHook for StopHook {
    fn name(&self) -> Option<String> {
        Some("agent_errors::StopHook".to_owned())
    }

    async fn on_run_start(&self, ctx: &HookContext, _event: RunStart<'_>) -> RunStartAction {
        self.wiring.hooked.store(true, Ordering::Release);
        // As our loop refuses it: Tokio would panic at the run's first backoff or timeout.
        if !crate::executor::runtime_has_timer() {
            let stop = RigStop::NoTimer;
            let reason = stop.to_string();
            self.wiring.record(stop);
            return RunStartAction::stop(reason);
        }
        if let Some(limits) = &self.limits {
            super::usage::RigRunUsage::start(ctx.scratchpad(), limits);
        }
        RunStartAction::Continue
    }

    async fn on_completion_call(
        &self,
        ctx: &HookContext,
        _event: CompletionCallEvent<'_>,
    ) -> CompletionCallAction {
        let Some(limits) = &self.limits else {
            return CompletionCallAction::Continue;
        };
        let action = super::usage::before_request(ctx.scratchpad(), limits, &self.run);
        self.noted(ctx, action)
    }

    async fn on_model_turn_finished(
        &self,
        ctx: &HookContext,
        turn: ModelTurnFinished<'_>,
    ) -> ModelTurnAction {
        let Some(limits) = &self.limits else {
            return ModelTurnAction::Continue;
        };
        let action = super::usage::after_turn(ctx.scratchpad(), limits, &self.run, &turn);
        self.noted(ctx, action)
    }

    async fn on_dispatch(&self, ctx: &HookContext, event: DispatchEvent<'_>) -> DispatchAction {
        match (&self.limits, event.tool_name()) {
            (Some(limits), Some(tool)) => {
                let action = super::usage::before_call(ctx.scratchpad(), limits, &self.run, tool);
                self.noted(ctx, action)
            }
            _ => DispatchAction::Proceed,
        }
    }

    async fn on_outcome(&self, _ctx: &HookContext, event: OutcomeEvent<'_>) -> OutcomeAction {
        let ended = event
            .tool_context()
            .and_then(|context| context.result::<RunEnded>().ok().flatten());
        match ended {
            Some(ended) => OutcomeAction::stop(ended.reason),
            None => OutcomeAction::proceed(),
        }
    }
}
