//! Classification: what kind of failure an error *is*, read from types and status codes before
//! anything it *says*.
//!
//! Error text is written by whoever raised the error and carries no contract; an error's type
//! and an HTTP status are facts. [`classify`] therefore weighs evidence in this order:
//!
//! 1. **Rules** registered for your own error types ([`register`], or [`Classifier::rule`]).
//!    Every level of the chain is offered to every rule (outermost level first, rules in the
//!    order they were added); the first rule to answer `Some(kind)` decides.
//! 2. **Typed facts**, found by downcasting each level of the chain: [`std::io::Error`] by its
//!    [`io::ErrorKind`](std::io::ErrorKind) (see `impl From<io::ErrorKind> for ErrorKind`),
//!    [`tokio::time::error::Elapsed`] (timeout), [`serde_json::Error`] (validation),
//!    [`HttpError`] and, with the `reqwest` feature, `reqwest::Error`. With the `rig` feature, a
//!    rig `ProviderError` (by its variant, status, retry headers and machine code, never its
//!    body) and a rig tool's `ToolExecutionError` (by its kind, status and retryable flag).
//! 3. **Status codes**, carried by [`HttpError`] and `reqwest::Error` (table below).
//! 4. **The `source()` chain.** Steps 2 and 3 are read at every level and the *deepest*
//!    conclusive fact wins: a wrapper that says "request timed out" around an `io::Error` of kind
//!    `PermissionDenied` is [`ErrorKind::Auth`]. A status and a typed fact are weighed alike, by
//!    depth. For an `io::Error` that wraps a custom error, the wrapped error is the next level
//!    (`io::Error::get_ref`), since `io::Error::source` skips it. A fact whose kind is
//!    [`ErrorKind::Unknown`] (an `io::Error` of kind `Other`) is not conclusive and lets the
//!    levels around it speak. The chain is read to a depth of 64 levels at most.
//! 5. **Message patterns**, only when nothing above concluded: case-insensitive, word-bounded
//!    phrases ("timed out", "too many requests", "permission denied", "not found", ...), tried on
//!    each level's message, deepest level first. Retryable kinds are tried before `Auth`, so
//!    "cannot access host: connection timed out" is a timeout, and "accessor" or "forbiddenness"
//!    match nothing. A message without such a phrase that writes an HTTP status ("HTTP 503",
//!    "HTTP/1.1 429", "status code: 401") gets that status's kind from the table below. The
//!    regexes are compiled once, on first use.
//!
//! Which errors are read by type and which by text: the types of step 2 (and yours, with a
//! rule) by what they are; an error that is only text has nothing else to read, and gets step
//! 5. That is every `Result<_, String>` or `Result<_, &str>` tool (the text becomes a
//! `BoxError`), a `Box<dyn Error>` made from a message, an `anyhow::Error` of `anyhow!("..")`
//! (its context levels are levels of the chain), and `io::Error::other("...")`. So a tool whose
//! error says "HTTP 503", "connection refused" or "timed out" is `Transient` or `Timeout`, and
//! retried by a `retry` policy, whatever type carried the words; a typed fact or a status
//! anywhere in the chain still comes first.
//!
//! Whatever decided the kind, the HTTP facts found anywhere in the chain are kept on the
//! [`Classification`]: the status, `Retry-After`, and `x-should-retry`. So a rule that says
//! `Quota` for your wrapper still carries the server's `Retry-After`.
//!
//! # Status codes
//!
//! | status | kind | retryable |
//! | --- | --- | --- |
//! | 400, 405, 413, 414, 422, other 4xx | [`Validation`](ErrorKind::Validation) | no |
//! | 401, 403, 407 | [`Auth`](ErrorKind::Auth) | no |
//! | 402 | [`Quota`](ErrorKind::Quota), `should_retry: Some(false)` (a spending limit) | no |
//! | 404, 410 | [`NotFound`](ErrorKind::NotFound) | no |
//! | 408, 504 | [`Timeout`](ErrorKind::Timeout) | yes |
//! | 409, 423, 425, 500, 502, 503, 529 | [`Transient`](ErrorKind::Transient) | yes |
//! | 429 | [`Quota`](ErrorKind::Quota) | yes |
//! | 501 | [`ServerError`](ErrorKind::ServerError), `should_retry: Some(false)` | no |
//! | other 5xx | [`ServerError`](ErrorKind::ServerError) | yes |
//! | anything else | [`Unknown`](ErrorKind::Unknown) (not conclusive) | no |
//!
//! 501 keeps the kind `ServerError` (the remote side cannot do it) while
//! [`Classification::is_retryable`] says no, through `should_retry`.
//!
//! # I/O errors
//!
//! | `io::ErrorKind` | kind |
//! | --- | --- |
//! | `TimedOut` | [`Timeout`](ErrorKind::Timeout) |
//! | `ConnectionRefused`, `ConnectionReset`, `ConnectionAborted`, `NotConnected`, `BrokenPipe`, `Interrupted`, `WouldBlock`, `UnexpectedEof`, `HostUnreachable`, `NetworkUnreachable`, `NetworkDown`, `AddrInUse`, `ResourceBusy` | [`Transient`](ErrorKind::Transient) |
//! | `PermissionDenied` | [`Auth`](ErrorKind::Auth) |
//! | `NotFound` | [`NotFound`](ErrorKind::NotFound) |
//! | `InvalidInput`, `InvalidData`, `AlreadyExists`, `NotADirectory`, `IsADirectory`, `DirectoryNotEmpty`, `FileTooLarge` | [`Validation`](ErrorKind::Validation) |
//! | anything else, `Other` included | [`Unknown`](ErrorKind::Unknown) (not conclusive) |
//!
//! With the `reqwest` feature, a `reqwest::Error` is read by its status when it has one, else
//! as a timeout, a connection, sending or body failure (transient), a body that could not be decoded
//! (server error; the decoder's own error below it is not read, since it describes the
//! response and not the model's arguments), or a request that could not be built (validation).
//!
//! # Retry-After
//!
//! `Retry-After` is read as delta-seconds or an HTTP date ([`parse_retry_after`]);
//! `retry-after-ms` (milliseconds) is preferred when present. Values are capped, by default at
//! [`DEFAULT_RETRY_AFTER_CAP`] (5 minutes), configurable with
//! [`Classifier::with_retry_after_cap`]; anything that is neither is ignored.
//! `x-should-retry: false` is recorded as `should_retry: Some(false)`, which stops retries; a
//! server's `true` cannot make a non-retryable kind retryable.
//!
//! # Your own error types
//!
//! ```
//! use agent_errors::{ErrorKind, classify::{self, Classifier, Evidence}};
//!
//! #[derive(Debug, thiserror::Error)]
//! #[error("ledger said: {0}")]
//! struct LedgerError(u32);
//!
//! // For every `classify` call in the process:
//! classify::register(|e: &LedgerError| (e.0 == 7).then_some(ErrorKind::Auth));
//! assert_eq!(classify::classify(&LedgerError(7)).kind, ErrorKind::Auth);
//!
//! // Or scoped to one value, which ignores the global registry unless asked:
//! let classifier = Classifier::new().rule(|_: &LedgerError| Some(ErrorKind::Quota));
//! let c = classifier.classify(&LedgerError(7));
//! assert_eq!((c.kind, c.evidence), (ErrorKind::Quota, Evidence::Rule));
//! ```

mod body;
pub(crate) mod http;
#[cfg(feature = "reqwest")]
mod http_response;
pub(crate) mod kind;
mod patterns;
mod reach;
mod redacted;
#[cfg(feature = "rig")]
pub(crate) mod rig;
mod rules;
mod typed;

use std::error::Error;
use std::fmt::Write as _;
use std::time::Duration;

pub use body::{ContextOverflow, is_overload_error};
// `ErrorKind` and `HttpError` are named at the crate root; this module only uses them.
pub(crate) use http::HttpError;
pub use http::parse_retry_after;
#[cfg(feature = "reqwest")]
pub use http_response::MAX_ERROR_BODY_BYTES;
pub(crate) use kind::ErrorKind;
pub use redacted::RedactedError;

pub(crate) use body::server_delay;
pub(crate) use reach::never_reached;

/// The kind the wording of `text` points at (a status written in it, then the phrases of the
/// last resort), if any: what a failure that is only text is classified by.
pub(crate) fn kind_of_text(text: &str) -> Option<ErrorKind> {
    patterns::kind_of_message(text)
}
#[cfg(feature = "_provider")]
pub(crate) use body::status_of_error_type;
#[cfg(feature = "_provider")]
pub(crate) use body::{is_overloaded, server_refuses};
#[cfg(feature = "_provider")]
pub(crate) use http::is_quota_exhausted;

use rules::Rule;
use typed::Known;

/// What the classifier concluded, and from which evidence.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use agent_errors::{ErrorKind, HttpError, classify::{Evidence, classify}};
///
/// let error = HttpError::new(503, "busy").with_header("retry-after", "7");
/// let class = classify(&error);
/// assert_eq!((class.kind, class.status, class.evidence), (ErrorKind::Transient, Some(503), Evidence::Status(503)));
/// assert_eq!(class.retry_after, Some(Duration::from_secs(7)));
/// assert!(class.is_retryable());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Classification {
    /// The kind of failure.
    pub kind: ErrorKind,
    /// How long the server asked us to wait (`Retry-After`), already capped.
    pub retry_after: Option<Duration>,
    /// Whether retrying may help, when something other than the kind says so: the server's
    /// `x-should-retry` header, or the status table (501 and 402 say `Some(false)`).
    pub should_retry: Option<bool>,
    /// The HTTP status, when one was found.
    pub status: Option<u16>,
    /// What the conclusion rests on.
    pub evidence: Evidence,
}

/// What a [`Classification`] rests on, strongest first.
///
/// # Examples
///
/// How sure a classification is, for a log line or a metric label:
///
/// ```
/// use agent_errors::classify::{Evidence, classify};
///
/// let class = classify(&std::io::Error::other("connection reset by peer"));
/// let basis = match class.evidence {
///     Evidence::Rule => "your rule".to_owned(),
///     Evidence::Type(name) => format!("the error type {name}"),
///     Evidence::Status(status) => format!("HTTP {status}"),
///     Evidence::Pattern => "the message's words".to_owned(),
///     Evidence::Nothing => "nothing".to_owned(),
///     _ => "something new".to_owned(), // the enum is non-exhaustive
/// };
/// println!("{:?} because of {basis}", class.kind);
/// assert_ne!(class.evidence, Evidence::Nothing);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Evidence {
    /// A rule the user registered.
    Rule,
    /// A known error type (named).
    Type(&'static str),
    /// An HTTP status code.
    Status(u16),
    /// A word-bounded phrase in the message text.
    Pattern,
    /// Nothing matched.
    Nothing,
}

impl Classification {
    /// A classification of `kind` with no further facts.
    pub const fn new(kind: ErrorKind, evidence: Evidence) -> Self {
        Classification {
            kind,
            retry_after: None,
            should_retry: None,
            status: None,
            evidence,
        }
    }

    /// Whether calling again can help: the kind is retryable and the server did not say no.
    pub const fn is_retryable(&self) -> bool {
        self.kind.is_retryable() && !matches!(self.should_retry, Some(false))
    }
}

/// The default cap on a server's `Retry-After`: 5 minutes, long enough for a rate-limit window,
/// short enough that a tool call does not hang for a day on a bogus date.
pub const DEFAULT_RETRY_AFTER_CAP: Duration = Duration::from_secs(5 * 60);

/// Classifies an error by what it is, using the rules registered with [`register`]: see the
/// [module docs](self) for the order of evidence.
///
/// # Examples
///
/// ```
/// use agent_errors::{classify::classify, ErrorKind};
///
/// let err = std::io::Error::new(std::io::ErrorKind::PermissionDenied, "timed out, they say");
/// assert_eq!(classify(&err).kind, ErrorKind::Auth);
/// ```
pub fn classify(error: &(dyn Error + 'static)) -> Classification {
    classify_chain(error, &[], true, DEFAULT_RETRY_AFTER_CAP)
}

/// Registers a rule for the error type `E`, consulted by every [`classify`] call in the process
/// before the built-in evidence (and by a [`Classifier`] built
/// [`with_global_rules`](Classifier::with_global_rules)).
///
/// The rule is offered every level of the chain that is an `E`; returning `None` lets the other
/// rules and the built-in evidence decide. Rules cannot be removed: register them once, at
/// start-up. For rules scoped to one agent or test, use a [`Classifier`].
///
/// # Examples
///
/// Once, at start-up: your own error type's variants get their kinds.
///
/// ```
/// use agent_errors::{ErrorKind, classify::{classify, register}};
///
/// #[derive(Debug, thiserror::Error)]
/// enum LedgerError {
///     #[error("ledger is locked")]
///     Locked,
///     #[error("no such account")]
///     NoAccount,
/// }
///
/// register(|error: &LedgerError| match error {
///     LedgerError::Locked => Some(ErrorKind::Transient),
///     LedgerError::NoAccount => Some(ErrorKind::NotFound),
/// });
/// assert_eq!(classify(&LedgerError::Locked).kind, ErrorKind::Transient);
/// ```
pub fn register<E, F>(rule: F)
where
    E: Error + 'static,
    F: Fn(&E) -> Option<ErrorKind> + Send + Sync + 'static,
{
    rules::push(Rule::new(rule));
}

/// A classifier with its own rules and `Retry-After` cap, independent of the global registry.
///
/// Cheap to clone (rules are shared).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use agent_errors::{ErrorKind, HttpError};
/// use agent_errors::classify::Classifier;
///
/// let classifier = Classifier::new().with_retry_after_cap(Duration::from_secs(30));
/// let err = HttpError::new(503, "busy").with_header("retry-after", "3600");
/// assert_eq!(classifier.classify(&err).retry_after, Some(Duration::from_secs(30)));
/// ```
#[derive(Debug, Clone)]
pub struct Classifier {
    rules: Vec<Rule>,
    global_rules: bool,
    retry_after_cap: Duration,
}

impl Default for Classifier {
    fn default() -> Self {
        Classifier::new()
    }
}

impl Classifier {
    /// No rules, the default cap ([`DEFAULT_RETRY_AFTER_CAP`]), and the global registry ignored.
    pub fn new() -> Self {
        Classifier {
            rules: Vec::new(),
            global_rules: false,
            retry_after_cap: DEFAULT_RETRY_AFTER_CAP,
        }
    }

    /// Adds a rule for the error type `E`, tried after the rules added before it.
    #[must_use]
    pub fn rule<E, F>(mut self, rule: F) -> Self
    where
        E: Error + 'static,
        F: Fn(&E) -> Option<ErrorKind> + Send + Sync + 'static,
    {
        self.rules.push(Rule::new(rule));
        self
    }

    /// Also consults the rules registered with [`register`], after this classifier's own.
    #[must_use]
    pub fn with_global_rules(mut self) -> Self {
        self.global_rules = true;
        self
    }

    /// Caps any `Retry-After` at `cap`.
    #[must_use]
    pub fn with_retry_after_cap(mut self, cap: Duration) -> Self {
        self.retry_after_cap = cap;
        self
    }

    /// The cap on `Retry-After`.
    pub fn retry_after_cap(&self) -> Duration {
        self.retry_after_cap
    }

    /// Classifies `error` with this classifier's rules and cap.
    pub fn classify(&self, error: &(dyn Error + 'static)) -> Classification {
        classify_chain(error, &self.rules, self.global_rules, self.retry_after_cap)
    }
}

/// How many levels of `source()` are read at most: a guard against pathological chains.
const MAX_DEPTH: usize = 64;

/// An error and its causes, outermost first: the one walk over `source()` the crate makes.
///
/// For an [`std::io::Error`] that wraps a custom error, the wrapped error is the next level
/// (`io::Error::source` skips it). The walk stops after 64 levels, a guard against
/// pathological chains.
///
/// # Examples
///
/// ```
/// use agent_errors::HttpError;
/// use agent_errors::classify::chain;
///
/// let err = std::io::Error::other(HttpError::new(503, "busy"));
/// assert_eq!(chain(&err).count(), 2);
/// ```
pub fn chain<'a>(
    error: &'a (dyn Error + 'static),
) -> impl Iterator<Item = &'a (dyn Error + 'static)> + 'a {
    std::iter::successors(Some(error), |level| next_level(*level)).take(MAX_DEPTH)
}

/// What one level of a failure says to the model, and whether the levels below it may speak
/// too. Every level says its `Display`, except a rig tool's `ToolExecutionError`: its message
/// (and every cause below it) is for operators, which rig keeps from the model by design, so it
/// says only its model feedback.
pub(crate) fn model_words(level: &(dyn Error + 'static)) -> (String, bool) {
    #[cfg(feature = "rig")]
    if let Some(tool) = level.downcast_ref::<rig_core::tool::ToolExecutionError>() {
        return (rig::tool_feedback(tool), false);
    }
    (level.to_string(), true)
}

/// Whether a level of a failure holds words for operators only (see [`model_words`]).
pub(crate) fn is_for_operators(level: &(dyn Error + 'static)) -> bool {
    #[cfg(feature = "rig")]
    if level.is::<rig_core::tool::ToolExecutionError>() {
        return true;
    }
    let _ = level;
    false
}

/// The first `T` in an error's [`chain`], the error itself included.
///
/// # Examples
///
/// ```
/// use agent_errors::HttpError;
/// use agent_errors::classify::find_in_chain;
///
/// let err = std::io::Error::other(HttpError::new(503, "busy"));
/// assert_eq!(find_in_chain::<HttpError>(&err).map(HttpError::status), Some(503));
/// ```
pub fn find_in_chain<'a, T: Error + 'static>(error: &'a (dyn Error + 'static)) -> Option<&'a T> {
    chain(error).find_map(|level| level.downcast_ref::<T>())
}

fn next_level<'a>(level: &'a (dyn Error + 'static)) -> Option<&'a (dyn Error + 'static)> {
    match Known::of(level) {
        Some(known) => known.next(level),
        None => level.source(),
    }
}

fn classify_chain(
    error: &(dyn Error + 'static),
    own_rules: &[Rule],
    global_rules: bool,
    retry_after_cap: Duration,
) -> Classification {
    let registered = if global_rules {
        rules::snapshot()
    } else {
        None
    };
    let registered = registered.as_deref().unwrap_or(&[]);
    let any_rules = !own_rules.is_empty() || !registered.is_empty();

    let mut rule_verdict = None;
    // The deepest conclusive fact and the deepest level with a status, by depth.
    let mut deepest_fact: Option<(usize, Known<'_>)> = None;
    let mut deepest_http: Option<(usize, Known<'_>)> = None;
    let mut facts_closed = false;
    for (depth, current) in chain(error).enumerate() {
        if any_rules && rule_verdict.is_none() {
            rule_verdict = own_rules
                .iter()
                .chain(registered)
                .find_map(|rule| rule.apply(current));
        }
        let known = Known::of(current);
        if let Some(known) = known.filter(|_| !facts_closed) {
            if known.kind() != ErrorKind::Unknown {
                deepest_fact = Some((depth, known));
            }
            if known.has_status() {
                deepest_http = Some((depth, known));
            }
            facts_closed = !known.descend();
        }
    }

    let (mut classification, read_http) = match (rule_verdict, deepest_fact) {
        (Some(kind), _) => (Classification::new(kind, Evidence::Rule), false),
        (None, Some((depth, fact))) => (
            fact.classification(retry_after_cap),
            deepest_http.is_some_and(|(http_depth, _)| http_depth == depth),
        ),
        (None, None) => match (kind_of_messages(error), deepest_http) {
            (Some(kind), _) => (Classification::new(kind, Evidence::Pattern), false),
            (None, Some((_, http))) => (http.classification(retry_after_cap), true),
            (None, None) => (
                Classification::new(ErrorKind::Unknown, Evidence::Nothing),
                false,
            ),
        },
    };
    if let Some((_, http)) = deepest_http.filter(|_| !read_http) {
        let from_http = http.classification(retry_after_cap);
        classification.status = classification.status.or(from_http.status);
        classification.retry_after = classification.retry_after.or(from_http.retry_after);
        classification.should_retry = classification.should_retry.or(http.server_verdict());
    }
    classification
}

/// The kind the wording points at, from the deepest level whose message matches a pattern.
/// rig's failures and what they wrap are never read by their words (a provider's body is the
/// server's, a tool's message its author's): the reading stops at the first of them.
fn kind_of_messages(error: &(dyn Error + 'static)) -> Option<ErrorKind> {
    let mut message = String::new();
    let mut found = None;
    let mut levels = chain(error).peekable();
    while let Some(level) = levels.next() {
        if never_read(level, levels.peek().copied()) {
            break;
        }
        message.clear();
        // A Display impl that fails leaves a partial message, which is still worth reading.
        let _ = write!(message, "{level}");
        if let Some(kind) = patterns::kind_of_message(&message) {
            found = Some(kind);
        }
    }
    found
}

/// Whether `level` (wrapping `next`) is not read by its words: a rig failure, or an `io::Error`
/// wrapping one, which says that failure's words as its own.
#[cfg(feature = "rig")]
fn never_read(level: &(dyn Error + 'static), next: Option<&(dyn Error + 'static)>) -> bool {
    is_rig(level) || (level.is::<std::io::Error>() && next.is_some_and(is_rig))
}

/// Without rig every level is read.
#[cfg(not(feature = "rig"))]
fn never_read(_: &(dyn Error + 'static), _: Option<&(dyn Error + 'static)>) -> bool {
    false
}

/// Whether `level` is one of rig's failures, which are read by what they are, never by their
/// words.
#[cfg(feature = "rig")]
fn is_rig(level: &(dyn Error + 'static)) -> bool {
    level.is::<rig_core::tool::ToolExecutionError>() || level.is::<rig_core::error::ProviderError>()
}
