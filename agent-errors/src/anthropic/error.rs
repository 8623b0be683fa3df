use std::io;
use std::time::Duration;

use crate::provider::StatusError;

use crate::chat::CallSource;
use crate::classify::classify;
use crate::error::BoxError;
use crate::llm::retryability::{RetryRules, StopReason, Verdict};
use crate::provider::AttemptError;
use crate::stream::StreamError;

/// Names the server in [`StatusError`]'s message.
pub(crate) const SERVER: &str = "Anthropic messages server";

/// A Messages API call that failed. Retries inside the provider never wrap it: after the last
/// attempt the caller gets the last attempt's error as it was.
///
/// # Examples
///
/// [`AnthropicModel::complete`](super::AnthropicModel::complete) returns it typed; a caller decides
/// what to tell its user:
///
/// ```
/// use agent_errors::anthropic::AnthropicError;
/// use agent_errors::stream::StreamError;
///
/// fn advice(error: &AnthropicError) -> String {
///     match error {
///         AnthropicError::Status(status) if status.code() == Some("overloaded_error") => "Claude is busy: try again soon".into(),
///         AnthropicError::Status(status) => format!("the API answered {}", status.status()),
///         AnthropicError::Timeout { .. } | AnthropicError::HeadersTimeout { .. } => "it took too long".into(),
///         AnthropicError::Connection { .. } => "the API cannot be reached".into(),
///         AnthropicError::Stream(stream) => format!("the answer broke off: {stream}"),
///         other => other.to_string(), // the rest, and the non-exhaustive future
///     }
/// }
///
/// let broken = AnthropicError::from(StreamError::Malformed { reason: "not JSON".into(), data: String::new() });
/// assert_eq!(advice(&broken), "the answer broke off: malformed stream event: not JSON");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AnthropicError {
    /// The server answered with an error status. Its [`StatusError::code`] is the error's
    /// `type` (`overloaded_error`, `rate_limit_error`, `invalid_request_error`, ...).
    #[error("{0}")]
    Status(#[from] StatusError),
    /// The request took longer than the configured timeout. Never retried by the provider: the
    /// timeout is the whole budget.
    #[error("the Anthropic messages request timed out after {timeout:?}")]
    Timeout {
        /// The timeout that ran out.
        timeout: Duration,
        /// What reqwest reported.
        #[source]
        source: reqwest::Error,
    },
    /// The server could not be reached, the connection broke before a whole answer came (a
    /// streamed answer's body failing is [`StreamError::EndedEarly`] instead), or the
    /// answer's body could not be decoded. Retried by the provider.
    #[error("could not get an answer from the Anthropic messages server")]
    Connection {
        /// What reqwest reported.
        #[source]
        source: reqwest::Error,
    },
    /// The request could not be sent for another reason (a redirect loop, a bad header).
    #[error("the Anthropic messages request could not be made")]
    Request {
        /// What reqwest reported.
        #[source]
        source: reqwest::Error,
    },
    /// A success status with a body that is valid JSON but not a Messages API answer. Not
    /// retried: the server would answer the same way again.
    #[error("the server's answer is not a Messages API message")]
    InvalidResponse {
        /// The body, cut to 64 KiB and redacted. Untrusted text.
        body: String,
        /// Why it did not parse.
        #[source]
        source: serde_json::Error,
    },
    /// A success status whose body broke off before its JSON ended, or is not JSON at all: what
    /// a proxy that dropped the connection, or answered in the server's place, leaves behind.
    /// Retried; [`classify`](crate::classify::classify()) calls it `Transient` (its source is an
    /// `io::Error` of kind `UnexpectedEof`).
    #[error("the server's answer broke off or is not JSON ({reason})")]
    BrokenResponse {
        /// The body, cut to 64 KiB and redacted. Untrusted text.
        body: String,
        /// What the JSON parser said.
        reason: String,
        /// An `io::Error` of kind `UnexpectedEof`.
        #[source]
        source: io::Error,
    },
    /// A success answer whose body is larger than the provider reads (8 MiB). Never retried.
    #[error("the Anthropic messages answer is larger than {limit} bytes")]
    ResponseTooLarge {
        /// The most the provider reads.
        limit: usize,
    },
    /// The server did not answer a streamed request's headers within the timeout. Never retried,
    /// like [`Timeout`](AnthropicError::Timeout).
    #[error("the Anthropic messages server sent no response headers within {timeout:?}")]
    HeadersTimeout {
        /// The timeout that ran out.
        timeout: Duration,
    },
    /// A streamed answer failed before its first event (retried), or after it (inside the
    /// stream). An `error` event is a [`StreamError::ErrorEvent`] with the status its type
    /// stands for (`overloaded_error` is a 529).
    #[error("{0}")]
    Stream(#[from] StreamError),
}

impl AnthropicError {
    /// A success body that did not parse: a valid JSON value of the wrong shape is
    /// [`InvalidResponse`](AnthropicError::InvalidResponse), anything else (cut short, not JSON)
    /// [`BrokenResponse`](AnthropicError::BrokenResponse).
    pub(crate) fn unparsable(body: &[u8], error: serde_json::Error) -> Self {
        let body = crate::provider::excerpt(body);
        match crate::provider::broke_off(&error) {
            None => AnthropicError::InvalidResponse {
                body,
                source: error,
            },
            Some(source) => AnthropicError::BrokenResponse {
                body,
                reason: crate::redact::redact(&error.to_string()).into_owned(),
                source,
            },
        }
    }

    /// The error of a stream's pipeline: one of ours, or a stream failure.
    pub(crate) fn from_stream(error: BoxError) -> Self {
        match error.downcast::<AnthropicError>() {
            Ok(error) => *error,
            Err(error) => match error.downcast::<StreamError>() {
                Ok(error) => AnthropicError::Stream(*error),
                Err(other) => AnthropicError::Stream(StreamError::malformed(other.to_string(), "")),
            },
        }
    }

    /// The HTTP status, when the server answered with an error status.
    pub fn status(&self) -> Option<u16> {
        match self {
            AnthropicError::Status(e) => Some(e.status()),
            _ => None,
        }
    }
}

/// The provider could not be configured.
///
/// # Examples
///
/// ```
/// use agent_errors::anthropic::{AnthropicConfigError, AnthropicModel};
///
/// let refused = AnthropicModel::builder().model("claude-sonnet-4-5").max_tokens(0).build();
/// match refused {
///     Err(AnthropicConfigError::ZeroMaxTokens) => {} // the API needs a reply budget
///     Err(AnthropicConfigError::MissingModel) => panic!("set AGENT_ERRORS_MODEL"),
///     Err(other) => panic!("{other}"), // a URL, a header, the client, and the non-exhaustive rest
///     Ok(_) => unreachable!("0 tokens is refused"),
/// }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AnthropicConfigError {
    /// No model name was given (`AGENT_ERRORS_MODEL` when configured from the environment).
    #[error("no model name: set AGENT_ERRORS_MODEL or call .model(...)")]
    MissingModel,
    /// The base URL does not parse or is not http(s).
    #[error("the base URL `{url}` is not an http(s) URL")]
    InvalidBaseUrl {
        /// The URL as given, with any credentials in it redacted.
        url: String,
    },
    /// An extra header's name or value is not a valid HTTP header.
    #[error("the extra header `{name}` is not a valid HTTP header")]
    InvalidHeader {
        /// The header's name as given.
        name: String,
    },
    /// `max_tokens` was set to zero: the API requires a positive reply budget.
    #[error("max_tokens must be at least 1")]
    ZeroMaxTokens,
    /// The HTTP client could not be built.
    #[error("the HTTP client could not be built")]
    Client(#[source] reqwest::Error),
}

impl AttemptError for AnthropicError {
    /// A status goes through the model-call rules, and so does an `error` event inside a stream
    /// (by the status its type stands for); a stream that failed before its first event is
    /// retried like a broken connection; a timeout and an oversized answer are not retried;
    /// any other failure goes through the status table of `classify`.
    fn verdict(&self, rules: &RetryRules, source: &CallSource) -> Verdict {
        match self {
            AnthropicError::Status(e) => rules.assess(e.http(), e.body(), source),
            AnthropicError::Stream(StreamError::ErrorEvent { http, .. }) => {
                rules.assess(http, http.message(), source)
            }
            AnthropicError::Stream(_) => Verdict::Retry,
            AnthropicError::Timeout { .. }
            | AnthropicError::HeadersTimeout { .. }
            | AnthropicError::ResponseTooLarge { .. } => Verdict::Stop(StopReason::NotRetryable),
            _ if classify(self).is_retryable() => Verdict::Retry,
            _ => Verdict::Stop(StopReason::NotRetryable),
        }
    }

    fn status(&self) -> Option<u16> {
        AnthropicError::status(self)
    }
}
