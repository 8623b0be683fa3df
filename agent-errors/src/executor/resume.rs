//! Where a call starts ([`CallStart`]): afresh, or from what a durable run saved about it
//! ([`CallProgress`]) before the process running it stopped. The [course](super::course) of a
//! call reads it: a call sleeping before a retry sleeps its saved delay and retries, a call that
//! was running is run again when its tool is idempotent and is otherwise a failure of kind
//! [`OutcomeUnknown`](ErrorKind::OutcomeUnknown) for its policy, and a call that waited for a
//! person asks again.

use serde::{Deserialize, Serialize};

use crate::approval::PendingApproval;
use crate::classify::ErrorKind;
use crate::policy::PolicyKey;

/// Where a call starts.
#[derive(Debug, Clone, Copy)]
pub(crate) enum CallStart<'a> {
    /// The model just made it.
    Fresh,
    /// A resumed run goes on with it from how far it got.
    From(&'a CallProgress),
}

impl<'a> CallStart<'a> {
    /// The progress a resumed call starts from.
    pub(crate) fn progress(self) -> Option<&'a CallProgress> {
        match self {
            CallStart::Fresh => None,
            CallStart::From(progress) => Some(progress),
        }
    }
}

/// Where a call waits for a person, as a checkpoint saves it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Waiting {
    /// The question the person is asked.
    pub(crate) pending: PendingApproval,
    /// The policy key whose ladder handed the failure over, when one did: a resumed walk does
    /// not walk it again.
    pub(crate) key: Option<String>,
}

/// The argument sets a person approved for one call, each for one tool: an approval covers
/// exactly what was approved, so a fixer's rewrite or a fallback to another tool asks again.
/// Saved with the call's progress, so a resumed run does not ask twice about what was approved.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub(crate) struct Approved(Vec<(String, String)>);

impl Approved {
    /// Whether a person approved sending `arguments` to `tool`.
    pub(crate) fn covers(&self, tool: &str, arguments: &str) -> bool {
        self.0.iter().any(|(t, a)| t == tool && a == arguments)
    }

    /// Records that a person approved sending `arguments` to `tool`.
    pub(crate) fn add(&mut self, tool: &str, arguments: &str) {
        if !self.covers(tool, arguments) {
            self.0.push((tool.to_owned(), arguments.to_owned()));
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
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
    /// The argument sets a person approved for this call, each for one tool.
    #[serde(default, skip_serializing_if = "Approved::is_empty")]
    pub(crate) approved: Approved,
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
            approved: Approved::default(),
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
