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
use crate::chat::ToolCall;
use crate::executor::{CallOutcome, RunContext, Terminated, TerminationReason};
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
    last_stop: Mutex<Option<String>>,
}

impl Wiring {
    fn lock<T>(slot: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
        slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A guarded call of `tool` ended its run for `reason`.
    fn stopped(&self, tool: &str, reason: &str) {
        *Wiring::lock(&self.last_stop) = Some(reason.to_owned());
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

/// What the guarded tools of one guard share: the registry, the run, the keys' run id and count,
/// and the wiring of the guard's hook.
#[derive(Clone)]
pub(super) struct Core {
    pub(super) registry: Arc<Registry>,
    pub(super) ctx: Arc<RunContext>,
    /// The run id of the guarded calls' keys: `ctx`'s, or one made for it.
    run_id: Arc<str>,
    next_call: Arc<AtomicU64>,
    /// The rig ids the guard's calls were keyed by: rig's ids start from 1 in every agent
    /// built, so one seen again is another agent's call.
    keyed: Arc<Mutex<HashSet<u64>>>,
    wiring: Arc<Wiring>,
    /// The caps of each rig run, counted by the hook.
    pub(super) limits: Option<Arc<UsageLimits>>,
}

impl Core {
    pub(super) fn new(registry: Arc<Registry>, ctx: Arc<RunContext>) -> Self {
        let run_id = ctx
            .run_id()
            .map_or_else(|| crate::agent::new_run_id().into(), Arc::from);
        Core {
            registry,
            ctx,
            run_id,
            next_call: Arc::new(AtomicU64::new(1)),
            keyed: Arc::default(),
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
    pub(super) fn last_stop(&self) -> Option<String> {
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
        // The caps are counted by the hook alone: without it, a capped guard would cap nothing.
        if self.limits.is_some() && !self.wiring.hooked.load(Ordering::Acquire) {
            return Err(uncounted(tool));
        }
        let call = ToolCall::new(self.call_id(context), tool, arguments.to_string());
        let guarded = GuardedCall {
            context: context.for_dispatch(),
            key: IdempotencyKey::new(Arc::clone(&self.run_id), &*call.id),
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
                let reason = stop_reason(&terminated);
                // An encoding failure is impossible for a string; the stop is logged either way.
                let _ = context.insert_result(RunEnded {
                    reason: reason.clone(),
                });
                self.wiring.stopped(tool, &reason);
                Err(ToolExecutionError::cancelled(terminated.user_message).with_retryable(false))
            }
        }
    }

    /// The call's id in its key. rig numbers a call by its agent's bus, from 1 again in every
    /// agent built: a name only within a run id the user gives each agent, and only for the
    /// first agent to use a number. A run id made here is shared by every agent built around
    /// this guard, and a number seen before is another agent's: those calls are counted
    /// instead.
    fn call_id(&self, context: &ToolContext) -> String {
        let effect = self.ctx.run_id().and_then(|_| rig_effect(context));
        if let Some(effect) = effect {
            if Wiring::lock(&self.keyed).insert(effect) {
                return format!("rig-effect-{effect}");
            }
            let run_id = &*self.run_id;
            tracing::warn!(
                run_id,
                "a second rig agent calls through a guard of one run id: its calls are keyed \
                 by a count a replay in another process does not find again; give each agent \
                 a RunContext of its own run id"
            );
        }
        let count = self.next_call.fetch_add(1, Ordering::Relaxed);
        format!("rig-call-{count}")
    }
}

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

/// Why `terminated` ended the run, in words an operator reads in rig's error: the tool, the
/// reason by name, and the failure's kind when there was a failure.
fn uncounted(tool: &str) -> ToolExecutionError {
    let message = format!(
        "`{tool}` refused: its guard caps usage (`RigGuard::with_usage_limits`), but no hook of \
         its guard runs in this agent, so nothing would be counted. Build the agent with \
         `RigGuard::agent`, or add the guard's hook (`.add_hook(guard.hook())`) to the agent"
    );
    tracing::error!(tool, "{message}");
    ToolExecutionError::cancelled(message).with_retryable(false)
}

pub(super) fn stop_reason(terminated: &Terminated) -> String {
    let tool = &terminated.tool;
    let name = reason_name(&terminated.reason);
    match &terminated.reason {
        TerminationReason::WaitingForPerson(_) => {
            format!("`{tool}` ended the run: {name}: the call needs a person's answer")
        }
        _ => format!(
            "`{tool}` ended the run: {name}, a failure of kind {}",
            terminated.kind
        ),
    }
}

/// The name of a termination reason's variant, as the docs name it.
fn reason_name(reason: &TerminationReason) -> &'static str {
    match reason {
        TerminationReason::Auth => "Auth",
        TerminationReason::RetriesExhausted { .. } => "RetriesExhausted",
        TerminationReason::CircuitOpen => "CircuitOpen",
        TerminationReason::BreakerTripped { .. } => "BreakerTripped",
        TerminationReason::Thrown(_) => "Thrown",
        TerminationReason::PermissionDenials { .. } => "PermissionDenials",
        TerminationReason::WaitingForPerson(_) => "WaitingForPerson",
    }
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

impl AgentHook for StopHook {
    fn name(&self) -> Option<String> {
        Some("agent_errors::StopHook".to_owned())
    }

    async fn on_run_start(&self, ctx: &HookContext, _event: RunStart<'_>) -> RunStartAction {
        self.wiring.hooked.store(true, Ordering::Release);
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
        match &self.limits {
            Some(limits) => super::usage::before_request(ctx.scratchpad(), limits, &self.run),
            None => CompletionCallAction::Continue,
        }
    }

    async fn on_model_turn_finished(
        &self,
        ctx: &HookContext,
        turn: ModelTurnFinished<'_>,
    ) -> ModelTurnAction {
        match &self.limits {
            Some(limits) => super::usage::after_turn(ctx.scratchpad(), limits, &self.run, &turn),
            None => ModelTurnAction::Continue,
        }
    }

    async fn on_dispatch(&self, ctx: &HookContext, event: DispatchEvent<'_>) -> DispatchAction {
        match (&self.limits, event.tool_name()) {
            (Some(limits), Some(tool)) => {
                super::usage::before_call(ctx.scratchpad(), limits, &self.run, tool)
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
