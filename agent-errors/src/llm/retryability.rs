//! Which failed model calls the provider's transport makes again, and how.
//!
//! A model call is not a tool call: some failures are fixed by changing the request (a context
//! overflow is sent again with a smaller `max_tokens`), some by changing the credentials (a 401
//! after a refresh), some only by waiting (capacity), and some never (an exhausted quota, a
//! malformed request). These rules add to the status table in [`classify`](crate::classify);
//! whatever they do not decide, the table does.
//!
//! Foreground and background calls: only a [`CallSource`] on the foreground allowlist (by
//! default just [`CallSource::MAIN_AGENT`]) is retried on a capacity error. Capacity errors are
//! 529, any 5xx or 429 whose body says "overloaded", and plain 429 rate limits: a rate limit is a
//! capacity event too, and retrying background work into it only deepens it.

use std::collections::HashSet;

use super::CallSource;
use crate::classify::{
    ContextOverflow, HttpError, classify, is_overloaded, is_quota_exhausted, server_refuses,
};

/// Below this many tokens of room for the answer, a context overflow is not retried: the reply
/// would be too short to be useful.
pub(crate) const DEFAULT_MAX_TOKENS_FLOOR: u32 = 3000;

/// What to do about a failed model call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Send the same request again after a backoff (or the server's `Retry-After`).
    Retry,
    /// Send it once more with this `max_tokens` (a context overflow with room left).
    RetryWithMaxTokens(u32),
    /// Refresh the credentials, then send it once more (a 401).
    RefreshCredentials,
    /// Give up and return the error.
    Stop(StopReason),
}

/// Why a failed model call is not retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StopReason {
    /// The server said `x-should-retry: false`, or the status is one a retry never changes
    /// (402, 501).
    ServerSaidNo,
    /// The quota or spending limit is used up.
    QuotaExhausted,
    /// A capacity error (429, 529, overloaded) on a call not on the foreground allowlist.
    BackgroundCapacity,
    /// A context overflow that leaves less room than the floor, or none to gain.
    ContextTooSmall,
    /// The status table says calling again cannot help.
    NotRetryable,
}

/// The retry rules for model calls: the foreground allowlist and the `max_tokens` floor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RetryRules {
    foreground: HashSet<CallSource>,
    max_tokens_floor: u32,
}

impl Default for RetryRules {
    fn default() -> Self {
        RetryRules {
            foreground: HashSet::from([CallSource::MAIN_AGENT]),
            max_tokens_floor: DEFAULT_MAX_TOKENS_FLOOR,
        }
    }
}

impl RetryRules {
    /// Replaces the foreground allowlist. An empty list makes every call fail fast on capacity
    /// errors.
    pub(crate) fn with_foreground(mut self, sources: impl IntoIterator<Item = CallSource>) -> Self {
        self.foreground = sources.into_iter().collect();
        self
    }

    /// Sets the least `max_tokens` a context-overflow retry may ask for.
    pub(crate) fn with_max_tokens_floor(mut self, floor: u32) -> Self {
        self.max_tokens_floor = floor;
        self
    }

    /// Decides about a failed call from its status and headers (in `http`), the provider's error
    /// body, and who is waiting. Budgets (how many times) are the retry engine's business.
    pub(crate) fn assess(&self, http: &HttpError, body: &str, source: &CallSource) -> Verdict {
        let status = http.status();
        // Said first: an exhausted quota also makes the table refuse, but this is the reason.
        if (400..500).contains(&status) && (is_quota_exhausted(body) || http.says_quota_exhausted())
        {
            return Verdict::Stop(StopReason::QuotaExhausted);
        }
        if server_refuses(http) {
            return Verdict::Stop(StopReason::ServerSaidNo);
        }
        match status {
            400 => match ContextOverflow::parse(body) {
                Some(overflow) => match overflow.max_tokens_for_retry(self.max_tokens_floor) {
                    Some(max_tokens) => Verdict::RetryWithMaxTokens(max_tokens),
                    None => Verdict::Stop(StopReason::ContextTooSmall),
                },
                None => Verdict::Stop(StopReason::NotRetryable),
            },
            401 => Verdict::RefreshCredentials,
            _ if status == 429 || is_overloaded(status, body) => {
                if self.foreground.contains(source) {
                    Verdict::Retry
                } else {
                    Verdict::Stop(StopReason::BackgroundCapacity)
                }
            }
            _ if classify(http).is_retryable() => Verdict::Retry,
            _ => Verdict::Stop(StopReason::NotRetryable),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_follow_the_status_table() {
        let rules = RetryRules::default();
        let main = CallSource::MAIN_AGENT;
        let bg = CallSource::BACKGROUND;
        let assess = |status: u16, body: &str, source: &CallSource| {
            rules.assess(&HttpError::new(status, body), body, source)
        };
        assert_eq!(assess(503, "", &bg), Verdict::Retry);
        assert_eq!(assess(408, "", &bg), Verdict::Retry);
        assert_eq!(
            assess(404, "", &main),
            Verdict::Stop(StopReason::NotRetryable)
        );
        assert_eq!(
            assess(400, "bad temperature", &main),
            Verdict::Stop(StopReason::NotRetryable)
        );
        assert_eq!(assess(401, "", &main), Verdict::RefreshCredentials);
        assert_eq!(assess(529, "", &main), Verdict::Retry);
        assert_eq!(
            assess(529, "", &bg),
            Verdict::Stop(StopReason::BackgroundCapacity)
        );
        assert_eq!(
            assess(503, r#"{"error":{"type":"overloaded_error"}}"#, &bg),
            Verdict::Stop(StopReason::BackgroundCapacity)
        );
        assert_eq!(assess(429, "rate limited", &main), Verdict::Retry);
        assert_eq!(
            assess(429, "rate limited", &bg),
            Verdict::Stop(StopReason::BackgroundCapacity)
        );
        assert_eq!(
            assess(429, "insufficient_quota", &main),
            Verdict::Stop(StopReason::QuotaExhausted)
        );
        let no = HttpError::new(503, "down").with_header("X-Should-Retry", "false");
        assert_eq!(
            rules.assess(&no, "", &main),
            Verdict::Stop(StopReason::ServerSaidNo)
        );
    }

    #[test]
    fn allowlist_is_explicit() {
        let rules = RetryRules::default().with_foreground([CallSource::new("user_request")]);
        let e = HttpError::new(529, "Overloaded");
        assert_eq!(
            rules.assess(&e, "", &CallSource::MAIN_AGENT),
            Verdict::Stop(StopReason::BackgroundCapacity)
        );
        assert_eq!(
            rules.assess(&e, "", &CallSource::new("user_request")),
            Verdict::Retry
        );
    }

    /// For a bare status (no body, a foreground caller), the transport retries exactly what the
    /// classifier calls retryable: one table. A 401 is not retried unchanged either: it is sent
    /// again only with new credentials.
    #[test]
    fn the_transport_retries_exactly_what_classify_calls_retryable() {
        let rules = RetryRules::default();
        for status in 100..600 {
            let http = HttpError::new(status, "");
            let transport = rules.assess(&http, "", &CallSource::MAIN_AGENT) == Verdict::Retry;
            assert_eq!(transport, classify(&http).is_retryable(), "status {status}");
            let refused = HttpError::new(status, "").with_header("x-should-retry", "false");
            assert_eq!(
                rules.assess(&refused, "", &CallSource::MAIN_AGENT),
                Verdict::Stop(StopReason::ServerSaidNo),
                "status {status}"
            );
        }
    }
}
