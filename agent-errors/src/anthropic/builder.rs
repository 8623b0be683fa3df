//! The builder: where the model is, who it is, and how its calls recover.

use std::fmt;

use super::{
    AnthropicConfigError, AnthropicModel, DEFAULT_BASE_URL, DEFAULT_MAX_TOKENS, DEFAULT_TIMEOUT,
    MESSAGES_PATH,
};
use crate::provider::{Settings, SettingsError, non_empty};

/// Configures an [`AnthropicModel`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use agent_errors::anthropic::AnthropicModel;
///
/// let model = AnthropicModel::builder()
///     .api_key("sk-ant-example-key-0000")
///     .model("claude-sonnet-4-5")
///     .max_tokens(2048)
///     .header("anthropic-beta", "token-efficient-tools-2025-02-19")
///     .stream_idle_timeout(Duration::from_secs(20))
///     .build()?;
/// assert_eq!(model.url(), "https://api.anthropic.com/v1/messages");
/// assert!(!format!("{model:?}").contains("sk-ant-example-key-0000"));
/// # Ok::<(), agent_errors::anthropic::AnthropicConfigError>(())
/// ```
pub struct AnthropicBuilder {
    base_url: String,
    api_key: Option<String>,
    model: Option<String>,
    max_tokens: u32,
    settings: Settings,
}

impl fmt::Debug for AnthropicBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnthropicBuilder")
            .field("base_url", &crate::redact::redact(&self.base_url))
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("model", &self.model)
            .field("max_tokens", &self.max_tokens)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Default for AnthropicBuilder {
    fn default() -> Self {
        AnthropicBuilder {
            base_url: DEFAULT_BASE_URL.to_owned(),
            api_key: None,
            model: None,
            max_tokens: DEFAULT_MAX_TOKENS,
            settings: Settings::new(DEFAULT_TIMEOUT),
        }
    }
}

impl AnthropicBuilder {
    /// A builder with the defaults: Anthropic's URL, no key, no model, `max_tokens` 4096, 120 s
    /// timeout.
    pub fn new() -> Self {
        AnthropicBuilder::default()
    }

    /// A builder filled from the environment: `ANTHROPIC_BASE_URL` (default Anthropic's),
    /// `ANTHROPIC_API_KEY` (optional: a local compatible server may need none) and
    /// `AGENT_ERRORS_MODEL`.
    pub fn from_env() -> Self {
        AnthropicBuilder::from_vars(|name| std::env::var(name).ok())
    }

    /// Like [`AnthropicBuilder::from_env`], reading variables through `lookup`. Empty values
    /// count as unset.
    pub fn from_vars(lookup: impl Fn(&str) -> Option<String>) -> Self {
        let mut builder = AnthropicBuilder::new();
        if let Some(url) = non_empty(lookup("ANTHROPIC_BASE_URL")) {
            builder.base_url = url;
        }
        builder.api_key = non_empty(lookup("ANTHROPIC_API_KEY"));
        builder.model = non_empty(lookup("AGENT_ERRORS_MODEL"));
        builder
    }

    /// The server's base URL, without `/v1` (`https://api.anthropic.com`, as Anthropic's SDKs
    /// take it): requests go to `{base_url}/v1/messages`.
    #[must_use]
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = url.into();
        self
    }

    /// The API key, sent as `x-api-key`. It is registered with the redactor when the model is
    /// built, so no error text, event or log shows it.
    #[must_use]
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// The model name (`claude-sonnet-4-5`, ...).
    #[must_use]
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// The reply budget used when a request does not set its own (default 4096). The API
    /// requires one on every request.
    #[must_use]
    pub fn max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = max_tokens;
        self
    }

    crate::provider::settings_setters! {
        foreground: {
            /// The call sources retried on capacity errors (429, 529, `overloaded_error`); replaces
            /// the default `{main_agent}`.
        },
        first_event_timeout: {
            /// How long a streamed answer may take to send its first content (default 60 s). A
            /// stream that sends none in time is retried like a failed connection.
        },
        stream_idle_timeout: {
            /// How long a streamed answer may go without content between events (default 30 s);
            /// `ping` events do not count. A stall after output began ends the stream with a
            /// [`StreamError::EndedEarly`](crate::stream::StreamError::EndedEarly) whose source is
            /// a [`StreamError::Stalled`](crate::stream::StreamError::Stalled).
        },
        stream_deadline: {
            /// How long a whole streamed answer may take, counted from its response headers
            /// (default 30 minutes); `None` turns the limit off. An answer still streaming at the
            /// deadline ends with a
            /// [`StreamError::EndedEarly`](crate::stream::StreamError::EndedEarly) whose source is
            /// a [`StreamError::DeadlineExceeded`](crate::stream::StreamError::DeadlineExceeded),
            /// however steadily its content comes: the idle limit alone does not bound a server
            /// that sends a delta just before it runs out.
            ///
            /// ```
            /// use std::time::Duration;
            ///
            /// let model = agent_errors::anthropic::AnthropicModel::builder()
            ///     .model("m")
            ///     .stream_deadline(Duration::from_secs(300)) // `None`: no deadline
            ///     .build()?;
            /// # Ok::<(), agent_errors::anthropic::AnthropicConfigError>(())
            /// ```
        },
        header: {
            /// An extra header sent with every request (`anthropic-beta`, a gateway's routing key).
            /// A name or value that is not a valid header fails [`build`](Self::build).
        },
    }

    /// The model, or why it cannot be built.
    pub fn build(self) -> Result<AnthropicModel, AnthropicConfigError> {
        let model = non_empty(self.model).ok_or(AnthropicConfigError::MissingModel)?;
        if self.max_tokens == 0 {
            return Err(AnthropicConfigError::ZeroMaxTokens);
        }
        let url = crate::provider::endpoint(&self.base_url, MESSAGES_PATH).ok_or_else(|| {
            AnthropicConfigError::InvalidBaseUrl {
                url: crate::redact::redact(&self.base_url).into_owned(),
            }
        })?;
        let parts = self.settings.finish(self.api_key).map_err(|e| match e {
            SettingsError::InvalidHeader(name) => AnthropicConfigError::InvalidHeader { name },
            SettingsError::Client(e) => AnthropicConfigError::Client(e),
        })?;
        Ok(AnthropicModel {
            client: parts.client,
            url,
            model,
            timeout: parts.timeout,
            max_tokens: self.max_tokens,
            headers: parts.headers,
            transport: parts.transport,
        })
    }
}
