//! An OpenAI-compatible chat-completions provider (feature `openai`): OpenAI, Ollama, vLLM and
//! llama.cpp servers all speak it.
//!
//! [`OpenAiModel`] implements [`ChatModel`] over `POST {base_url}/chat/completions` with reqwest
//! (rustls, no system OpenSSL). Tools are offered with their JSON Schemas, tool calls are read
//! back with their arguments as raw text, and tool results are sent back as `tool` messages.
//! The wire format has no error flag for tool messages, so an error result's content is sent
//! prefixed with [`TOOL_ERROR_PREFIX`].
//!
//! # Recovery inside the provider
//!
//! Below the agent's `on_llm_error`, each call recovers from what a retry can fix, following the
//! status table of [`classify`](mod@crate::classify) and adding the rules of model calls:
//!
//! - connection errors, bodies that could not be read or decoded, and the statuses the table
//!   calls retryable (408, 409, 423, 425, 500, 502, 503, 504 and the other 5xx but 501) are
//!   retried: 3 attempts in all, 250 ms then
//!   500 ms apart by default ([`OpenAiBuilder::transport_retry`]); a `Retry-After` (or OpenAI's
//!   `retry-after-ms`) replaces the computed delay, cut to [`OpenAiBuilder::max_retry_after`];
//! - 429 and overload errors (529, or "overloaded" in the body) are capacity events, retried the
//!   same way for calls whose [`CallSource`] is on the foreground allowlist (default
//!   `{main_agent}`) and failing fast for all others; a 429 that says the quota or spending
//!   limit is used up is never retried;
//! - a 400 that reports a context overflow is sent once more with `max_tokens` set to the room
//!   the error says is left, unless that is below the floor (3000 tokens by default);
//! - a 401 calls the credential-refresh hook, if one is set, and is sent once more with the new
//!   key (the key is kept for later calls);
//! - `x-should-retry: false` stops all of this, and a request timeout is never retried: the
//!   timeout is the whole budget of the call.
//!
//! When recovery gives up, the caller gets the last attempt's [`OpenAiError`] as it was, never a
//! wrapper.
//!
//! [`OpenAiModel::stream`] (and `chat_stream`) sends `stream: true` with
//! `stream_options.include_usage`; the same recovery applies until the stream's first event, and
//! what can go wrong after it is listed in [`crate::stream`].
//!
//! ```no_run
//! use agent_errors::{ChatModel, ChatRequest, Message};
//! use agent_errors::openai::OpenAiModel;
//!
//! # async fn run() -> Result<(), agent_errors::BoxError> {
//! // OPENAI_BASE_URL=http://localhost:11434/v1 AGENT_ERRORS_MODEL=llama3.1
//! let model = OpenAiModel::from_env()?;
//! let reply = model
//!     .chat(&ChatRequest::new(vec![Message::user("Say hi")], vec![]))
//!     .await?;
//! println!("{:?}", reply.text);
//! # Ok(())
//! # }
//! ```

mod error;
mod stream;
mod wire;

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use error::{OpenAiConfigError, OpenAiError, StatusError};
pub use wire::MaxTokensField;

use crate::chat::BoxFuture as ChatFuture;
use crate::error::BoxError;
use crate::llm::retryability::RetryRules;
use crate::llm::{CallSource, ChatModel, ChatRequest, ChatResponse, MAX_RETRY_AFTER};
use crate::provider::{
    DEFAULT_FIRST_EVENT_TIMEOUT, DEFAULT_STREAM_IDLE_TIMEOUT, RefreshHook, Transport,
    default_transport_schedule, non_empty,
};
use crate::retry::{RetrySchedule, Sleep};
use crate::stream::ChatStream;
use crate::stream::guard::{self, Limits};

/// Prepended to the content of a tool result with `is_error` set, since OpenAI's `tool` message
/// has no error field.
pub const TOOL_ERROR_PREFIX: &str = "ERROR: ";

/// Where requests go when no base URL is given.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// How long one request may take, retries aside, when no timeout is given.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// Configures an [`OpenAiModel`].
pub struct OpenAiBuilder {
    base_url: String,
    api_key: Option<String>,
    model: Option<String>,
    timeout: Duration,
    max_tokens: Option<u32>,
    max_tokens_field: MaxTokensField,
    rules: RetryRules,
    transport: RetrySchedule,
    max_retry_after: Duration,
    refresh: Option<RefreshHook>,
    sleep: Sleep,
    client: Option<reqwest::Client>,
    limits: Limits,
    headers: Vec<(String, String)>,
}

impl fmt::Debug for OpenAiBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiBuilder")
            .field("base_url", &crate::redact::redact(&self.base_url))
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("model", &self.model)
            .field("timeout", &self.timeout)
            .field("max_tokens", &self.max_tokens)
            .field("rules", &self.rules)
            .field("transport", &self.transport)
            .field("credential_refresh", &self.refresh.is_some())
            .finish_non_exhaustive()
    }
}

impl Default for OpenAiBuilder {
    fn default() -> Self {
        OpenAiBuilder {
            base_url: DEFAULT_BASE_URL.to_owned(),
            api_key: None,
            model: None,
            timeout: DEFAULT_TIMEOUT,
            max_tokens: None,
            max_tokens_field: MaxTokensField::default(),
            rules: RetryRules::default(),
            transport: default_transport_schedule(),
            max_retry_after: MAX_RETRY_AFTER,
            refresh: None,
            sleep: Sleep::default(),
            client: None,
            limits: Limits {
                first_event: DEFAULT_FIRST_EVENT_TIMEOUT,
                idle: DEFAULT_STREAM_IDLE_TIMEOUT,
            },
            headers: Vec::new(),
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

    /// How long one request may take. A request that times out is not retried.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
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

    /// The call sources retried on capacity errors; replaces the default `{main_agent}`.
    #[must_use]
    pub fn foreground(mut self, sources: impl IntoIterator<Item = CallSource>) -> Self {
        self.rules = self.rules.with_foreground(sources);
        self
    }

    /// The least `max_tokens` a context-overflow retry may ask for (default 3000).
    #[must_use]
    pub fn max_tokens_floor(mut self, floor: u32) -> Self {
        self.rules = self.rules.with_max_tokens_floor(floor);
        self
    }

    /// The transport retry schedule: its attempt count and delays (default 3 attempts, 250 ms
    /// then 500 ms, no jitter). `RetrySchedule::attempts(1)` turns transport retry off.
    #[must_use]
    pub fn transport_retry(mut self, schedule: RetrySchedule) -> Self {
        self.transport = schedule;
        self
    }

    /// The longest server-requested `Retry-After` honoured as is (default 60 s); longer ones
    /// are cut to it.
    #[must_use]
    pub fn max_retry_after(mut self, cap: Duration) -> Self {
        self.max_retry_after = cap;
        self
    }

    /// Called on a 401: returns a fresh API key (or an error), and the request is sent once
    /// more with it. When the hook fails, the 401 is returned and the hook's error is logged.
    #[must_use]
    pub fn credential_refresh<F, Fut>(mut self, hook: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<String, BoxError>> + Send + 'static,
    {
        self.refresh = Some(Arc::new(move || Box::pin(hook())));
        self
    }

    /// How retry delays are waited out (default `tokio::time::sleep`, which paused test time
    /// drives). For tests against a real socket, where time cannot be paused (tokio would fire
    /// the request timeout whenever the runtime waits on I/O), a closure can record the delays
    /// and return at once.
    #[must_use]
    pub fn sleeper<F, Fut>(mut self, sleep: F) -> Self
    where
        F: Fn(Duration) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.sleep = Sleep::with(sleep);
        self
    }

    /// A reqwest client to use instead of a fresh one (proxies, custom roots). The timeout is
    /// still applied to every request.
    #[must_use]
    pub fn http_client(mut self, client: reqwest::Client) -> Self {
        self.client = Some(client);
        self
    }

    /// How long a streamed answer may take to send its first event (default 60 s). A stream
    /// that sends none in time is retried like a failed connection.
    #[must_use]
    pub fn first_event_timeout(mut self, limit: Duration) -> Self {
        self.limits.first_event = limit;
        self
    }

    /// How long a streamed answer may go silent between events (default 30 s). A stall after
    /// output began is a [`StreamError::Stalled`](crate::stream::StreamError::Stalled).
    #[must_use]
    pub fn stream_idle_timeout(mut self, idle: Duration) -> Self {
        self.limits.idle = idle;
        self
    }

    /// An extra header sent with every request (an organisation id, a gateway's routing key).
    /// A name or value that is not a valid header fails [`build`](Self::build).
    #[must_use]
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// The model, or why it cannot be built.
    pub fn build(self) -> Result<OpenAiModel, OpenAiConfigError> {
        let model = non_empty(self.model).ok_or(OpenAiConfigError::MissingModel)?;
        let base = self.base_url.trim().trim_end_matches('/');
        let url = reqwest::Url::parse(&format!("{base}/chat/completions"))
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https"))
            .ok_or_else(|| OpenAiConfigError::InvalidBaseUrl {
                url: crate::redact::redact(&self.base_url).into_owned(),
            })?;
        if let Some(key) = &self.api_key {
            crate::provider::register_key(key);
        }
        let client = match self.client {
            Some(client) => client,
            None => reqwest::Client::builder()
                .build()
                .map_err(OpenAiConfigError::Client)?,
        };
        let headers = crate::provider::header_map(&self.headers)
            .map_err(|name| OpenAiConfigError::InvalidHeader { name })?;
        Ok(OpenAiModel {
            client,
            url,
            model,
            timeout: self.timeout,
            max_tokens: self.max_tokens,
            max_tokens_field: self.max_tokens_field,
            headers,
            transport: Transport {
                rules: self.rules,
                schedule: self.transport,
                max_retry_after: self.max_retry_after,
                refresh: self.refresh,
                sleep: self.sleep,
                api_key: Mutex::new(non_empty(self.api_key)),
                limits: self.limits,
            },
        })
    }
}

/// A chat model behind an OpenAI-compatible `/chat/completions` endpoint. See the
/// [module docs](self) for what it retries.
pub struct OpenAiModel {
    client: reqwest::Client,
    url: reqwest::Url,
    model: String,
    timeout: Duration,
    max_tokens: Option<u32>,
    max_tokens_field: MaxTokensField,
    headers: reqwest::header::HeaderMap,
    transport: Transport,
}

impl fmt::Debug for OpenAiModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiModel")
            .field("url", &crate::redact::redact(self.url.as_str()))
            .field("model", &self.model)
            .field("timeout", &self.timeout)
            .field("transport", &self.transport)
            .finish_non_exhaustive()
    }
}

impl OpenAiModel {
    /// A builder.
    pub fn builder() -> OpenAiBuilder {
        OpenAiBuilder::new()
    }

    /// A model configured from `OPENAI_BASE_URL`, `OPENAI_API_KEY` and `AGENT_ERRORS_MODEL`.
    pub fn from_env() -> Result<OpenAiModel, OpenAiConfigError> {
        OpenAiBuilder::from_env().build()
    }

    /// The endpoint requests go to, with any credentials in it redacted.
    pub fn url(&self) -> std::borrow::Cow<'_, str> {
        crate::redact::redact(self.url.as_str())
    }

    /// Answers one request, with the typed error. [`ChatModel::chat`] is this, boxed.
    pub async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, OpenAiError> {
        let max_tokens = request.max_tokens.or(self.max_tokens);
        self.transport
            .recover(&self.model, &request.source, max_tokens, |max_tokens| {
                self.send(request, max_tokens)
            })
            .await
    }

    /// Answers one request as a stream, with the typed error: the request is retried (like
    /// [`complete`](Self::complete)) until the stream's first event arrives; errors after that
    /// come inside the stream. [`ChatModel::chat_stream`] is this, boxed.
    pub async fn stream(&self, request: &ChatRequest) -> Result<ChatStream<'static>, OpenAiError> {
        let max_tokens = request.max_tokens.or(self.max_tokens);
        self.transport
            .recover(&self.model, &request.source, max_tokens, |max_tokens| {
                self.open_stream(request, max_tokens)
            })
            .await
    }

    fn post(&self, body: &wire::RequestBody<'_>) -> reqwest::RequestBuilder {
        let http = self
            .client
            .post(self.url.clone())
            .headers(self.headers.clone())
            .json(body);
        match self.transport.key() {
            Some(key) => http.bearer_auth(key),
            None => http,
        }
    }

    async fn open_stream(
        &self,
        request: &ChatRequest,
        max_tokens: Option<u32>,
    ) -> Result<ChatStream<'static>, OpenAiError> {
        let mut body =
            wire::RequestBody::new(&self.model, request, max_tokens, self.max_tokens_field);
        body.stream();
        // The timeout covers the wait for the headers; the body is bounded by the stream limits.
        let response = tokio::time::timeout(self.timeout, self.post(&body).send())
            .await
            .map_err(|_| OpenAiError::HeadersTimeout {
                timeout: self.timeout,
            })?
            .map_err(|e| self.reqwest_error(e))?;
        let status = response.status();
        if !status.is_success() {
            let headers = response.headers().clone();
            let bytes = response.bytes().await.map_err(|e| self.reqwest_error(e))?;
            return Err(StatusError::new(status.as_u16(), &headers, &bytes).into());
        }
        let events = guard::decode_body(response, stream::Decoder::default(), |source| {
            Box::new(OpenAiError::Connection { source })
        });
        guard::open(events, self.transport.limits)
            .await
            .map_err(OpenAiError::from_stream)
    }

    async fn send(
        &self,
        request: &ChatRequest,
        max_tokens: Option<u32>,
    ) -> Result<ChatResponse, OpenAiError> {
        let body = wire::RequestBody::new(&self.model, request, max_tokens, self.max_tokens_field);
        let http = self.post(&body).timeout(self.timeout);
        let response = http.send().await.map_err(|e| self.reqwest_error(e))?;
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response.bytes().await.map_err(|e| self.reqwest_error(e))?;
        if !status.is_success() {
            return Err(StatusError::new(status.as_u16(), &headers, &bytes).into());
        }
        let completion: wire::Completion =
            serde_json::from_slice(&bytes).map_err(|source| OpenAiError::InvalidResponse {
                body: error::lossy_prefix(&bytes),
                source,
            })?;
        completion
            .into_response()
            .ok_or_else(|| OpenAiError::NoChoices {
                body: error::lossy_prefix(&bytes),
            })
    }

    fn reqwest_error(&self, source: reqwest::Error) -> OpenAiError {
        if source.is_timeout() {
            OpenAiError::Timeout {
                timeout: self.timeout,
                source,
            }
        } else if source.is_connect()
            || source.is_request()
            || source.is_body()
            || source.is_decode()
        {
            OpenAiError::Connection { source }
        } else {
            OpenAiError::Request { source }
        }
    }
}

impl ChatModel for OpenAiModel {
    fn chat<'a>(
        &'a self,
        request: &'a ChatRequest,
    ) -> ChatFuture<'a, Result<ChatResponse, BoxError>> {
        Box::pin(async move { self.complete(request).await.map_err(BoxError::from) })
    }

    fn chat_stream<'a>(
        &'a self,
        request: &'a ChatRequest,
    ) -> ChatFuture<'a, Result<ChatStream<'a>, BoxError>> {
        Box::pin(async move { self.stream(request).await.map_err(BoxError::from) })
    }

    fn name(&self) -> &str {
        &self.model
    }

    fn provider_name(&self) -> Option<&str> {
        Some("openai")
    }
}
