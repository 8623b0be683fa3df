//! A call's [`IdempotencyKey`] in the rig `ToolContext` a rig tool is called with, whichever
//! loop runs it: ours (the executor hands the key to the handler) or rig's (a [`GuardedTool`]
//! makes the key and hands it, with the context rig built, to the handler it runs).
//!
//! [`GuardedTool`]: super::GuardedTool

use std::future::Future;

use rig_agent::bus::Dispatcher;
use rig_core::tool::{ContextValue, ToolContext, ToolContextError};

use crate::call::Extensions;
use crate::idempotency::IdempotencyKey;

/// A rig tool reads its call's key with `context.require::<IdempotencyKey>()`.
impl ContextValue for IdempotencyKey {
    const KEY: &'static str = "agent_errors.idempotency_key";
}

/// A rig call that a [`GuardedTool`](super::GuardedTool) runs through our executor: the context
/// rig built for it and the key the guard made for it.
#[derive(Clone)]
pub(super) struct GuardedCall {
    pub(super) context: ToolContext,
    pub(super) key: IdempotencyKey,
}

tokio::task_local! {
    /// The guarded rig call whose attempts run in this task: the executor between the guard and
    /// the rig tool's handler knows nothing of rig, so the call's rig context goes around it.
    /// `None` inside the rig tool's own work (see [`unguarded`]).
    static GUARDED: Option<GuardedCall>;
}

/// Runs `work` (the executor running one guarded call) with `call` in reach of the handler.
pub(super) async fn guarding<F: Future>(call: GuardedCall, work: F) -> F::Output {
    GUARDED.scope(Some(call), work).await
}

/// Runs `work` (a guarded rig tool's own body) with no guarded call in reach: a call the tool
/// makes itself (through a registry and run context of its own) is another call, and must
/// neither send the guarded call's key nor get its rig context.
pub(super) async fn unguarded<F: Future>(work: F) -> F::Output {
    GUARDED.scope(None, work).await
}

/// Rig's own number for the tool call being served, when rig's bus dispatched it: the call's
/// effect id, which rig's hooks, recorder and replayer know it by (`rig-effect-` and it, in a
/// key). Read from the dispatcher rig puts in the context of every tool call it serves.
pub(super) fn rig_effect(context: &ToolContext) -> Option<u64> {
    let effect = context.scope::<Dispatcher>()?.parent()?;
    Some(effect.as_u64())
}

/// The context one attempt of a rig tool runs with: the one rig built for the call when a
/// guard runs it (a copy per attempt, so what one attempt changes the next does not see), else
/// an empty one; holding the call's key when it has one, the executor's first (our loop's),
/// else the guard's.
///
/// Also says whether a guard runs the attempt, so the handler can run the tool [`unguarded`].
pub(super) fn attempt_context(
    extensions: &Extensions,
) -> (Result<ToolContext, ToolContextError>, bool) {
    let guarded = GUARDED
        .try_with(|call| {
            call.as_ref()
                .map(|call| (call.context.for_dispatch(), call.key.clone()))
        })
        .ok()
        .flatten();
    let is_guarded = guarded.is_some();
    let ours = extensions.get::<IdempotencyKey>().cloned();
    let (mut context, key) = match guarded {
        Some((context, key)) => (context, ours.or(Some(key))),
        None => (ToolContext::new(), ours),
    };
    let context = match key {
        Some(key) => context.insert(key).map(|_| context),
        None => Ok(context),
    };
    (context, is_guarded)
}
