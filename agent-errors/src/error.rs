//! The error model: what went wrong with a tool call, with the original error kept reachable.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// A boxed error that can cross threads: the currency for errors of unknown type.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A boxed, sendable future: what [`ChatModel::chat`](crate::ChatModel::chat) returns.
pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// How serious an escalation is. Parsed case-insensitively; defaults to [`Severity::High`].
///
/// # Examples
///
/// ```
/// use agent_errors::Severity;
///
/// let severity: Severity = "Critical".parse()?;
/// let page_someone = match severity {
///     Severity::Critical => true,
///     Severity::Low | Severity::Medium | Severity::High => false,
/// };
/// assert!(page_someone);
/// assert_eq!(Severity::default(), Severity::High);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth noting; the run can go on as planned.
    Low,
    /// The model should change its approach.
    Medium,
    /// The model must not repeat the call as it was.
    #[default]
    High,
    /// A person should look at this.
    Critical,
}

impl Severity {
    /// The lower-case name, as the model sees it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Severity::Low => "low",
            Severity::Medium => "medium",
            Severity::High => "high",
            Severity::Critical => "critical",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The text was not one of `low`, `medium`, `high`, `critical`.
///
/// # Examples
///
/// ```
/// use agent_errors::Severity;
///
/// let error = "urgent".parse::<Severity>().unwrap_err();
/// assert_eq!(error.0, "urgent");
/// assert!(error.to_string().contains("expected one of `low`, `medium`, `high`, `critical`"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown severity `{0}`: expected one of `low`, `medium`, `high`, `critical`")]
pub struct UnknownSeverity(pub String);

impl FromStr for Severity {
    type Err = UnknownSeverity;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "low" => Ok(Severity::Low),
            "medium" => Ok(Severity::Medium),
            "high" => Ok(Severity::High),
            "critical" => Ok(Severity::Critical),
            _ => Err(UnknownSeverity(s.to_owned())),
        }
    }
}

/// A tool that refused its arguments once it was running: return it (boxed) from the tool's
/// future, and the call takes the `invalid_args` path as if its arguments had not parsed, so a
/// fixer can repair them and the call is sent again.
///
/// For tools that cannot check their arguments before they run: a remote server that validates
/// them on its side, say. Arguments a handler rejects while parsing are
/// [`ToolError::InvalidArgs`] and [`ToolError::Deserialization`] already.
///
/// # Examples
///
/// ```
/// use agent_errors::{BoxError, ToolError, call::InvalidArguments};
///
/// let refused: BoxError = Box::new(InvalidArguments::new("`b` must be a number"));
/// let error = ToolError::execution(serde_json::json!({"b": "two"}), refused);
/// assert!(error.is_invalid_args());
/// ```
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct InvalidArguments {
    message: String,
    #[source]
    source: Option<BoxError>,
}

impl InvalidArguments {
    /// Arguments refused for this reason, in words the model (or a fixer) can act on.
    pub fn new(message: impl Into<String>) -> Self {
        InvalidArguments {
            message: message.into(),
            source: None,
        }
    }

    /// Keeps the error that said so, for callers that downcast to it.
    #[must_use]
    pub fn with_source(mut self, source: impl Into<BoxError>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// Why the arguments were refused.
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// The arguments a failed call ran with, kept as the text the model sent (or a fixer wrote) and
/// read as JSON only when asked: a failure that nobody inspects does not pay for a JSON tree.
///
/// # Examples
///
/// ```
/// use agent_errors::{ToolError, call::ToolArgs};
///
/// let error = ToolError::execution(serde_json::json!({"id": 7}), std::io::Error::other("gone"));
/// if let ToolError::Execution { args, .. } = &error {
///     assert_eq!(args.as_str(), r#"{"id":7}"#);
///     assert_eq!(args.to_json()["id"], 7);
/// }
/// // Text that is not JSON reads as a JSON string holding it.
/// assert_eq!(ToolArgs::new("{id: 7").to_json(), serde_json::json!("{id: 7"));
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ToolArgs(Arc<str>);

impl ToolArgs {
    /// The arguments' text, as the tool received it.
    pub fn new(raw: impl Into<Arc<str>>) -> Self {
        ToolArgs(raw.into())
    }

    /// The arguments' text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The arguments as JSON, or a JSON string holding their text when it is not JSON.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::from_str(&self.0)
            .unwrap_or_else(|_| serde_json::Value::String(self.0.to_string()))
    }
}

impl fmt::Debug for ToolArgs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl From<serde_json::Value> for ToolArgs {
    fn from(value: serde_json::Value) -> Self {
        ToolArgs(value.to_string().into())
    }
}

impl From<&str> for ToolArgs {
    fn from(raw: &str) -> Self {
        ToolArgs(raw.into())
    }
}

impl From<String> for ToolArgs {
    fn from(raw: String) -> Self {
        ToolArgs(raw.into())
    }
}

/// Why one tool call failed.
///
/// The original error is never erased: [`std::error::Error::source`] on `Execution` returns the
/// tool's own error, so callers can `downcast_ref` to it.
///
/// # Examples
///
/// What a hand-written handler returns, and the `match` a caller writes on it:
///
/// ```
/// use agent_errors::ToolError;
///
/// let raw = r#"{"city": "#;
/// let error = ToolError::invalid_args(raw, serde_json::from_str::<serde_json::Value>(raw).unwrap_err());
/// let note = match &error {
///     ToolError::InvalidArgs { raw, .. } => format!("not JSON: {raw}"),
///     ToolError::Deserialization { path, .. } => format!("wrong shape at `{path}`"),
///     ToolError::Execution { source, .. } => format!("the tool failed: {source}"),
///     ToolError::Escalation { reason, severity, .. } => format!("escalated ({severity}): {reason}"),
///     _ => error.to_string(), // the enum is non-exhaustive
/// };
/// assert_eq!(note, r#"not JSON: {"city": "#);
/// assert!(error.is_invalid_args());
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ToolError {
    /// The model's arguments are not valid JSON.
    #[error("arguments are not valid JSON: {error}")]
    InvalidArgs {
        /// The arguments exactly as the model sent them.
        raw: String,
        /// What the JSON parser said.
        #[source]
        error: serde_json::Error,
    },
    /// The arguments are JSON but do not fit the tool's parameter types, or give an object's
    /// key twice.
    // `target` is a Rust type path: kept for callers, never shown to the model.
    #[error("arguments do not fit the tool's parameters: {}", AtPath { path, error })]
    Deserialization {
        /// The arguments exactly as the model sent them.
        raw: String,
        /// The Rust type they were read into.
        target: &'static str,
        /// Where in the arguments the problem is: the parameter (`count`), or a path into it
        /// (`items[2].id`); empty when it is the argument object itself (a missing or unknown
        /// field). For a key given twice, the object that holds it.
        path: String,
        /// What serde said.
        #[source]
        error: serde_json::Error,
    },
    /// The tool ran and failed.
    #[error("tool execution failed")]
    Execution {
        /// The arguments the tool ran with, as text; [`ToolArgs::to_json`] reads them.
        args: ToolArgs,
        /// The tool's own error.
        #[source]
        source: BoxError,
    },
    /// A fixer or the model escalated: a soft failure shown to the model.
    #[error("`{tool}` escalated ({severity}): {reason}")]
    Escalation {
        /// The tool (or fixer) that escalated.
        tool: String,
        /// Why, in words the model can act on.
        reason: String,
        /// How serious it is.
        severity: Severity,
    },
}

/// serde's message, after the path it is about when there is one: "`count`: invalid type: ...".
struct AtPath<'a> {
    path: &'a str,
    error: &'a serde_json::Error,
}

impl fmt::Display for AtPath<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.error)
        } else {
            write!(f, "`{}`: {}", self.path, self.error)
        }
    }
}

impl ToolError {
    /// The model's arguments `raw` did not parse: `InvalidArgs` when they are not JSON,
    /// `Deserialization` when they are JSON of the wrong shape. For handlers written by hand.
    pub fn invalid_args(raw: impl Into<String>, error: serde_json::Error) -> Self {
        let raw = raw.into();
        if error.is_data() {
            ToolError::Deserialization {
                raw,
                target: "the tool's arguments",
                path: String::new(),
                error,
            }
        } else {
            ToolError::InvalidArgs { raw, error }
        }
    }

    /// Wraps a tool's own error with the arguments it ran with (a JSON value or their text).
    pub fn execution(args: impl Into<ToolArgs>, source: impl Into<BoxError>) -> Self {
        ToolError::Execution {
            args: args.into(),
            source: source.into(),
        }
    }

    /// True for the failures the `invalid_args` policy key handles: arguments that did not parse,
    /// and a tool whose own error is [`InvalidArguments`].
    pub fn is_invalid_args(&self) -> bool {
        match self {
            ToolError::InvalidArgs { .. } | ToolError::Deserialization { .. } => true,
            ToolError::Execution { source, .. } => source.is::<InvalidArguments>(),
            ToolError::Escalation { .. } => false,
        }
    }

    /// The raw argument text, where the failure happened before the tool ran.
    pub fn raw_args(&self) -> Option<&str> {
        match self {
            ToolError::InvalidArgs { raw, .. } | ToolError::Deserialization { raw, .. } => {
                Some(raw)
            }
            _ => None,
        }
    }

    /// The error to classify and to show: the tool's own error for `Execution`, else `self`.
    pub fn cause(&self) -> &(dyn std::error::Error + 'static) {
        match self {
            ToolError::Execution { source, .. } => source.as_ref(),
            other => other,
        }
    }
}
