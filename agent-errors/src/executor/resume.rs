//! Where a call starts ([`CallStart`]): afresh, or from what a durable run saved about it
//! ([`CallProgress`]) before the process running it stopped. A resumed call has passed the
//! gate with the arguments it will send before it gets here; then a call sleeping before a
//! retry sleeps its saved delay and retries, and a call that was running is run again when its
//! tool is idempotent and is otherwise a failure of kind
//! [`OutcomeUnknown`](ErrorKind::OutcomeUnknown) for its policy.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::approval::{self, Waiting};
use super::attempt::{Missed, attempt};
use super::context::RunContext;
use super::ladder::Walk;
use super::outcome::{Failure, Handled};
use crate::chat::ToolCall;
use crate::classify::ErrorKind;
use crate::error::ToolError;
use crate::extensions::Extensions;
use crate::policy::{PolicyKey, ResolvedPolicy};
use crate::registry::Registry;
use crate::tool::ToolDef;

/// Where a call starts.
#[derive(Debug, Clone, Copy)]
pub(crate) enum CallStart<'a> {
    /// The model just made it.
    Fresh,
    /// A resumed run goes on with it from how far it got.
    From(&'a CallProgress),
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
    /// Set while the call waits for a person: no tool is running then either.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) waiting: Option<Waiting>,
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
            waiting: None,
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
///
/// # Examples
///
/// A fixer, fallback or log line can tell "this may already have happened" from a plain
/// failure, and check before doing it again:
///
/// ```
/// use agent_errors::ToolError;
/// use agent_errors::call::CallInterrupted;
///
/// fn may_have_taken_effect(error: &ToolError) -> bool {
///     error.cause().is::<CallInterrupted>()
/// }
///
/// let refused = ToolError::execution(serde_json::json!({"amount": 10}), std::io::Error::other("refused"));
/// assert!(!may_have_taken_effect(&refused));
/// ```
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

/// Goes on with a call of a resumed run that has no result yet, once the gate has let its
/// arguments through.
pub(super) async fn go_on(
    registry: &Registry,
    ctx: &RunContext,
    entry @ (tool, _): (&ToolDef, &ResolvedPolicy),
    call: &ToolCall,
    progress: &CallProgress,
    extensions: Extensions,
) -> Handled {
    if let Some(waiting) = &progress.waiting {
        let asked = approval::go_on(registry, ctx, entry, call, progress, waiting, extensions);
        return Box::pin(asked).await;
    }
    let raw = progress.arguments.as_deref().unwrap_or(&call.arguments);
    let walk = |failure| {
        Walk::new(registry, ctx, entry, call, failure, extensions.clone()).resumed(progress)
    };
    if let (Some(place), Some(delay)) = (&progress.retry, progress.backoff_ms) {
        let failure = saved_failure(ctx, raw, place, progress.attempts);
        let delay = Duration::from_millis(delay);
        return walk(failure).at_retry(place, delay).run().await;
    }
    if !tool.is_idempotent() {
        let error = ToolError::execution(raw, CallInterrupted);
        let failure = Failure::new(error, progress.attempts, ctx.hooks().classifier());
        return walk(failure).run().await;
    }
    // Idempotent: the attempt that was running is made again, in the place it was made.
    if let Some(place) = &progress.retry {
        let failure = saved_failure(ctx, raw, place, progress.attempts);
        return walk(failure).at_retry(place, Duration::ZERO).run().await;
    }
    match attempt(ctx, tool, raw, &extensions).await {
        Ok(output) => Handled::Ok(output),
        Err(Missed::Tripped { failures }) => Handled::Tripped {
            tool: tool.name().to_owned(),
            failures,
        },
        Err(Missed::Failed(error)) => {
            let failure = Failure::new(error, progress.attempts, ctx.hooks().classifier());
            walk(failure).run().await
        }
    }
}

fn saved_failure(ctx: &RunContext, args: &str, place: &RetryPlace, attempts: u32) -> Failure {
    let saved = SavedFailure {
        kind: place.kind,
        message: place.message.clone(),
    };
    Failure::new(
        ToolError::execution(args, saved),
        attempts,
        ctx.hooks().classifier(),
    )
}
