use std::time::Duration;

use crate::chat::CallSource;
pub use crate::provider::StatusError;

use crate::classify::classify;
use crate::error::BoxError;
use crate::llm::retryability::{RetryRules, StopReason, Verdict};
use crate::provider::AttemptError;
use crate::stream::StreamError;

/// Names the server in [`StatusError`]'s message.
pub(crate) const SERVER: &str = "chat completions server";

/// A chat-completions call that failed. Retries inside the provider never wrap it: after the
/// last attempt the caller gets the last attempt's error as it was.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenAiError {
    /// The server answered with an error status.
    #[error(transparent)]
    Status(#[from] StatusError),
    /// The request took longer than the configured timeout. Never retried by the provider: the
    /// timeout is the whole budget.
    #[error("the chat completions request timed out after {timeout:?}")]
    Timeout {
        /// The timeout that ran out.
        timeout: Duration,
        /// What reqwest reported.
        #[source]
        source: reqwest::Error,
    },
    /// The server could not be reached, the connection broke before a whole answer came, or the
    /// answer's body could not be decoded. [`classify`](crate::classify()) calls the last a
    /// `ServerError` (the server's fault, not the request's) and the others `Transient`; the
    /// provider retries all of them.
    #[error("could not get an answer from the chat completions server")]
    Connection {
        /// What reqwest reported.
        #[source]
        source: reqwest::Error,
    },
    /// The request could not be sent for another reason (a redirect loop, a bad header).
    #[error("the chat completions request could not be made")]
    Request {
        /// What reqwest reported.
        #[source]
        source: reqwest::Error,
    },
    /// A success status with a body that is not a chat completion.
    #[error("the server's answer is not a chat completion")]
    InvalidResponse {
        /// The body, cut to 64 KiB.
        body: String,
        /// Why it did not parse.
        #[source]
        source: serde_json::Error,
    },
    /// The server did not answer a streamed request's headers within the timeout. Never retried,
    /// like [`Timeout`](OpenAiError::Timeout).
    #[error("the chat completions server sent no response headers within {timeout:?}")]
    HeadersTimeout {
        /// The timeout that ran out.
        timeout: Duration,
    },
    /// A streamed answer failed before its first event (retried), or after it (inside the
    /// stream).
    #[error(transparent)]
    Stream(#[from] StreamError),
    /// A success answer whose body is larger than the provider reads (8 MiB). Never retried:
    /// the same request would bring the same answer.
    #[error("the chat completions answer is larger than {limit} bytes")]
    ResponseTooLarge {
        /// The most the provider reads.
        limit: usize,
    },
    /// A chat completion without any choice in it.
    #[error("the chat completion has no choices")]
    NoChoices {
        /// The body, cut to 64 KiB.
        body: String,
    },
}

impl OpenAiError {
    /// The error of a stream's pipeline: one of ours, or a stream failure.
    pub(crate) fn from_stream(error: BoxError) -> Self {
        match error.downcast::<OpenAiError>() {
            Ok(error) => *error,
            Err(error) => match error.downcast::<StreamError>() {
                Ok(error) => OpenAiError::Stream(*error),
                Err(other) => OpenAiError::Stream(StreamError::malformed(other.to_string(), "")),
            },
        }
    }

    /// The HTTP status, when the server answered with an error status.
    pub fn status(&self) -> Option<u16> {
        match self {
            OpenAiError::Status(e) => Some(e.status()),
            _ => None,
        }
    }
}

/// The provider could not be configured.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenAiConfigError {
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
    /// The HTTP client could not be built.
    #[error("the HTTP client could not be built")]
    Client(#[source] reqwest::Error),
}

impl AttemptError for OpenAiError {
    /// A status goes through the model-call rules, and so does an error event inside a stream
    /// (by the status it stands for); a stream that failed before its first event is retried
    /// like a broken connection; any other failure goes through the status table of `classify`,
    /// except a request timeout: the timeout is the whole budget of the call.
    fn verdict(&self, rules: &RetryRules, source: &CallSource) -> Verdict {
        match self {
            OpenAiError::Status(e) => rules.assess(e.http(), e.body(), source),
            OpenAiError::Stream(crate::stream::StreamError::ErrorEvent { http, .. }) => {
                rules.assess(http, http.message(), source)
            }
            OpenAiError::Stream(_) => Verdict::Retry,
            OpenAiError::Timeout { .. }
            | OpenAiError::HeadersTimeout { .. }
            | OpenAiError::ResponseTooLarge { .. } => Verdict::Stop(StopReason::NotRetryable),
            _ if classify(self).is_retryable() => Verdict::Retry,
            _ => Verdict::Stop(StopReason::NotRetryable),
        }
    }

    fn status(&self) -> Option<u16> {
        OpenAiError::status(self)
    }
}
