//! How a stream fails.

use std::io;
use std::time::Duration;

use crate::chat::ToolCall;
use crate::classify::HttpError;
use crate::error::BoxError;
use crate::usage::Usage;

/// A stream-level failure, as a provider reports it. Each variant's `source()` is what the
/// status table reads: a timeout is an `io::Error` of kind `TimedOut`, an error event is an
/// [`HttpError`] with the status the provider's error type stands for (an overload is a 529).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StreamError {
    /// No event came within the first-event limit after the response began.
    #[error("no stream event within {limit:?} of the request")]
    FirstEventTimeout {
        /// The limit.
        limit: Duration,
        /// An `io::Error` of kind `TimedOut`.
        #[source]
        source: io::Error,
    },
    /// The stream went silent for longer than the idle limit.
    #[error("the stream stalled: no event for {idle:?}")]
    Stalled {
        /// The idle limit.
        idle: Duration,
        /// An `io::Error` of kind `TimedOut`.
        #[source]
        source: io::Error,
    },
    /// A chunk that is not what the wire format says, or a line, event or stream over the size
    /// caps.
    #[error("malformed stream event: {reason}")]
    Malformed {
        /// What was wrong, scrubbed and cut to 300 characters (a parser's message may quote the
        /// server's text).
        reason: String,
        /// The event's data, cut to 1 KiB and redacted. Untrusted text.
        data: String,
    },
    /// The connection closed before the model's answer was complete (no end marker).
    #[error("the stream ended before the answer was complete")]
    EndedEarly,
    /// The provider sent an error event inside a stream that began with HTTP 200.
    #[error("the provider reported `{error_type}` inside the stream")]
    ErrorEvent {
        /// The provider's error type (`overloaded_error`, `rate_limit_error`, ...).
        error_type: String,
        /// The status the error type stands for, with the provider's message.
        #[source]
        http: HttpError,
    },
}

/// The longest reason a [`StreamError::Malformed`] keeps.
#[cfg_attr(not(any(feature = "openai", feature = "anthropic")), allow(dead_code))]
const MAX_REASON_CHARS: usize = 300;

// The providers build these; without one, only the types are used.
#[cfg_attr(not(any(feature = "openai", feature = "anthropic")), allow(dead_code))]
impl StreamError {
    pub(crate) fn first_event_timeout(limit: Duration) -> Self {
        StreamError::FirstEventTimeout {
            limit,
            source: io::Error::new(io::ErrorKind::TimedOut, "first stream event timed out"),
        }
    }

    pub(crate) fn stalled(idle: Duration) -> Self {
        StreamError::Stalled {
            idle,
            source: io::Error::new(io::ErrorKind::TimedOut, "stream idle timeout"),
        }
    }

    pub(crate) fn malformed(reason: impl AsRef<str>, data: &str) -> Self {
        let end = data
            .char_indices()
            .nth(1024)
            .map_or(data.len(), |(at, _)| at);
        StreamError::Malformed {
            reason: crate::sanitize::scrub(reason.as_ref(), MAX_REASON_CHARS),
            data: crate::redact::redact(&data[..end]).into_owned(),
        }
    }
}

/// A streamed answer that broke after output began: never passed off as complete. The agent
/// gives it to `on_llm_error`; `Retry` discards the partial output and asks again.
/// `classify` reads its cause (a stall is a timeout, an overload event a 529).
#[derive(Debug, thiserror::Error)]
#[error("the model's answer stream broke after output began")]
#[non_exhaustive]
pub struct StreamInterrupted {
    /// The text streamed before the break.
    pub partial_text: String,
    /// The tool calls streamed before the break, arguments possibly incomplete. Never executed.
    pub partial_tool_calls: Vec<ToolCall>,
    /// The usage reported before the break, if any.
    pub usage: Option<Usage>,
    /// Why it broke.
    #[source]
    pub cause: BoxError,
}
