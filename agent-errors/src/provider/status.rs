//! An error status from a provider's server: its status, headers, body and the provider's own
//! error code, read from the error body shapes the providers share.

use crate::classify::HttpError;
use crate::sanitize::server_message;

/// The longest provider message kept in the [`HttpError`]; the full body stays on
/// [`StatusError::body`].
/// The most of an error body kept at all.
pub(crate) const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// An error status from the server, with its headers and body.
///
/// Its `source()` is an [`HttpError`] carrying the status, every response header and the
/// provider's message (scrubbed and cut to 1000 characters, since the error's text shows it), so [`classify`](crate::classify::classify()) reads the status like any other HTTP
/// failure. Its `Debug` redacts the message, as [`HttpError`]'s does, and leaves the body out
/// (only its length): an upstream that echoes a key back must not put it in a log. The body is
/// [`body`](StatusError::body), untrusted text.
///
/// # Examples
///
/// An `on_llm_error` handler that reads the provider's error code, whichever provider it is:
///
/// ```
/// use agent_errors::{Agent, LlmErrorDecision};
/// use agent_errors::classify::find_in_chain;
/// use agent_errors::provider::StatusError;
/// use agent_errors::testing::ScriptedModel;
///
/// let agent = Agent::builder("a")
///     .model(ScriptedModel::new())
///     .on_llm_error(|error, _attempt| match find_in_chain::<StatusError>(error) {
///         Some(status) if status.code() == Some("insufficient_quota") => {
///             LlmErrorDecision::RespondWith("The assistant is out of credit today.".to_owned())
///         }
///         Some(status) if status.context_overflow().is_some() => {
///             LlmErrorDecision::RespondWith("That conversation is too long; start a new one.".to_owned())
///         }
///         _ => LlmErrorDecision::Rethrow,
///     })
///     .build();
/// assert!(agent.is_ok());
/// ```
#[derive(Clone, thiserror::Error)]
#[error("the {server} answered HTTP {}", http.status())]
pub struct StatusError {
    #[source]
    http: HttpError,
    body: String,
    code: Option<String>,
    server: &'static str,
}

impl std::fmt::Debug for StatusError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatusError")
            .field("server", &self.server)
            .field("http", &self.http)
            .field("code", &self.code)
            // The body is the server's text, quoted inside JSON (where a secret's quotes are
            // escaped and its name no longer reads as one): left out, the message shows it.
            .field("body_bytes", &self.body.len())
            .finish()
    }
}

impl StatusError {
    /// Reads an error answer; `server` names the server in the message ("chat completions
    /// server").
    pub(crate) fn new(
        server: &'static str,
        status: u16,
        headers: &reqwest::header::HeaderMap,
        body: &[u8],
    ) -> Self {
        let body = lossy_prefix(body, MAX_ERROR_BODY_BYTES);
        let details = ProviderError::read(&body);
        let message = details
            .as_ref()
            .and_then(|d| d.message.clone())
            .unwrap_or_else(|| body.clone());
        let mut http = HttpError::new(status, server_message(&message));
        for (name, value) in headers {
            if let Ok(value) = value.to_str() {
                http = http.with_header(name.as_str(), value);
            }
        }
        let code = details.and_then(|d| d.code);
        if let Some(code) = &code {
            // The code says what the message may not ("insufficient_quota" behind a bland
            // "Request failed."): classify and the retry wrappers read it from the HttpError.
            http = http.with_code(server_message(code));
        }
        StatusError {
            http,
            body,
            code,
            server,
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

    /// The provider's error code: OpenAI's `code` (`context_length_exceeded`,
    /// `insufficient_quota`, ...), else the error's `type` (Anthropic's `overloaded_error`,
    /// `rate_limit_error`, ...), when the body had one.
    pub fn code(&self) -> Option<&str> {
        self.code.as_deref()
    }

    /// A copy with the body redacted and the `HttpError` redacted as its `Debug` shows it (the
    /// status, the code and the retry headers kept): what a run's error chain holds in its
    /// place.
    pub(crate) fn redacted(&self) -> StatusError {
        StatusError {
            http: self.http.redacted(),
            body: crate::redact::redact(&self.body).into_owned(),
            code: self.code.clone(),
            server: self.server,
        }
    }

    /// The status, headers and the provider's message as an [`HttpError`].
    pub fn http(&self) -> &HttpError {
        &self.http
    }

    /// The token counts, when the body reports a context overflow (the conversation and the
    /// reply budget do not fit the model's window): what a caller needs to decide how much of
    /// the conversation to drop or summarise.
    pub fn context_overflow(&self) -> Option<crate::classify::ContextOverflow> {
        crate::classify::ContextOverflow::parse(&self.body)
    }
}

/// The parts of an error body we read. OpenAI: `{"error": {"message", "code", "type"}}`, with
/// `code` a string at OpenAI and a number at llama.cpp; Anthropic:
/// `{"type": "error", "error": {"type", "message"}}`.
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

/// At most `max` bytes of a body as text, invalid UTF-8 replaced.
pub(crate) fn lossy_prefix(bytes: &[u8], max: usize) -> String {
    let cut = &bytes[..bytes.len().min(max)];
    String::from_utf8_lossy(cut).into_owned()
}
