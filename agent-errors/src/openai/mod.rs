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
//! wrapper. Streaming is not implemented.
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
mod wire;

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;

pub use error::{OpenAiConfigError, OpenAiError, StatusError};

use crate::classify::{classify, server_delay};
use crate::error::BoxError;
use crate::llm::retryability::{RetryRules, StopReason, Verdict};
use crate::llm::{CallSource, ChatModel, ChatRequest, ChatResponse, MAX_RETRY_AFTER};
use crate::retry::{Retrier, RetrySchedule, Sleep, Step};

/// Prepended to the content of a tool result with `is_error` set, since OpenAI's `tool` message
/// has no error field.
pub const TOOL_ERROR_PREFIX: &str = "ERROR: ";

/// Where requests go when no base URL is given.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// How long one request may take, retries aside, when no timeout is given.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// Which request field carries the reply budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MaxTokensField {
    /// `max_tokens`: understood by Ollama, vLLM, llama.cpp and most OpenAI models.
    #[default]
    MaxTokens,
    /// `max_completion_tokens`: required by OpenAI's reasoning models.
    MaxCompletionTokens,
}

type RefreshHook = Arc<dyn Fn() -> BoxFuture<'static, Result<String, BoxError>> + Send + Sync>;

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
}

impl fmt::Debug for OpenAiBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiBuilder")
            .field("base_url", &self.base_url)
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
        }
    }
}

fn default_transport_schedule() -> RetrySchedule {
    RetrySchedule::attempts(3)
        .expect("3 attempts is not zero")
        .with_initial(Duration::from_millis(250))
        .with_jitter(0.0)
}

fn non_empty(value: Option<String>) -> Option<String> {
    value.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty())
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

    /// The model, or why it cannot be built.
    pub fn build(self) -> Result<OpenAiModel, OpenAiConfigError> {
        let model = non_empty(self.model).ok_or(OpenAiConfigError::MissingModel)?;
        let base = self.base_url.trim().trim_end_matches('/');
        let url = reqwest::Url::parse(&format!("{base}/chat/completions"))
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https"))
            .ok_or_else(|| OpenAiConfigError::InvalidBaseUrl {
                url: self.base_url.clone(),
            })?;
        let client = match self.client {
            Some(client) => client,
            None => reqwest::Client::builder()
                .build()
                .map_err(OpenAiConfigError::Client)?,
        };
        Ok(OpenAiModel {
            client,
            url,
            model,
            api_key: Mutex::new(non_empty(self.api_key)),
            timeout: self.timeout,
            max_tokens: self.max_tokens,
            max_tokens_field: self.max_tokens_field,
            rules: self.rules,
            transport: self.transport,
            max_retry_after: self.max_retry_after,
            refresh: self.refresh,
            sleep: self.sleep,
        })
    }
}

/// A chat model behind an OpenAI-compatible `/chat/completions` endpoint. See the
/// [module docs](self) for what it retries.
pub struct OpenAiModel {
    client: reqwest::Client,
    url: reqwest::Url,
    model: String,
    api_key: Mutex<Option<String>>,
    timeout: Duration,
    max_tokens: Option<u32>,
    max_tokens_field: MaxTokensField,
    rules: RetryRules,
    transport: RetrySchedule,
    max_retry_after: Duration,
    refresh: Option<RefreshHook>,
    sleep: Sleep,
}

impl fmt::Debug for OpenAiModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiModel")
            .field("url", &self.url.as_str())
            .field("model", &self.model)
            .field("timeout", &self.timeout)
            .field("rules", &self.rules)
            .finish_non_exhaustive()
    }
}

/// What one failed attempt leads to.
enum Next {
    Sleep(Duration),
    ShrinkTo(u32),
    Refresh(RefreshHook),
    GiveUp,
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

    /// The endpoint requests go to.
    pub fn url(&self) -> &str {
        self.url.as_str()
    }

    /// Answers one request, with the typed error. [`ChatModel::chat`] is this, boxed.
    pub async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, OpenAiError> {
        let mut max_tokens = request.max_tokens.or(self.max_tokens);
        let mut retrier = Retrier::new(&self.transport);
        let mut shrunk = false;
        let mut refreshed = false;
        loop {
            let error = match self.send(request, max_tokens).await {
                Ok(response) => return Ok(response),
                Err(error) => error,
            };
            let next = match self.verdict(&error, &request.source) {
                Verdict::Retry => {
                    let server = server_delay(&error, self.max_retry_after);
                    match retrier.after_failure(true, server) {
                        Step::Wait(delay) => Next::Sleep(delay),
                        Step::Stop(_) => Next::GiveUp,
                    }
                }
                Verdict::RetryWithMaxTokens(n) if !shrunk => {
                    shrunk = true;
                    Next::ShrinkTo(n)
                }
                Verdict::RefreshCredentials if !refreshed => {
                    refreshed = true;
                    self.refresh.clone().map_or(Next::GiveUp, Next::Refresh)
                }
                _ => Next::GiveUp,
            };
            match next {
                Next::Sleep(delay) => {
                    tracing::debug!(
                        model = %self.model, status = error.status(), retry = retrier.failures(),
                        delay_ms = delay.as_millis() as u64, "retrying chat completion"
                    );
                    self.sleep.sleep(delay).await;
                }
                Next::ShrinkTo(n) => {
                    tracing::debug!(model = %self.model, max_tokens = n, "context overflow: retrying with a smaller max_tokens");
                    max_tokens = Some(n);
                }
                Next::Refresh(hook) => match hook().await {
                    Ok(key) => *self.key_slot() = non_empty(Some(key)),
                    Err(refresh_error) => {
                        tracing::warn!(model = %self.model, error = %refresh_error, "credential refresh failed");
                        return Err(error);
                    }
                },
                Next::GiveUp => return Err(error),
            }
        }
    }

    /// A status goes through the model-call rules; any other failure through the status table
    /// of `classify`, except a timeout: the timeout is the whole budget of the call.
    fn verdict(&self, error: &OpenAiError, source: &CallSource) -> Verdict {
        match error {
            OpenAiError::Status(e) => self.rules.assess(e.http(), e.body(), source),
            OpenAiError::Timeout { .. } => Verdict::Stop(StopReason::NotRetryable),
            _ if classify(error).is_retryable() => Verdict::Retry,
            _ => Verdict::Stop(StopReason::NotRetryable),
        }
    }

    fn key_slot(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        // Only whole `Option<String>` values are ever stored, so a poisoned lock holds a valid one.
        self.api_key.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn send(
        &self,
        request: &ChatRequest,
        max_tokens: Option<u32>,
    ) -> Result<ChatResponse, OpenAiError> {
        let body = wire::RequestBody::new(&self.model, request, max_tokens, self.max_tokens_field);
        let mut http = self
            .client
            .post(self.url.clone())
            .timeout(self.timeout)
            .json(&body);
        let key = self.key_slot().clone();
        if let Some(key) = key {
            http = http.bearer_auth(key);
        }
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
    ) -> BoxFuture<'a, Result<ChatResponse, BoxError>> {
        Box::pin(async move { self.complete(request).await.map_err(BoxError::from) })
    }

    fn name(&self) -> &str {
        &self.model
    }

    fn provider_name(&self) -> Option<&str> {
        Some("openai")
    }
}
