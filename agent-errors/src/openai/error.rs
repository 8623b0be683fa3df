use std::io;
use std::time::Duration;

use crate::chat::CallSource;
use crate::provider::StatusError;

use crate::classify::classify;
use crate::error::BoxError;
use crate::llm::retryability::{RetryRules, StopReason, Verdict};
use crate::provider::AttemptError;
use crate::stream::StreamError;

/// Names the server in [`StatusError`]'s message.
pub(crate) const SERVER: &str = "chat completions server";

/// A chat-completions call that failed. Retries inside the provider never wrap it: after the
/// last attempt the caller gets the last attempt's error as it was.
///
/// # Examples
///
/// What a caller of the model gets back, here from a server (on loopback) that refuses the request:
///
/// ```
/// use agent_errors::{ChatModel, ChatRequest, Message};
/// use agent_errors::openai::{OpenAiError, OpenAiModel};
///
/// # async fn answer_once(status: &str, body: &str) -> String {
/// #     use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
/// #     let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
/// #     let url = format!("http://{}/v1", listener.local_addr().unwrap());
/// #     let response = format!(
/// #         "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
/// #         body.len()
/// #     );
/// #     tokio::spawn(async move {
/// #         let (socket, _) = listener.accept().await.unwrap();
/// #         let mut reader = BufReader::new(socket);
/// #         let mut length = 0;
/// #         loop {
/// #             let mut line = String::new();
/// #             reader.read_line(&mut line).await.unwrap();
/// #             if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
/// #                 length = value.trim().parse().unwrap();
/// #             }
/// #             if line == "\r\n" { break; }
/// #         }
/// #         reader.read_exact(&mut vec![0; length]).await.unwrap();
/// #         reader.into_inner().write_all(response.as_bytes()).await.unwrap();
/// #     });
/// #     url
/// # }
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let url = answer_once("400 Bad Request", r#"{"error": {"message": "no such model", "code": "model_not_found"}}"#).await;
/// let model = OpenAiModel::builder().base_url(url).model("gpt-none").build()?;
/// let error = model.chat(&ChatRequest::new(vec![Message::user("hi")], Vec::new())).await.unwrap_err();
/// let advice = match error.downcast_ref::<OpenAiError>() {
///     Some(OpenAiError::Status(status)) if status.status() == 400 => {
///         format!("fix the request: {}", status.code().unwrap_or("?"))
///     }
///     Some(OpenAiError::Status(status)) => format!("the server said {}", status.status()),
///     Some(OpenAiError::Timeout { .. } | OpenAiError::HeadersTimeout { .. }) => "raise the timeout".into(),
///     Some(OpenAiError::Connection { .. }) => "is the server up?".into(),
///     Some(other) => other.to_string(), // the rest, and the non-exhaustive future
///     None => error.to_string(),
/// };
/// assert_eq!(advice, "fix the request: model_not_found");
/// # Ok(())
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenAiError {
    /// The server answered with an error status.
    #[error("{0}")]
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
    /// The server could not be reached, the connection broke before a whole answer came (a
    /// streamed answer's body failing is [`StreamError::EndedEarly`] instead), or the
    /// answer's body could not be decoded. [`classify`](crate::classify::classify()) calls the last a
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
        /// The body, cut to 64 KiB and redacted. Untrusted text.
        body: String,
        /// Why it did not parse.
        #[source]
        source: serde_json::Error,
    },
    /// A success status whose body broke off before its JSON ended, or is not JSON at all: what
    /// a proxy or load balancer that dropped the connection, or answered in the server's
    /// place, leaves behind. Retried; [`classify`](crate::classify::classify()) calls it `Transient`
    /// (its source is an `io::Error` of kind `UnexpectedEof`).
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
    /// A success status whose body is larger than
    /// [`OpenAiBuilder::max_response_bytes`](super::OpenAiBuilder::max_response_bytes): the body
    /// was read up to the limit and the connection dropped. Not retried;
    /// [`classify`](crate::classify::classify()) calls it `Validation` (its source is an `io::Error` of
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
    #[error("{0}")]
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
        let body = crate::provider::excerpt(body);
        match crate::provider::broke_off(&error) {
            None => OpenAiError::InvalidResponse {
                body,
                source: error,
            },
            Some(source) => OpenAiError::BrokenResponse {
                body,
                reason: crate::redact::redact(&error.to_string()).into_owned(),
                source,
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

/// The provider could not be configured.
///
/// # Examples
///
/// Configuration from the environment, with a clear word when something is missing:
///
/// ```
/// use agent_errors::openai::{OpenAiBuilder, OpenAiConfigError};
///
/// let unset = |_: &str| None; // an environment without AGENT_ERRORS_MODEL
/// match OpenAiBuilder::from_vars(unset).build() {
///     Ok(model) => println!("talking to {}", model.url()),
///     Err(OpenAiConfigError::MissingModel) => eprintln!("set AGENT_ERRORS_MODEL"),
///     Err(OpenAiConfigError::InvalidBaseUrl { url }) => eprintln!("bad OPENAI_BASE_URL: {url}"),
///     Err(other) => eprintln!("{other}"), // `InvalidHeader`, `Client`, and the non-exhaustive rest
/// }
/// ```
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
