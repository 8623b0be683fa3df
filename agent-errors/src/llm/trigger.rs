//! What makes a [`FallbackModel`](super::FallbackModel) give up on its primary for one request:
//! [`FallbackOn`], read from a failure's classification or from the answer itself.

use std::time::Duration;

use super::{ChatRequest, ChatResponse, MAX_RETRY_AFTER};
use crate::ErrorKind;
use crate::chat::{FinishReason, ResponseFormat};
use crate::classify::{classify, is_overload_error, server_delay};
use crate::structured::{AnswerSchema, strip_code_fence};

/// A reason for a [`FallbackModel`](super::FallbackModel) to send a request to its fallback.
///
/// Chosen with [`FallbackModel::on`](super::FallbackModel::on); the default is
/// `[FallbackOn::Overload]` alone. Whatever the triggers, an invalid request (`validation`: a
/// 400, a request rig could not build) never falls back: the fallback could not serve it either.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use agent_errors::llm::FallbackOn;
///
/// fn describe(trigger: &FallbackOn) -> String {
///     match trigger {
///         FallbackOn::Overload => "the primary stayed overloaded".into(),
///         FallbackOn::RateLimit { patience } => format!("a rate limit asked for more than {patience:?}"),
///         FallbackOn::Outage => "the primary stayed down through its retries".into(),
///         FallbackOn::AuthOrConfig => "the primary's credentials or configuration failed".into(),
///         FallbackOn::BadAnswer => "the primary's answer was unusable".into(),
///         _ => "another reason".into(),
///     }
/// }
/// assert!(describe(&FallbackOn::RateLimit { patience: Duration::from_secs(5) }).contains("5s"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FallbackOn {
    /// The primary was overloaded (529, or a 429/5xx that says "overloaded") on each of its
    /// `after` calls.
    Overload,
    /// A rate limit (429) whose `Retry-After` is longer than `patience`: the fallback answers
    /// at once. A shorter one is waited out on the primary, within its `after` calls.
    RateLimit {
        /// The longest `Retry-After` worth waiting for.
        patience: Duration,
    },
    /// A failure that can pass (5xx, a timeout, a broken connection) still failing after the
    /// primary's `after` calls.
    Outage,
    /// The primary's credentials or configuration failed: 401, 403, 404 (an unknown model), a
    /// quota or spending limit that is used up. The fallback answers at once.
    AuthOrConfig,
    /// The primary answered, unusably: nothing (no text, no tool call), cut off at the token
    /// limit, a refusal or filtered content, or structured output that does not fit the
    /// requested format: not JSON, or against any rule of its JSON Schema at any depth (the
    /// check an agent makes of its final answer).
    BadAnswer,
}

/// The triggers of one fallback model, as flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Triggers {
    pub(crate) overload: bool,
    pub(crate) rate_limit: Option<Duration>,
    pub(crate) outage: bool,
    pub(crate) auth_or_config: bool,
    pub(crate) bad_answer: bool,
}

impl Triggers {
    /// The default: overload only, as before triggers could be chosen.
    pub(crate) const OVERLOAD: Triggers = Triggers {
        overload: true,
        rate_limit: None,
        outage: false,
        auth_or_config: false,
        bad_answer: false,
    };

    pub(crate) fn of(triggers: impl IntoIterator<Item = FallbackOn>) -> Triggers {
        let mut set = Triggers::default();
        for trigger in triggers {
            match trigger {
                FallbackOn::Overload => set.overload = true,
                FallbackOn::RateLimit { patience } => set.rate_limit = Some(patience),
                FallbackOn::Outage => set.outage = true,
                FallbackOn::AuthOrConfig => set.auth_or_config = true,
                FallbackOn::BadAnswer => set.bad_answer = true,
            }
        }
        set
    }

    /// Whether the primary is worth calling again for this failure before falling back, and
    /// after how long the server asked (`None`: the schedule decides).
    pub(crate) fn retry_primary(
        &self,
        error: &(dyn std::error::Error + 'static),
    ) -> Option<Option<Duration>> {
        let server = server_delay(error, MAX_RETRY_AFTER);
        if self.overload && is_overload_error(error) {
            return Some(server);
        }
        let class = classify(error);
        if !class.is_retryable() {
            return None;
        }
        match (class.kind, self.rate_limit) {
            (ErrorKind::Quota, Some(patience)) => {
                let wait = class.retry_after.or(server);
                wait.is_none_or(|wait| wait <= patience).then_some(wait)
            }
            (ErrorKind::Quota, None) => None,
            _ => self.outage.then_some(server),
        }
    }

    /// Why the fallback should answer this failure, if it should.
    pub(crate) fn on_failure(
        &self,
        error: &(dyn std::error::Error + 'static),
    ) -> Option<&'static str> {
        if self.overload && is_overload_error(error) {
            return Some("overload");
        }
        let class = classify(error);
        match class.kind {
            // The request itself is wrong: no model of the chain can answer it.
            ErrorKind::Validation => None,
            ErrorKind::Quota if class.is_retryable() => self.rate_limit.map(|_| "rate_limit"),
            ErrorKind::Auth | ErrorKind::NotFound | ErrorKind::Quota => {
                self.auth_or_config.then_some("auth_or_config")
            }
            _ if class.is_retryable() => self.outage.then_some("outage"),
            _ => None,
        }
    }

    /// Why this answer should go to the fallback instead, if it should.
    pub(crate) fn on_answer(
        &self,
        request: &ChatRequest,
        answer: &ChatResponse,
    ) -> Option<&'static str> {
        if !self.bad_answer {
            return None;
        }
        let text = answer.text.as_deref().unwrap_or_default();
        if answer.tool_calls.is_empty() && text.trim().is_empty() {
            return Some("empty_answer");
        }
        match answer.finish_reason {
            Some(FinishReason::Length) => return Some("cut_off"),
            Some(FinishReason::Refusal | FinishReason::ContentFilter) => return Some("refusal"),
            _ => {}
        }
        match &request.options.response_format {
            Some(format) if answer.tool_calls.is_empty() && !fits(format, text) => {
                Some("invalid_output")
            }
            _ => None,
        }
    }
}

/// Whether `text` is JSON of the requested shape: an object for `JsonObject`; for a schema,
/// every rule of it, as an agent checks its final answer.
fn fits(format: &ResponseFormat, text: &str) -> bool {
    if let ResponseFormat::JsonObject = format {
        let value = serde_json::from_str::<serde_json::Value>(strip_code_fence(text));
        return value.is_ok_and(|value| value.is_object());
    }
    AnswerSchema::of(format).problems(text).is_empty()
}
