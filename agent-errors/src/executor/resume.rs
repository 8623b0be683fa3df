//! A call picked up again after the process running it stopped: what a durable run saved about
//! it ([`CallProgress`]), and how it goes on. A call sleeping before a retry sleeps its saved
//! delay and retries; a call that was running is run again when its tool is idempotent, and is
//! otherwise a failure of kind [`OutcomeUnknown`](ErrorKind::OutcomeUnknown) for its policy.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::attempt::{Missed, attempt};
use super::context::RunContext;
use super::ladder::Walk;
use super::outcome::{Failure, Handled};
use crate::chat::ToolCall;
use crate::classify::ErrorKind;
use crate::error::BoxFuture;
use crate::error::ToolError;
use crate::policy::PolicyKey;
use crate::registry::Registry;

/// Told how each call of a durable run gets on, so the run's checkpoint can say so.
pub(crate) trait CallJournal: Send + Sync + 'static {
    /// Saves `progress` for the call `call_id`; false when the save failed (the run is then
    /// halting, and the call must not go on to run its tool).
    fn progress<'a>(&'a self, call_id: &'a str, progress: CallProgress) -> BoxFuture<'a, bool>;
}

/// How far one call got: what a resumed run needs to go on without spending anything twice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CallProgress {
    /// Calls of a tool made for this call, counting one that may be running.
    pub(crate) attempts: u32,
    /// Fixer invocations spent on this call.
    pub(crate) repair_steps: u32,
    /// Arguments a fixer wrote in place of the model's, when one did.
    pub(crate) arguments: Option<String>,
    /// The retry rung the call is on, when it is on one.
    pub(crate) retry: Option<RetryPlace>,
    /// Set while the call sleeps before its next retry: no tool is running then, so the
    /// outcome of every attempt so far is known.
    pub(crate) backoff_ms: Option<u64>,
}

impl Default for CallProgress {
    /// A call whose first attempt may have started.
    fn default() -> Self {
        CallProgress {
            attempts: 1,
            repair_steps: 0,
            arguments: None,
            retry: None,
            backoff_ms: None,
        }
    }
}

/// A retry rung being walked: which one, how many retries it has drawn, and the failure it is
/// retrying.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RetryPlace {
    /// The policy key whose ladder holds the rung, as written in a policy.
    pub(crate) key: String,
    /// The rung's place in that ladder.
    pub(crate) rung: usize,
    /// Retries drawn from the rung's schedule, the one sleeping or running included.
    pub(crate) retries: u32,
    /// The kind of the failure being retried.
    pub(crate) kind: ErrorKind,
    /// Its message, scrubbed.
    pub(crate) message: String,
}

impl RetryPlace {
    pub(crate) fn key(&self) -> Option<PolicyKey> {
        PolicyKey::all().find(|key| key.as_str() == self.key)
    }
}

/// The call was running when the process running it stopped, and its result was never
/// recorded: it may or may not have taken effect. Classified
/// [`OutcomeUnknown`](ErrorKind::OutcomeUnknown).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the call was interrupted (the process running it stopped) before its result was recorded: \
     whether it took effect is unknown"
)]
#[non_exhaustive]
pub struct CallInterrupted;

/// The failure a call was retrying when its run was interrupted, as the checkpoint recorded
/// it: the original error is gone, its kind and words are not.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub(crate) struct SavedFailure {
    pub(crate) kind: ErrorKind,
    pub(crate) message: String,
}

/// Goes on with a call of a resumed run that has no result yet.
pub(super) async fn handle_resumed(
    registry: &Registry,
    ctx: &RunContext,
    call: &ToolCall,
    progress: CallProgress,
) -> Handled {
    let Some(entry @ (tool, _)) = registry.entry(&call.name) else {
        // A name the agent does not know was never run: it is answered as it was the first time.
        return super::unknown_tool(registry, ctx, call);
    };
    let extensions = ctx.call_extensions(&call.id);
    let raw = progress.arguments.as_deref().unwrap_or(&call.arguments);
    let args = || serde_json::from_str(raw).unwrap_or(serde_json::Value::Null);
    let walk = |failure| {
        Walk::new(registry, ctx, entry, call, failure, extensions.clone()).resumed(&progress)
    };
    if let (Some(place), Some(delay)) = (&progress.retry, progress.backoff_ms) {
        let failure = saved_failure(ctx, args(), place, progress.attempts);
        let delay = Duration::from_millis(delay);
        return Box::pin(walk(failure).at_retry(place, delay).run()).await;
    }
    if !tool.is_idempotent() {
        let error = ToolError::execution(args(), CallInterrupted);
        let failure = Failure::new(error, progress.attempts, ctx.classifier());
        return Box::pin(walk(failure).run()).await;
    }
    // Idempotent: the attempt that was running is made again, in the place it was made.
    if let Some(place) = &progress.retry {
        let failure = saved_failure(ctx, args(), place, progress.attempts);
        return Box::pin(walk(failure).at_retry(place, Duration::ZERO).run()).await;
    }
    match attempt(ctx, tool, raw, &extensions).await {
        Ok(output) => Handled::Ok(output),
        Err(Missed::Tripped { failures }) => Handled::Tripped {
            tool: tool.name().to_owned(),
            failures,
        },
        Err(Missed::Failed(error)) => {
            let failure = Failure::new(error, progress.attempts, ctx.classifier());
            Box::pin(walk(failure).run()).await
        }
    }
}

fn saved_failure(
    ctx: &RunContext,
    args: serde_json::Value,
    place: &RetryPlace,
    attempts: u32,
) -> Failure {
    let saved = SavedFailure {
        kind: place.kind,
        message: place.message.clone(),
    };
    Failure::new(
        ToolError::execution(args, saved),
        attempts,
        ctx.classifier(),
    )
}
