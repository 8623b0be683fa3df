//! The builder: where the model is, who it is, and how its calls recover.

use std::fmt;

use super::{DEFAULT_BASE_URL, DEFAULT_TIMEOUT, MaxTokensField, OpenAiConfigError, OpenAiModel};
use crate::provider::{Settings, SettingsError, non_empty};

/// Configures an [`OpenAiModel`].
///
/// # Examples
///
/// A local server, with the provider's own retries made shorter:
///
/// ```
/// use std::time::Duration;
/// use agent_errors::openai::OpenAiModel;
/// use agent_errors::retry::RetrySchedule;
///
/// let model = OpenAiModel::builder()
///     .base_url("http://localhost:11434/v1") // Ollama
///     .model("llama3.1")
///     .timeout(Duration::from_secs(60))
///     .transport_retry(RetrySchedule::attempts(2)?)
///     .build()?;
/// assert_eq!(model.url(), "http://localhost:11434/v1/chat/completions");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct OpenAiBuilder {
    base_url: String,
    api_key: Option<String>,
    model: Option<String>,
    max_tokens: Option<u32>,
    max_tokens_field: MaxTokensField,
    max_response_bytes: usize,
    settings: Settings,
}

impl fmt::Debug for OpenAiBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiBuilder")
            .field("base_url", &crate::redact::redact(&self.base_url))
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("model", &self.model)
            .field("max_tokens", &self.max_tokens)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Default for OpenAiBuilder {
    fn default() -> Self {
        OpenAiBuilder {
            base_url: DEFAULT_BASE_URL.to_owned(),
            api_key: None,
            model: None,
            max_tokens: None,
            max_tokens_field: MaxTokensField::default(),
            max_response_bytes: crate::provider::DEFAULT_MAX_RESPONSE_BYTES,
            settings: Settings::new(DEFAULT_TIMEOUT),
        }
    }
}

impl OpenAiBuilder {
    /// A builder with the defaults: OpenAI's URL, no key, no model, 120 s timeout.
    pub fn new() -> Self {
        OpenAiBuilder::default()
    }

    /// A builder filled from the environment: `OPENAI_BASE_URL` (default OpenAI's),
    /// `OPENAI_API_KEY` (optional: local servers need none) and `AGENT_ERRORS_MODEL`.
    pub fn from_env() -> Self {
        OpenAiBuilder::from_vars(|name| std::env::var(name).ok())
    }

    /// Like [`OpenAiBuilder::from_env`], reading variables through `lookup`. Empty values count
    /// as unset.
    pub fn from_vars(lookup: impl Fn(&str) -> Option<String>) -> Self {
        let mut builder = OpenAiBuilder::new();
        if let Some(url) = non_empty(lookup("OPENAI_BASE_URL")) {
            builder.base_url = url;
        }
        builder.api_key = non_empty(lookup("OPENAI_API_KEY"));
        builder.model = non_empty(lookup("AGENT_ERRORS_MODEL"));
        builder
    }

    /// The server's base URL, up to and including `/v1`
    /// (`http://localhost:11434/v1` for Ollama).
    #[must_use]
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = url.into();
        self
    }

    /// The API key, sent as a bearer token.
    #[must_use]
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// The model name.
    #[must_use]
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// The reply budget used when a request does not set its own.
    #[must_use]
    pub fn max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = Some(max_tokens);
        self
    }

    /// Which request field carries the reply budget.
    #[must_use]
    pub fn max_tokens_field(mut self, field: MaxTokensField) -> Self {
        self.max_tokens_field = field;
        self
    }

    /// The most of a (non-streamed) answer's body read, 8 MiB by default: a larger answer is
    /// [`OpenAiError::ResponseTooLarge`](super::OpenAiError::ResponseTooLarge), found out
    /// while it streams in, so the rest is never read. Error bodies are always cut to 64 KiB
    /// the same way. Streamed answers are bounded by their line and event caps instead.
    #[must_use]
    pub fn max_response_bytes(mut self, limit: usize) -> Self {
        self.max_response_bytes = limit;
        self
    }

    crate::provider::settings_setters! {
        foreground: {
            /// The call sources retried on capacity errors; replaces the default `{main_agent}`.
        },
        first_event_timeout: {
            /// How long a streamed answer may take to send its first event (default 60 s). A stream
            /// that sends none in time is retried like a failed connection.
        },
        stream_idle_timeout: {
            /// How long a streamed answer may go silent between events (default 30 s). A stall
            /// after output began ends the stream with a
            /// [`StreamError::EndedEarly`](crate::stream::StreamError::EndedEarly) whose source is
            /// a [`StreamError::Stalled`](crate::stream::StreamError::Stalled).
        },
        stream_deadline: {
            /// How long a whole streamed answer may take, counted from its response headers
            /// (default 30 minutes); `None` turns the limit off. An answer still streaming at the
            /// deadline ends with a
            /// [`StreamError::EndedEarly`](crate::stream::StreamError::EndedEarly) whose source is
            /// a [`StreamError::DeadlineExceeded`](crate::stream::StreamError::DeadlineExceeded),
            /// however steadily its events come: the idle limit alone does not bound a server that
            /// sends an event just before it runs out.
            ///
            /// ```
            /// use std::time::Duration;
            ///
            /// let model = agent_errors::openai::OpenAiModel::builder()
            ///     .model("m")
            ///     .stream_deadline(Duration::from_secs(300)) // `None`: no deadline
            ///     .build()?;
            /// # Ok::<(), agent_errors::openai::OpenAiConfigError>(())
            /// ```
        },
        header: {
            /// An extra header sent with every request (an organisation id, a gateway's routing
            /// key). A name or value that is not a valid header fails [`build`](Self::build).
        },
    }

    /// The model, or why it cannot be built.
    pub fn build(self) -> Result<OpenAiModel, OpenAiConfigError> {
        let model = non_empty(self.model).ok_or(OpenAiConfigError::MissingModel)?;
        let url =
            crate::provider::endpoint(&self.base_url, "/chat/completions").ok_or_else(|| {
                OpenAiConfigError::InvalidBaseUrl {
                    url: crate::redact::redact(&self.base_url).into_owned(),
                }
            })?;
        let parts = self.settings.finish(self.api_key).map_err(|e| match e {
            SettingsError::InvalidHeader(name) => OpenAiConfigError::InvalidHeader { name },
            SettingsError::Client(e) => OpenAiConfigError::Client(e),
        })?;
        Ok(OpenAiModel {
            client: parts.client,
            url,
            model,
            timeout: parts.timeout,
            max_tokens: self.max_tokens,
            max_tokens_field: self.max_tokens_field,
            max_response_bytes: self.max_response_bytes,
            headers: parts.headers,
            transport: parts.transport,
        })
    }
}
