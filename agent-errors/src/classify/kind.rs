//! What kind of failure an error is.

use std::fmt;

use serde::{Deserialize, Serialize};

/// What kind of failure an error is. Stable: loops and policies branch on it.
///
/// # Examples
///
/// A loop of your own branches on the kind, not on the message:
///
/// ```
/// use agent_errors::{ErrorKind, HttpError, classify::classify};
///
/// let kind = classify(&HttpError::new(429, "slow down")).kind;
/// let next_step = match kind {
///     ErrorKind::Transient | ErrorKind::Timeout | ErrorKind::ServerError => "retry soon",
///     ErrorKind::Quota => "retry after the window",
///     ErrorKind::Auth => "stop: fix the credentials",
///     ErrorKind::NotFound | ErrorKind::Validation => "tell the model",
///     ErrorKind::OutcomeUnknown => "check before calling again",
///     ErrorKind::Bug | ErrorKind::Unknown => "show a person",
///     _ => "show a person", // the enum is non-exhaustive
/// };
/// assert_eq!(next_step, "retry after the window");
/// assert!(kind.is_retryable());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorKind {
    /// A passing fault (connection reset, 503, lock contention): safe to retry.
    Transient,
    /// The call took too long: may succeed on retry.
    Timeout,
    /// Rate-limited (429): back off, then retry.
    Quota,
    /// The remote side failed (5xx): retry with care.
    ServerError,
    /// Credentials missing, expired or refused: never retried.
    Auth,
    /// The thing the call pointed at does not exist: the model should look elsewhere.
    NotFound,
    /// The request was malformed: the model should fix its arguments.
    Validation,
    /// A defect in the tool itself (a panic, an impossible state): never retried.
    Bug,
    /// Nothing told us what it was.
    Unknown,
    /// The call was running when the process running it stopped, and its result was never
    /// recorded: it may or may not have taken effect. Found only when a durable run resumes;
    /// never retried (calling again might do it twice).
    OutcomeUnknown,
}

impl ErrorKind {
    /// Every kind, in declaration order.
    pub const ALL: [ErrorKind; 10] = [
        ErrorKind::Transient,
        ErrorKind::Timeout,
        ErrorKind::Quota,
        ErrorKind::ServerError,
        ErrorKind::Auth,
        ErrorKind::NotFound,
        ErrorKind::Validation,
        ErrorKind::Bug,
        ErrorKind::Unknown,
        ErrorKind::OutcomeUnknown,
    ];

    /// Whether a failure of this kind can succeed when called again unchanged.
    pub const fn is_retryable(self) -> bool {
        matches!(
            self,
            ErrorKind::Transient | ErrorKind::Timeout | ErrorKind::Quota | ErrorKind::ServerError
        )
    }

    /// Whether failures of this kind follow only their own policy key, never `execution`:
    /// `auth` (fail closed) and `outcome_unknown` (a ladder for failures that happened must not
    /// re-send a call that may have taken effect).
    pub const fn follows_own_key(self) -> bool {
        matches!(self, ErrorKind::Auth | ErrorKind::OutcomeUnknown)
    }

    /// The snake_case name, as used for policy keys and shown to the model.
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Transient => "transient",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Quota => "quota",
            ErrorKind::ServerError => "server_error",
            ErrorKind::Auth => "auth",
            ErrorKind::NotFound => "not_found",
            ErrorKind::Validation => "validation",
            ErrorKind::Bug => "bug",
            ErrorKind::Unknown => "unknown",
            ErrorKind::OutcomeUnknown => "outcome_unknown",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
