//! Redacted stand-ins for an error chain that leaves the library inside an error of its own.
//!
//! An application logs an error with its causes (`anyhow`'s `{:#}`, `eyre`, tracing with
//! sources): whatever `source()` reaches is printed, and a tool's own error carries whatever
//! its author put in it. So the library's errors do not hand out a tool's error through
//! `source()`: they hand out a copy of its chain in which every level says what it said, each
//! secret replaced by [`REDACTED`](crate::redact::REDACTED).

use std::error::Error;
use std::fmt;

use super::{HttpError, chain};
use crate::error::{BoxError, InvalidArguments, ToolError};

/// A redacted copy of a level that keeps its type, for the types a caller above this floor
/// knows (a stream error, a provider's status error); `None` for any other. It may take the
/// stand-ins of the level's causes (`below`) as the copy's source.
pub(crate) type TypedCopy<'a> =
    &'a dyn Fn(&(dyn Error + 'static), &mut Option<BoxError>) -> Option<BoxError>;

/// One level of an error chain, redacted: the original's words with every secret replaced, and
/// the original's type name when the library knows the type. Its `source()` is the next level,
/// redacted the same way.
///
/// The chain of [`Terminated`](crate::run::Terminated) (and so of [`RunError`](crate::RunError))
/// is made of these, except that an [`HttpError`] level is a redacted [`HttpError`] (status
/// and retry headers kept, message redacted, credential headers replaced), so
/// `find_in_chain::<HttpError>` still finds the status. The original error is reachable only
/// through [`Terminated::unredacted_error`](crate::run::Terminated::unredacted_error).
///
/// # Examples
///
/// ```
/// use agent_errors::classify::chain;
/// use agent_errors::classify::RedactedError;
///
/// # fn show(error: &agent_errors::RunError) {
/// for level in chain(error) {
///     if let Some(redacted) = level.downcast_ref::<RedactedError>() {
///         println!("{}: {}", redacted.type_name().unwrap_or("error"), redacted.message());
///     }
/// }
/// # }
/// ```
pub struct RedactedError {
    type_name: Option<&'static str>,
    message: String,
    source: Option<BoxError>,
}

impl RedactedError {
    /// The chain of `error` redacted: the stand-in for `error` itself, whose `source()` leads
    /// to the stand-ins of its causes.
    pub(crate) fn chain_of(error: &(dyn Error + 'static)) -> BoxError {
        RedactedError::chain_with(error, &|_, _| None)
    }

    /// Like [`chain_of`](RedactedError::chain_of), with the levels `typed` copies kept of
    /// their type.
    pub(crate) fn chain_with(error: &(dyn Error + 'static), typed: TypedCopy<'_>) -> BoxError {
        let levels: Vec<&(dyn Error + 'static)> = chain(error).collect();
        let mut below: Option<BoxError> = None;
        for level in levels.into_iter().rev() {
            below = Some(stand_in(level, below, typed));
        }
        below.unwrap_or_else(|| Box::new(RedactedError::text(None, error)))
    }

    /// `level` alone (no source), its words redacted.
    pub(crate) fn level(level: &(dyn Error + 'static)) -> Self {
        RedactedError::text(type_name(level), level)
    }

    fn text(type_name: Option<&'static str>, level: &(dyn Error + 'static)) -> Self {
        RedactedError {
            type_name,
            message: crate::redact::redact(&level.to_string()).into_owned(),
            source: None,
        }
    }

    /// The original's type, for the types the library knows (`agent_errors::ToolError`,
    /// `std::io::Error`, `serde_json::Error`, `reqwest::Error`, ...); `None` for others.
    pub fn type_name(&self) -> Option<&'static str> {
        self.type_name
    }

    /// What the original said, secrets redacted.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for RedactedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl fmt::Debug for RedactedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedactedError")
            .field("type_name", &self.type_name)
            .field("message", &self.message)
            .field("source", &self.source)
            .finish()
    }
}

impl Error for RedactedError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn Error + 'static))
    }
}

/// The stand-in for `level`, with `below` (its causes' stand-ins) as its source. An
/// `HttpError`, and the types `typed` copies, stay of their type, redacted, so a lookup by type
/// still finds them.
fn stand_in(
    level: &(dyn Error + 'static),
    mut below: Option<BoxError>,
    typed: TypedCopy<'_>,
) -> BoxError {
    if let Some(http) = level.downcast_ref::<HttpError>() {
        // An `HttpError` has no source: nothing below it is lost.
        return Box::new(http.redacted());
    }
    // A rig provider's failure keeps what it is classified by: its status, retry headers and
    // code, as an `HttpError` (its body, the provider's words, is what is left out).
    #[cfg(feature = "rig")]
    if let Some(http) = level
        .downcast_ref::<rig_core::error::ProviderError>()
        .and_then(super::rig::http_view)
    {
        return Box::new(http.redacted());
    }
    if let Some(copy) = typed(level, &mut below) {
        return copy;
    }
    let mut stand_in = RedactedError::text(type_name(level), level);
    stand_in.source = below;
    Box::new(stand_in)
}

/// The name of `level`'s type, when it is one the library knows.
fn type_name(level: &(dyn Error + 'static)) -> Option<&'static str> {
    if let Some(error) = level.downcast_ref::<ToolError>() {
        return Some(match error {
            ToolError::InvalidArgs { .. } => "agent_errors::ToolError::InvalidArgs",
            ToolError::Deserialization { .. } => "agent_errors::ToolError::Deserialization",
            ToolError::Execution { .. } => "agent_errors::ToolError::Execution",
            _ => "agent_errors::ToolError",
        });
    }
    if level.is::<InvalidArguments>() {
        return Some("agent_errors::call::InvalidArguments");
    }
    if level.is::<std::io::Error>() {
        return Some("std::io::Error");
    }
    if level.is::<serde_json::Error>() {
        return Some("serde_json::Error");
    }
    if level.is::<tokio::time::error::Elapsed>() {
        return Some("tokio::time::error::Elapsed");
    }
    #[cfg(feature = "reqwest")]
    if level.is::<reqwest::Error>() {
        return Some("reqwest::Error");
    }
    None
}
