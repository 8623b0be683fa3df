//! The builder: where the model is, who it is, and how its calls recover.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::{
    AnthropicConfigError, AnthropicModel, DEFAULT_BASE_URL, DEFAULT_MAX_TOKENS, DEFAULT_TIMEOUT,
    MESSAGES_PATH,
};
use crate::error::BoxError;
use crate::llm::CallSource;
use crate::provider::{Settings, SettingsError, non_empty};
use crate::retry::{RetrySchedule, Sleep};

/// Configures an [`AnthropicModel`].
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

    /// How long one request may take. A request that times out is not retried.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.settings.timeout = timeout;
        self
    }

    /// The call sources retried on capacity errors (429, 529, `overloaded_error`); replaces the
    /// default `{main_agent}`.
    #[must_use]
    pub fn foreground(mut self, sources: impl IntoIterator<Item = CallSource>) -> Self {
        self.settings.rules = self.settings.rules.with_foreground(sources);
        self
    }

    /// The least `max_tokens` a context-overflow retry may ask for (default 3000).
    #[must_use]
    pub fn max_tokens_floor(mut self, floor: u32) -> Self {
        self.settings.rules = self.settings.rules.with_max_tokens_floor(floor);
        self
    }

    /// The transport retry schedule: its attempt count and delays (default 3 attempts, 250 ms
    /// then 500 ms, no jitter). `RetrySchedule::attempts(1)` turns transport retry off.
    #[must_use]
    pub fn transport_retry(mut self, schedule: RetrySchedule) -> Self {
        self.settings.schedule = schedule;
        self
    }

    /// The longest server-requested `retry-after` honoured as is (default 60 s); longer ones
    /// are cut to it.
    #[must_use]
    pub fn max_retry_after(mut self, cap: Duration) -> Self {
        self.settings.max_retry_after = cap;
        self
    }

    /// Called on a 401: returns a fresh API key (or an error), and the request is sent once
    /// more with it; the new key is registered with the redactor and kept for later calls.
    /// When the hook fails, the 401 is returned and the hook's error is logged.
    #[must_use]
    pub fn credential_refresh<F, Fut>(mut self, hook: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<String, BoxError>> + Send + 'static,
    {
        self.settings.refresh = Some(Arc::new(move || Box::pin(hook())));
        self
    }

    /// How retry delays are waited out (default `tokio::time::sleep`). For tests against a real
    /// socket, a closure can record the delays and return at once.
    #[must_use]
    pub fn sleeper<F, Fut>(mut self, sleep: F) -> Self
    where
        F: Fn(Duration) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.settings.sleep = Sleep::with(sleep);
        self
    }

    /// A reqwest client to use instead of a fresh one (proxies, custom roots). The timeout is
    /// still applied to every request.
    #[must_use]
    pub fn http_client(mut self, client: reqwest::Client) -> Self {
        self.settings.client = Some(client);
        self
    }

    /// How long a streamed answer may take to send its first content (default 60 s). A stream
    /// that sends none in time is retried like a failed connection.
    #[must_use]
    pub fn first_event_timeout(mut self, limit: Duration) -> Self {
        self.settings.limits.first_event = limit;
        self
    }

    /// How long a streamed answer may go without content between events (default 30 s); `ping`
    /// events do not count. A stall after output began ends the stream with a
    /// [`StreamError::EndedEarly`](crate::stream::StreamError::EndedEarly) whose source is a
    /// [`StreamError::Stalled`](crate::stream::StreamError::Stalled).
    #[must_use]
    pub fn stream_idle_timeout(mut self, idle: Duration) -> Self {
        self.settings.limits.idle = idle;
        self
    }

    /// How long a whole streamed answer may take, counted from its response headers (default
    /// 30 minutes); `None` turns the limit off. An answer still streaming at the deadline ends
    /// with a [`StreamError::EndedEarly`](crate::stream::StreamError::EndedEarly) whose source
    /// is a [`StreamError::DeadlineExceeded`](crate::stream::StreamError::DeadlineExceeded),
    /// however steadily its content comes: the idle limit alone does not bound a server that
    /// sends a delta just before it runs out.
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
    #[must_use]
    pub fn stream_deadline(mut self, deadline: impl Into<Option<Duration>>) -> Self {
        self.settings.limits.deadline = deadline.into();
        self
    }

    /// An extra header sent with every request (`anthropic-beta`, a gateway's routing key).
    /// A name or value that is not a valid header fails [`build`](Self::build).
    #[must_use]
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.settings.headers.push((name.into(), value.into()));
        self
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
