use std::io;
use std::time::Duration;

use crate::chat::CallSource;
use crate::classify::{HttpError, classify};
use crate::error::BoxError;
use crate::llm::retryability::{RetryRules, StopReason, Verdict};
use crate::provider::AttemptError;
use crate::stream::StreamError;

/// The longest provider message kept in the [`HttpError`]; the full body stays on
/// [`StatusError::body`].
const MAX_MESSAGE_CHARS: usize = 1000;
/// The most of a response body kept at all.
const MAX_BODY_BYTES: usize = crate::provider::body::MAX_ERROR_BODY_BYTES;

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
    /// A success status with a body that is valid JSON but not a chat completion. Not retried:
    /// the server would answer the same way again.
    #[error("the server's answer is not a chat completion")]
    InvalidResponse {
        /// The body, cut to 64 KiB.
        body: String,
        /// Why it did not parse.
        #[source]
        source: serde_json::Error,
    },
    /// A success status whose body broke off before its JSON ended, or is not JSON at all: what
    /// a proxy or load balancer that dropped the connection, or answered in the server's
    /// place, leaves behind. Retried; [`classify`](crate::classify()) calls it `Transient`
    /// (its source is an `io::Error` of kind `UnexpectedEof`).
    #[error("the server's answer broke off or is not JSON ({reason})")]
    BrokenResponse {
        /// The body, cut to 64 KiB. Untrusted text.
        body: String,
        /// What the JSON parser said.
        reason: String,
        /// An `io::Error` of kind `UnexpectedEof`.
        #[source]
        source: io::Error,
    },
    /// A success status whose body is larger than
    /// [`OpenAiBuilder::max_response_bytes`](super::OpenAiBuilder::max_response_bytes): the body
    /// was read up to the limit and the connection dropped. Not retried;
    /// [`classify`](crate::classify()) calls it `Validation` (its source is an `io::Error` of
    /// kind `InvalidData`).
    #[error("the server's answer is larger than the limit of {limit} bytes")]
    ResponseTooLarge {
        /// The limit.
        limit: usize,
        /// An `io::Error` of kind `InvalidData`.
        #[source]
        source: io::Error,
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

    /// A success body that did not parse: a valid JSON value of the wrong shape is
    /// [`InvalidResponse`](OpenAiError::InvalidResponse), anything else (cut short, not JSON)
    /// [`BrokenResponse`](OpenAiError::BrokenResponse).
    pub(crate) fn unparsable(body: &[u8], error: serde_json::Error) -> Self {
        match error.classify() {
            serde_json::error::Category::Data => OpenAiError::InvalidResponse {
                body: lossy_prefix(body),
                source: error,
            },
            _ => OpenAiError::BrokenResponse {
                body: lossy_prefix(body),
                reason: error.to_string(),
                source: io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the answer is not whole JSON",
                ),
            },
        }
    }

    pub(crate) fn too_large(limit: usize) -> Self {
        OpenAiError::ResponseTooLarge {
            limit,
            source: io::Error::new(
                io::ErrorKind::InvalidData,
                "the answer is over the size limit",
            ),
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

/// An error status from the server, with its headers and body.
///
/// Its `source()` is an [`HttpError`] carrying the status, every response header and the
/// provider's message, so [`classify`](crate::classify()) reads the status like any other HTTP
/// failure.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the chat completions server answered HTTP {}", http.status())]
pub struct StatusError {
    #[source]
    http: HttpError,
    body: String,
    code: Option<String>,
}

impl StatusError {
    pub(crate) fn new(status: u16, headers: &reqwest::header::HeaderMap, body: &[u8]) -> Self {
        let body = lossy_prefix(body);
        let details = ProviderError::read(&body);
        let message = details
            .as_ref()
            .and_then(|d| d.message.clone())
            .unwrap_or_else(|| body.clone());
        let mut http = HttpError::new(status, cut_chars(message.trim(), MAX_MESSAGE_CHARS));
        for (name, value) in headers {
            if let Ok(value) = value.to_str() {
                http = http.with_header(name.as_str(), value);
            }
        }
        StatusError {
            http,
            body,
            code: details.and_then(|d| d.code),
        }
    }

    /// The status code.
    pub fn status(&self) -> u16 {
        self.http.status()
    }

    /// The first response header of that name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.http.header(name)
    }

    /// The response body as the server sent it (cut to 64 KiB). Untrusted text.
    pub fn body(&self) -> &str {
        &self.body
    }

    /// The provider's error code (`context_length_exceeded`, `insufficient_quota`, ...), when
    /// the body had one.
    pub fn code(&self) -> Option<&str> {
        self.code.as_deref()
    }

    /// The status, headers and the provider's message as an [`HttpError`].
    pub fn http(&self) -> &HttpError {
        &self.http
    }
}

/// The parts of an OpenAI-style error body we read: `{"error": {"message", "code", "type"}}`.
/// `code` is a string at OpenAI and a number at llama.cpp.
struct ProviderError {
    message: Option<String>,
    code: Option<String>,
}

impl ProviderError {
    fn read(body: &str) -> Option<ProviderError> {
        let value: serde_json::Value = serde_json::from_str(body).ok()?;
        let error = value.get("error")?;
        if let Some(message) = error.as_str() {
            return Some(ProviderError {
                message: Some(message.to_owned()),
                code: None,
            });
        }
        let text = |key: &str| match error.get(key)? {
            serde_json::Value::String(s) => Some(s.clone()),
            serde_json::Value::Number(n) => Some(n.to_string()),
            _ => None,
        };
        Some(ProviderError {
            message: text("message"),
            code: text("code").or_else(|| text("type")),
        })
    }
}

pub(crate) fn lossy_prefix(bytes: &[u8]) -> String {
    let cut = &bytes[..bytes.len().min(MAX_BODY_BYTES)];
    String::from_utf8_lossy(cut).into_owned()
}

fn cut_chars(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}...", &text[..end]),
        None => text.to_owned(),
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
            OpenAiError::Timeout { .. } | OpenAiError::HeadersTimeout { .. } => {
                Verdict::Stop(StopReason::NotRetryable)
            }
            _ if classify(self).is_retryable() => Verdict::Retry,
            _ => Verdict::Stop(StopReason::NotRetryable),
        }
    }

    fn status(&self) -> Option<u16> {
        OpenAiError::status(self)
    }
}
