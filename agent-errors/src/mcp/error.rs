//! What can go wrong talking to an MCP server, and how each failure is told to the classifier.
//!
//! rmcp turns a server tool's error into a result with `isError: true` and text, so the types
//! are gone by the time the client sees them. The facts that are left (a JSON-RPC code, a
//! closed transport, a timeout, a status written in the text) are kept here as typed values the
//! classifier already reads: an [`io::Error`] of the matching kind as the source of a transport
//! or protocol failure, an [`HttpError`] for a status found in an error text, and
//! [`InvalidArguments`] for invalid params, so they take the `invalid_args` path.

use std::io;
use std::sync::LazyLock;
use std::time::Duration;

use regex::Regex;
use rmcp::ServiceError;
use rmcp::model::ErrorCode;

use crate::classify::HttpError;
use crate::error::{BoxError, InvalidArguments};

/// A failure talking to an MCP server.
///
/// Every variant that stands for a kind of failure carries, as its
/// [`source`](std::error::Error::source), the typed fact [`classify`](crate::classify::classify()) reads:
/// see the table in the [module docs](crate::mcp#how-mcp-failures-are-classified).
///
/// # Examples
///
/// A server whose program is not installed fails to connect with a message that says so:
///
/// ```
/// use agent_errors::mcp::{McpError, McpServer};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let refused = McpServer::stdio("files", "/no/such/mcp-server").connect().await;
/// let what = match refused {
///     Err(McpError::Spawn { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => "install the server",
///     Err(McpError::Spawn { .. } | McpError::Handshake { .. }) => "the server would not start",
///     Err(McpError::Timeout { .. }) => "the server is too slow",
///     Err(_) => "see the error", // the rest, and the non-exhaustive future
///     Ok(_) => "connected",
/// };
/// assert_eq!(what, "install the server");
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// The server process could not be started.
    #[error("MCP server `{server}` could not be started")]
    Spawn {
        /// The server's name.
        server: String,
        /// Why: a missing program is [`io::ErrorKind::NotFound`].
        #[source]
        source: io::Error,
    },
    /// The server did not complete the MCP handshake.
    #[error("MCP server `{server}` did not complete the handshake: {reason}")]
    Handshake {
        /// The server's name.
        server: String,
        /// What the SDK said, redacted.
        reason: String,
        /// A connection that went away: [`io::ErrorKind::ConnectionAborted`].
        #[source]
        source: io::Error,
    },
    /// The transport closed or the server process exited, before or during the call.
    #[error("MCP server `{server}`: the connection closed")]
    Closed {
        /// The server's name.
        server: String,
        /// [`io::ErrorKind::ConnectionAborted`]: transient.
        #[source]
        source: io::Error,
    },
    /// The server exited again right after each of its last restarts: it is not restarted
    /// again.
    #[error("MCP server `{server}` exited after each of {restarts} restarts in a row")]
    GaveUp {
        /// The server's name.
        server: String,
        /// Restarts tried.
        restarts: u32,
        /// [`io::ErrorKind::ConnectionRefused`]: transient, for the breakers to count.
        #[source]
        source: io::Error,
    },
    /// The client was shut down.
    #[error("MCP server `{server}` was shut down")]
    Shutdown {
        /// The server's name.
        server: String,
        /// [`io::ErrorKind::NotConnected`].
        #[source]
        source: io::Error,
    },
    /// A request got no answer in time.
    #[error("MCP request to `{server}` timed out after {timeout:?}")]
    Timeout {
        /// The server's name.
        server: String,
        /// The bound that elapsed.
        timeout: Duration,
        /// [`io::ErrorKind::TimedOut`].
        #[source]
        source: io::Error,
    },
    /// The server answered with a JSON-RPC error (or wrote one as the text of an `isError`
    /// result, as servers on the TypeScript SDK do).
    #[error("{message}")]
    Rpc {
        /// The server's name.
        server: String,
        /// The JSON-RPC error code.
        code: i32,
        /// The server's message, redacted.
        message: String,
        /// [`io::ErrorKind::NotFound`] for a missing method or tool,
        /// [`io::ErrorKind::InvalidInput`] for invalid params; none otherwise, and the message
        /// is read like any other.
        #[source]
        fact: Option<io::Error>,
    },
    /// The tool ran and answered `isError: true`.
    #[error("{headline}")]
    Tool {
        /// The server's name.
        server: String,
        /// The tool's name on the server.
        tool: String,
        /// The text of the result, as the server wrote it, secrets redacted.
        text: String,
        /// What this error says about itself: the text, or when the text names an HTTP status,
        /// a short line that leaves the text to `status`.
        headline: String,
        /// The HTTP status written in the text, with its `Retry-After`, if any.
        #[source]
        status: Option<HttpError>,
    },
    /// Something else the SDK reported (an unexpected response, say).
    #[error("MCP request to `{server}` failed: {reason}")]
    Protocol {
        /// The server's name.
        server: String,
        /// What the SDK said, redacted.
        reason: String,
    },
}

impl McpError {
    pub(crate) fn closed(server: &str) -> Self {
        McpError::Closed {
            server: server.to_owned(),
            source: io::Error::from(io::ErrorKind::ConnectionAborted),
        }
    }

    pub(crate) fn shutdown(server: &str) -> Self {
        McpError::Shutdown {
            server: server.to_owned(),
            source: io::Error::from(io::ErrorKind::NotConnected),
        }
    }

    pub(crate) fn gave_up(server: &str, restarts: u32) -> Self {
        McpError::GaveUp {
            server: server.to_owned(),
            restarts,
            source: io::Error::from(io::ErrorKind::ConnectionRefused),
        }
    }

    pub(crate) fn timed_out(server: &str, timeout: Duration) -> Self {
        McpError::Timeout {
            server: server.to_owned(),
            timeout,
            source: io::Error::from(io::ErrorKind::TimedOut),
        }
    }

    pub(crate) fn handshake(server: &str, reason: impl ToString) -> Self {
        McpError::Handshake {
            server: server.to_owned(),
            reason: redacted(reason.to_string()),
            source: io::Error::from(io::ErrorKind::ConnectionAborted),
        }
    }

    /// The failure of a request, as the SDK reported it.
    pub(crate) fn from_service(server: &str, error: ServiceError) -> BoxError {
        match error {
            ServiceError::McpError(data) => rpc_failure(server, data.code, data.message.into()),
            ServiceError::TransportClosed
            | ServiceError::TransportSend(_)
            | ServiceError::Cancelled { .. } => Box::new(McpError::closed(server)),
            ServiceError::Timeout { timeout } => Box::new(McpError::timed_out(server, timeout)),
            other => Box::new(McpError::Protocol {
                server: server.to_owned(),
                reason: redacted(other.to_string()),
            }),
        }
    }

    /// The failure an `isError: true` result stands for, read from its text.
    pub(crate) fn from_error_text(server: &str, tool: &str, text: String) -> BoxError {
        let text = redacted(text);
        if let Some((code, message)) = written_rpc_error(&text) {
            return rpc_failure(server, ErrorCode(code), message.to_owned());
        }
        let status = status_in_text(&text);
        let headline = match &status {
            Some(_) => format!("`{tool}` answered with an error"),
            None => text.clone(),
        };
        Box::new(McpError::Tool {
            server: server.to_owned(),
            tool: tool.to_owned(),
            text,
            headline,
            status,
        })
    }
}

/// A JSON-RPC error: invalid params become [`InvalidArguments`] (unless they say the tool does
/// not exist), a missing method or tool is a not-found fact, anything else is left to its words.
fn rpc_failure(server: &str, code: ErrorCode, message: String) -> BoxError {
    let message = redacted(message);
    let fact = match code {
        ErrorCode::INVALID_PARAMS if names_missing_tool(&message) => Some(io::ErrorKind::NotFound),
        ErrorCode::INVALID_PARAMS => Some(io::ErrorKind::InvalidInput),
        ErrorCode::METHOD_NOT_FOUND | ErrorCode::RESOURCE_NOT_FOUND => {
            Some(io::ErrorKind::NotFound)
        }
        _ => None,
    };
    let error = McpError::Rpc {
        server: server.to_owned(),
        code: code.0,
        message: message.clone(),
        fact: fact.map(io::Error::from),
    };
    if fact == Some(io::ErrorKind::InvalidInput) {
        Box::new(InvalidArguments::new(message).with_source(error))
    } else {
        Box::new(error)
    }
}

/// A server's words, redacted once when the error is made: the error is handed out whole (to
/// the caller of a client, in a log), and a server can echo a key or a connection string.
fn redacted(text: String) -> String {
    match crate::redact::redact(&text) {
        std::borrow::Cow::Borrowed(_) => text,
        std::borrow::Cow::Owned(redacted) => redacted,
    }
}

/// `MCP error -32602: ...`, the way the TypeScript SDK writes a JSON-RPC error into a result.
fn written_rpc_error(text: &str) -> Option<(i32, &str)> {
    static WRITTEN: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"^\s*MCP error (-?\d{1,6}):\s*").expect("a constant pattern"));
    let found = WRITTEN.captures(text)?;
    let code = found[1].parse().ok()?;
    let rest = &text[found.get(0).map_or(0, |m| m.end())..];
    Some((code, rest))
}

/// Servers answer a call of a tool they do not have with invalid params ("Tool x not found"):
/// no repair of the arguments can help that.
fn names_missing_tool(message: &str) -> bool {
    static MISSING: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"(?i)^\s*(?:unknown tool\b|tool\s+(?:\S+\s+)?not found\b)")
            .expect("a constant pattern")
    });
    MISSING.is_match(message)
}

/// An HTTP status written in an error text ("HTTP 503", "status 429", "status code: 404"),
/// with the `Retry-After` (or `retry-after-ms`) written next to it.
fn status_in_text(text: &str) -> Option<HttpError> {
    static STATUS: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"(?i)\b(?:HTTP(?:/\d(?:\.\d)?)?|status(?:[ _]code)?)\s*[:=]?\s*([1-5]\d\d)\b")
            .expect("a constant pattern")
    });
    static RETRY_AFTER: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r#"(?i)\b(retry-after(?:-ms)?)["']?\s*[:=]\s*["']?([^"',;\n]+)"#)
            .expect("a constant pattern")
    });
    let status: u16 = STATUS.captures(text)?[1].parse().ok()?;
    let mut error = HttpError::new(status, text);
    for found in RETRY_AFTER.captures_iter(text) {
        error = error.with_header(found[1].to_ascii_lowercase(), found[2].trim());
    }
    Some(error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_and_retry_after_are_read_from_text() {
        let error = status_in_text("upstream said HTTP 429; Retry-After: 7").expect("a status");
        assert_eq!(error.status(), 429);
        assert_eq!(error.header("retry-after"), Some("7"));
        assert_eq!(
            status_in_text("status code: 503").map(|e| e.status()),
            Some(503)
        );
        assert!(status_in_text("no status in 2024 here").is_none());
    }

    #[test]
    fn written_rpc_errors_are_parsed() {
        assert_eq!(
            written_rpc_error("MCP error -32602: Input validation error"),
            Some((-32602, "Input validation error"))
        );
        assert_eq!(written_rpc_error("an MCP error -32602 happened"), None);
    }

    #[test]
    fn missing_tools_are_not_bad_arguments() {
        assert!(names_missing_tool("Tool nope not found"));
        assert!(names_missing_tool("unknown tool: nope"));
        assert!(names_missing_tool("tool not found"));
        assert!(!names_missing_tool(
            "Invalid arguments for tool add: `a` not found"
        ));
    }
}
