//! How a stream fails.

use std::io;
use std::time::Duration;

use crate::chat::ToolCall;
use crate::classify::{HttpError, RedactedError};
use crate::error::BoxError;
use crate::usage::Usage;

/// A stream-level failure, as a provider reports it. Each variant's `source()` is what the
/// status table reads: a timeout is an `io::Error` of kind `TimedOut`, an error event is an
/// [`HttpError`] with the status the provider's error type stands for (an overload is a 529).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use agent_errors::ErrorKind;
/// use agent_errors::classify::{classify, find_in_chain};
/// use agent_errors::stream::StreamError;
///
/// let stalled = StreamError::Stalled {
///     idle: Duration::from_secs(30),
///     source: std::io::ErrorKind::TimedOut.into(),
/// };
/// let error = StreamError::EndedEarly { source: Box::new(stalled) };
/// assert_eq!(classify(&error).kind, ErrorKind::Timeout);
/// let what = match find_in_chain::<StreamError>(&error) {
///     Some(StreamError::FirstEventTimeout { .. }) => "no answer started",
///     Some(StreamError::EndedEarly { .. }) => "the answer was cut off",
///     Some(StreamError::Malformed { .. }) => "the provider sent garbage",
///     Some(StreamError::ErrorEvent { error_type, .. }) => error_type.as_str(),
///     Some(_) => "another stream failure", // the enum is non-exhaustive
///     None => "not a stream failure",
/// };
/// assert_eq!(what, "the answer was cut off");
/// ```
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
    /// The stream went silent for longer than the idle limit. Found as the `source()` of
    /// [`EndedEarly`](StreamError::EndedEarly).
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
    /// The stream ended before its final event (OpenAI's `[DONE]`, Anthropic's
    /// `message_stop`), so the answer is incomplete. Its `source()` says why:
    ///
    /// - an `io::Error` of kind `UnexpectedEof`: the connection closed;
    /// - a `reqwest::Error`: reading the body failed (a reset, a broken chunk);
    /// - [`StreamError::Stalled`]: no event within the idle limit;
    /// - [`StreamError::DeadlineExceeded`]: the whole answer took longer than its deadline;
    /// - [`StreamError::TooLarge`]: the answer passed the size cap of a stream.
    ///
    /// [`classify`](crate::classify::classify()) reads the cause: a closed or reset connection is
    /// `Transient`, a stall or a deadline a `Timeout`, an oversized answer `Validation`.
    ///
    /// ```
    /// use agent_errors::classify::find_in_chain;
    /// use agent_errors::stream::StreamError;
    ///
    /// fn why(error: &(dyn std::error::Error + 'static)) -> &'static str {
    ///     match find_in_chain::<StreamError>(error) {
    ///         Some(StreamError::EndedEarly { source }) => match source.downcast_ref() {
    ///             Some(StreamError::Stalled { .. }) => "went silent",
    ///             Some(StreamError::DeadlineExceeded { .. }) => "took too long",
    ///             Some(StreamError::TooLarge { .. }) => "too long an answer",
    ///             _ => "the connection closed or broke",
    ///         },
    ///         Some(_) => "another stream failure",
    ///         None => "not a stream failure",
    ///     }
    /// }
    /// # let _ = why;
    /// ```
    #[error("the stream ended before the answer was complete")]
    EndedEarly {
        /// Why it ended.
        #[source]
        source: BoxError,
    },
    /// The whole answer took longer than the stream's deadline, however steadily its events
    /// came. Found as the `source()` of [`EndedEarly`](StreamError::EndedEarly).
    #[error("the answer took longer than its deadline of {deadline:?}")]
    DeadlineExceeded {
        /// The deadline.
        deadline: Duration,
        /// An `io::Error` of kind `TimedOut`.
        #[source]
        source: io::Error,
    },
    /// The answer passed the size cap of a stream (64 MiB). Found as the `source()` of
    /// [`EndedEarly`](StreamError::EndedEarly).
    #[error("the stream passed its size cap of {limit} bytes")]
    TooLarge {
        /// The cap, in bytes.
        limit: usize,
        /// An `io::Error` of kind `InvalidData`.
        #[source]
        source: io::Error,
    },
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

impl StreamError {
    /// A copy of this error with its text redacted. An `EndedEarly`'s cause is `below`, the
    /// stand-ins of its own chain (so a `Stalled` below it is still a `StreamError`); a fixed
    /// `io::Error` cause is remade from its kind and redacted words.
    pub(crate) fn redacted_copy(&self, below: Option<BoxError>) -> StreamError {
        let io = |e: &std::io::Error| {
            std::io::Error::new(e.kind(), crate::redact::redact(&e.to_string()).into_owned())
        };
        let text = |t: &str| crate::redact::redact(t).into_owned();
        match self {
            StreamError::FirstEventTimeout { limit, source } => StreamError::FirstEventTimeout {
                limit: *limit,
                source: io(source),
            },
            StreamError::Stalled { idle, source } => StreamError::Stalled {
                idle: *idle,
                source: io(source),
            },
            StreamError::Malformed { reason, data } => StreamError::Malformed {
                reason: text(reason),
                data: text(data),
            },
            StreamError::EndedEarly { source } => StreamError::EndedEarly {
                source: below.unwrap_or_else(|| Box::new(RedactedError::level(source.as_ref()))),
            },
            StreamError::DeadlineExceeded { deadline, source } => StreamError::DeadlineExceeded {
                deadline: *deadline,
                source: io(source),
            },
            StreamError::TooLarge { limit, source } => StreamError::TooLarge {
                limit: *limit,
                source: io(source),
            },
            StreamError::ErrorEvent { error_type, http } => StreamError::ErrorEvent {
                error_type: text(error_type),
                http: http.redacted(),
            },
        }
    }
}

/// The longest reason a [`StreamError::Malformed`] keeps.
#[cfg_attr(not(feature = "_provider"), allow(dead_code))]
const MAX_REASON_CHARS: usize = 300;

// The providers build these; without one, only the types are used.
#[cfg_attr(not(feature = "_provider"), allow(dead_code))]
impl StreamError {
    pub(crate) fn first_event_timeout(limit: Duration) -> Self {
        StreamError::FirstEventTimeout {
            limit,
            source: io::Error::new(io::ErrorKind::TimedOut, "first stream event timed out"),
        }
    }

    /// The stream ended before its final event, for this reason.
    pub(crate) fn ended_early(cause: impl Into<BoxError>) -> Self {
        StreamError::EndedEarly {
            source: cause.into(),
        }
    }

    /// The connection closed before the final event.
    pub(crate) fn closed() -> Self {
        StreamError::ended_early(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the connection closed before the answer's final event",
        ))
    }

    /// Ended by the idle limit.
    pub(crate) fn ended_stalled(idle: Duration) -> Self {
        StreamError::ended_early(StreamError::Stalled {
            idle,
            source: io::Error::new(io::ErrorKind::TimedOut, "stream idle timeout"),
        })
    }

    /// Ended by the whole answer's deadline.
    pub(crate) fn ended_by_deadline(deadline: Duration) -> Self {
        StreamError::ended_early(StreamError::DeadlineExceeded {
            deadline,
            source: io::Error::new(io::ErrorKind::TimedOut, "stream deadline passed"),
        })
    }

    /// Ended by the size cap of a stream.
    pub(crate) fn ended_too_large(limit: usize) -> Self {
        StreamError::ended_early(StreamError::TooLarge {
            limit,
            source: io::Error::new(io::ErrorKind::InvalidData, "stream over its size cap"),
        })
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
///
/// # Examples
///
/// An `on_llm_error` handler that asks again when a streamed answer broke, and keeps its partial
/// text for a log:
///
/// ```
/// use std::time::Duration;
/// use agent_errors::{Agent, LlmErrorDecision};
/// use agent_errors::stream::StreamInterrupted;
/// use agent_errors::testing::ScriptedModel;
///
/// let agent = Agent::builder("a")
///     .model(ScriptedModel::new())
///     .on_llm_error(|error, _attempt| match error.downcast_ref::<StreamInterrupted>() {
///         Some(broken) => {
///             eprintln!("stream broke after {} chars", broken.partial_text.len());
///             LlmErrorDecision::retry(2, Duration::from_secs(1))
///         }
///         None => Ok(LlmErrorDecision::Rethrow),
///     })
///     .build();
/// assert!(agent.is_ok());
/// ```
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
