use std::time::{Duration, SystemTime};

use super::{Classification, ErrorKind, Evidence};

/// An error from an HTTP service: a status, a message and the headers that matter for retrying.
///
/// Tools that call HTTP services return this (or wrap it) so the classifier can read the status
/// instead of guessing from text. The headers read are `retry-after` (seconds or an HTTP date),
/// `retry-after-ms` (milliseconds, sent by some model APIs) and `x-should-retry` (`true`/`false`).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use agent_errors::{ErrorKind, HttpError, classify::classify};
///
/// let err = HttpError::new(429, "slow down").with_header("Retry-After", "7");
/// let c = classify(&err);
/// assert_eq!(c.kind, ErrorKind::Quota);
/// assert_eq!(c.retry_after, Some(Duration::from_secs(7)));
/// ```
///
/// Its `Debug` redacts: credential headers show as `[REDACTED]` and the message goes through
/// [`redact`](crate::redact::redact), because errors are logged with `{:?}` more often than not.
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
#[error("HTTP {status}: {message}")]
pub struct HttpError {
    status: u16,
    message: String,
    headers: Vec<(String, String)>,
    /// The provider's machine-readable error code or type from the body, when it had one.
    code: Option<String>,
}

/// Headers whose values are credentials.
const CREDENTIAL_HEADERS: [&str; 7] = [
    "authorization",
    "proxy-authorization",
    "x-api-key",
    "api-key",
    "x-auth-token",
    "cookie",
    "set-cookie",
];

impl std::fmt::Debug for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let headers: Vec<(&str, std::borrow::Cow<'_, str>)> = self.redacted_headers().collect();
        f.debug_struct("HttpError")
            .field("status", &self.status)
            .field("message", &crate::redact::redact(&self.message))
            .field("headers", &headers)
            .field("code", &self.code)
            .finish()
    }
}

impl HttpError {
    /// Each header with its value redacted, a credential header's replaced whole.
    fn redacted_headers(&self) -> impl Iterator<Item = (&str, std::borrow::Cow<'_, str>)> {
        self.headers.iter().map(|(name, value)| {
            let credential = CREDENTIAL_HEADERS
                .iter()
                .any(|h| name.eq_ignore_ascii_case(h));
            let value = if credential {
                std::borrow::Cow::Borrowed(crate::redact::REDACTED)
            } else {
                crate::redact::redact(value)
            };
            (name.as_str(), value)
        })
    }

    /// A copy whose message and headers are redacted as its `Debug` shows them: the status and
    /// the retry headers are kept, so it classifies as the original does.
    pub(crate) fn redacted(&self) -> HttpError {
        HttpError {
            status: self.status,
            message: crate::redact::redact(&self.message).into_owned(),
            headers: self
                .redacted_headers()
                .map(|(name, value)| (name.to_owned(), value.into_owned()))
                .collect(),
            code: self.code.clone(),
        }
    }

    /// An error with this status code and message.
    pub fn new(status: u16, message: impl Into<String>) -> Self {
        HttpError {
            status,
            message: message.into(),
            headers: Vec::new(),
            code: None,
        }
    }

    /// Adds the provider's machine-readable error code (OpenAI's `code`, else the error's
    /// `type`): a code such as `insufficient_quota` is read even when the message does not say
    /// so.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::{HttpError, classify::classify};
    ///
    /// let err = HttpError::new(429, "Request failed.").with_code("insufficient_quota");
    /// assert_eq!(err.code(), Some("insufficient_quota"));
    /// assert!(!classify(&err).is_retryable());
    /// ```
    #[must_use]
    pub fn with_code(mut self, code: impl Into<String>) -> Self {
        self.code = Some(code.into());
        self
    }

    /// The provider's error code, when one was given with [`with_code`](Self::with_code).
    pub fn code(&self) -> Option<&str> {
        self.code.as_deref()
    }

    /// Whether the message or the code says the quota or spending limit is used up.
    pub(crate) fn says_quota_exhausted(&self) -> bool {
        is_quota_exhausted(&self.message) || self.code.as_deref().is_some_and(is_quota_exhausted)
    }

    /// Adds a response header (`retry-after`, `x-should-retry`, ...). Names are case-insensitive.
    #[must_use]
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// The status code.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The first header of that name, compared case-insensitively.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// What the status and headers say, with `Retry-After` capped at `retry_after_cap`.
    ///
    /// A body that says the quota or spending limit is used up makes it `Quota` that must not
    /// be retried, whatever the status (429, 402, 403 or 400 depending on the provider): waiting
    /// does not refill an account. The first *valid* `Retry-After` wins: a garbage one before a
    /// good one is skipped, not taken as "no advice".
    pub(crate) fn classification(&self, retry_after_cap: Duration) -> Classification {
        let mut c = Classification::from_status(self.status);
        if (400..500).contains(&self.status) && self.says_quota_exhausted() {
            c.kind = ErrorKind::Quota;
            c.should_retry = Some(false);
        }
        if self.headers.is_empty() {
            return c;
        }
        let retry_after_ms = self
            .headers_named("retry-after-ms")
            .find_map(|v| parse_delta(v, 1, retry_after_cap));
        c.retry_after = retry_after_ms.or_else(|| {
            self.headers_named("retry-after")
                .find_map(|v| parse_retry_after_at(v, SystemTime::now, retry_after_cap))
        });
        if let Some(verdict) = self.server_verdict() {
            c.should_retry = Some(verdict);
        }
        c
    }

    /// Every value of the headers of that name, in order.
    fn headers_named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.headers
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// What `x-should-retry` says, when it says `true` or `false`.
    pub(crate) fn server_verdict(&self) -> Option<bool> {
        self.header("x-should-retry").and_then(parse_should_retry)
    }
}

/// The kind a status code stands for, and whether the table itself forbids retrying.
///
/// See the table in the [module docs](crate::classify#status-codes).
pub(crate) const fn status_kind(status: u16) -> (ErrorKind, Option<bool>) {
    match status {
        400 | 405 | 413 | 414 | 422 => (ErrorKind::Validation, None),
        401 | 403 | 407 => (ErrorKind::Auth, None),
        404 | 410 => (ErrorKind::NotFound, None),
        408 | 504 => (ErrorKind::Timeout, None),
        409 | 423 | 425 | 500 | 502 | 503 | 529 => (ErrorKind::Transient, None),
        429 => (ErrorKind::Quota, None),
        // Payment Required: a spending limit, which waiting does not lift.
        402 => (ErrorKind::Quota, Some(false)),
        // Not Implemented will not become implemented by asking again.
        501 => (ErrorKind::ServerError, Some(false)),
        // Any other client error says the request itself was wrong.
        400..=499 => (ErrorKind::Validation, None),
        500..=599 => (ErrorKind::ServerError, None),
        _ => (ErrorKind::Unknown, None),
    }
}

/// Reads a `Retry-After` value: delta-seconds or an HTTP date, relative to `now`.
///
/// Returns `None` for anything else (garbage is ignored, never guessed at). A date in the past
/// means "now" (`Duration::ZERO`); an absurd value (a date years ahead, more digits than fit in a
/// `u64`) is cut to `cap`.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use agent_errors::classify::parse_retry_after;
///
/// let cap = Duration::from_secs(300);
/// let now = SystemTime::now();
/// assert_eq!(parse_retry_after("7", now, cap), Some(Duration::from_secs(7)));
/// assert_eq!(parse_retry_after("99999999999999999999999", now, cap), Some(cap));
/// assert_eq!(parse_retry_after("soon", now, cap), None);
/// ```
pub fn parse_retry_after(value: &str, now: SystemTime, cap: Duration) -> Option<Duration> {
    parse_retry_after_at(value, || now, cap)
}

/// [`parse_retry_after`], reading the clock only for a date: the common delta-seconds case
/// stays free of a clock call.
fn parse_retry_after_at(
    value: &str,
    now: impl FnOnce() -> SystemTime,
    cap: Duration,
) -> Option<Duration> {
    let value = value.trim_ascii();
    if let Some(delay) = parse_delta(value, 1000, cap) {
        return Some(delay);
    }
    let date = httpdate::parse_http_date(value).ok()?;
    let delay = date.duration_since(now()).unwrap_or(Duration::ZERO);
    Some(delay.min(cap))
}

/// An unsigned integer count of `unit_ms` milliseconds, capped; `None` unless all ASCII digits.
fn parse_delta(value: &str, unit_ms: u64, cap: Duration) -> Option<Duration> {
    let digits = value.trim_ascii().as_bytes();
    if digits.is_empty() {
        return None;
    }
    // `None` once out of range: all digits yet absurdly long is capped, not ignored.
    let mut count = Some(0u64);
    for &b in digits {
        if !b.is_ascii_digit() {
            return None;
        }
        count = count
            .and_then(|n| n.checked_mul(10))
            .and_then(|n| n.checked_add(u64::from(b - b'0')));
    }
    Some(match count {
        Some(n) => Duration::from_millis(n.saturating_mul(unit_ms)).min(cap),
        None => cap,
    })
}

fn parse_should_retry(value: &str) -> Option<bool> {
    let value = value.trim_ascii();
    if value.eq_ignore_ascii_case("true") {
        Some(true)
    } else if value.eq_ignore_ascii_case("false") {
        Some(false)
    } else {
        None
    }
}

impl Classification {
    /// What an HTTP status code alone says: its kind, the status, and for 501 a refusal to retry.
    ///
    /// ```
    /// use agent_errors::{ErrorKind, classify::Classification};
    ///
    /// assert_eq!(Classification::from_status(503).kind, ErrorKind::Transient);
    /// assert!(!Classification::from_status(501).is_retryable());
    /// ```
    pub const fn from_status(status: u16) -> Classification {
        let (kind, should_retry) = status_kind(status);
        Classification {
            kind,
            retry_after: None,
            should_retry,
            status: Some(status),
            evidence: Evidence::Status(status),
        }
    }
}

/// Whether an error body says the account's quota or spending limit is used up (OpenAI's
/// `insufficient_quota`), which waiting does not fix, unlike a rate limit.
pub(crate) fn is_quota_exhausted(body: &str) -> bool {
    let body = body.to_ascii_lowercase();
    [
        "insufficient_quota",
        "exceeded your current quota",
        "billing_hard_limit",
        "spending limit",
        "credit balance is too low",
    ]
    .iter()
    .any(|needle| body.contains(needle))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quota_exhaustion_is_told_from_rate_limits() {
        assert!(is_quota_exhausted(
            r#"{"error":{"code":"insufficient_quota","message":"You exceeded your current quota, please check your plan and billing details."}}"#
        ));
        assert!(!is_quota_exhausted(
            "Rate limit reached for gpt-4o on tokens per min (TPM): Limit 30000, Used 29000."
        ));
        // A plain rate limit that points at the billing page is still a rate limit.
        assert!(!is_quota_exhausted(
            "Rate limit reached for requests per min. Add a payment method at https://platform.openai.com/account/billing to increase your rate limit."
        ));
    }

    const CAP: Duration = Duration::from_secs(300);

    #[test]
    fn http_date_in_the_future_is_the_distance_to_it() {
        let now = httpdate::parse_http_date("Wed, 21 Oct 2015 07:28:00 GMT").unwrap();
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:30 GMT", now, CAP),
            Some(Duration::from_secs(30))
        );
    }

    #[test]
    fn http_date_in_the_past_means_now_and_far_future_is_capped() {
        let now = httpdate::parse_http_date("Wed, 21 Oct 2015 07:28:00 GMT").unwrap();
        assert_eq!(
            parse_retry_after("Tue, 20 Oct 2015 07:28:00 GMT", now, CAP),
            Some(Duration::ZERO)
        );
        assert_eq!(
            parse_retry_after("Fri, 21 Oct 2044 07:28:00 GMT", now, CAP),
            Some(CAP)
        );
    }

    #[test]
    fn garbage_is_ignored() {
        let now = SystemTime::now();
        for garbage in [
            "",
            " ",
            "-5",
            "1.5",
            "7s",
            "soon",
            "0x10",
            "Wed, 32 Oct 2015",
        ] {
            assert_eq!(parse_retry_after(garbage, now, CAP), None, "{garbage:?}");
        }
    }

    #[test]
    fn retry_after_ms_wins_over_seconds() {
        let err = HttpError::new(429, "x")
            .with_header("retry-after", "7")
            .with_header("retry-after-ms", "1500");
        assert_eq!(
            err.classification(CAP).retry_after,
            Some(Duration::from_millis(1500))
        );
    }
}
