//! An Anthropic Messages API provider (feature `anthropic`): Anthropic's API and any server
//! that speaks `POST /v1/messages`.
//!
//! [`AnthropicModel`] implements [`ChatModel`] with reqwest (rustls, no system OpenSSL),
//! sending `x-api-key` and `anthropic-version: 2023-06-01`.
//!
//! # The wire format
//!
//! - System messages become the top-level `system` (several are joined by a blank line).
//! - An assistant turn's tool calls become `tool_use` blocks whose `input` is the arguments
//!   parsed as a JSON object. Arguments that are not a JSON object (broken JSON the agent
//!   answered with an error result) are sent as `{"raw_arguments": "<the text as written>"}`,
//!   so the request stays valid and the model sees what it wrote; empty arguments are `{}`.
//! - Tool results become `tool_result` blocks of a user turn with the native `is_error` flag;
//!   consecutive results (and any user text after them) share one user turn, since the API
//!   wants turns to alternate.
//! - Tools are offered as `{name, description, input_schema}`.
//! - `max_tokens` is required by the API: the request's own, else the builder's (default
//!   [`DEFAULT_MAX_TOKENS`], 4096, which every Claude model accepts).
//! - [`RequestOptions`](crate::llm::RequestOptions): `temperature`, `top_p`, `stop` as
//!   `stop_sequences`, `tool_choice` (`Auto` is `auto`, `None` is `none`, `Required` is `any`,
//!   `Tool(name)` is `tool`; sent only when tools are), `parallel_tool_calls: false` as
//!   `disable_parallel_tool_use`, and a JSON Schema `response_format` as
//!   `output_config.format` (Anthropic's structured outputs). The API has no "any JSON object"
//!   mode and no seed, so `ResponseFormat::JsonObject` and `seed` are left out.
//!
//! The answer's text blocks are joined; its `tool_use` blocks become
//! [`ToolCall`](crate::ToolCall)s whose arguments are the input as JSON text. `stop_reason` is
//! the [`FinishReason`](crate::llm::FinishReason) (`end_turn` and `stop_sequence` are `Stop`,
//! `max_tokens` and `model_context_window_exceeded` are `Length`, `tool_use` is `ToolCalls`,
//! `refusal` is `Refusal`, others `Other`). Usage input counts every input token: `input_tokens` plus the prompt cache's
//! `cache_creation_input_tokens` and `cache_read_input_tokens`.
//!
//! # Recovery inside the provider
//!
//! The same loop as the OpenAI provider's, over the same status table:
//!
//! - connection errors and the statuses the table calls retryable (500, 502, 503, 504, ...) are
//!   retried: 3 attempts in all, 250 ms then 500 ms apart by default; a `retry-after` replaces
//!   the computed delay, cut to [`AnthropicBuilder::max_retry_after`];
//! - 429 (`rate_limit_error`) and overloads (529, `overloaded_error`) are retried only for
//!   calls whose [`CallSource`](crate::llm::CallSource) is on the foreground allowlist (default
//!   `{main_agent}`); a 4xx that says the credit balance is too low is never retried;
//! - a 400 that says the input and `max_tokens` exceed the context window is sent once more with
//!   `max_tokens` set to the room left (not below 3000 by default); "prompt is too long", where
//!   the input alone is over the window, cannot be helped that way and is returned
//!   ([`StatusError::context_overflow`] gives its numbers);
//! - a 401 calls the credential-refresh hook, if one is set, and is sent once more;
//! - `x-should-retry: false` stops all of this, and a request timeout is never retried.
//!
//! Error bodies (`{"type": "error", "error": {"type", "message"}}`) are read up to 64 KiB into a
//! [`StatusError`] whose `source()` is an [`HttpError`](crate::HttpError) with the status, the
//! headers and the message; answers are read up to 8 MiB.
//!
//! # Streaming
//!
//! [`AnthropicModel::stream`] (and `chat_stream`) sends `stream: true` and reads the server-sent
//! events: text and `input_json_delta` fragments as deltas, `message_delta`'s stop reason and
//! usage, `message_stop` as the end. `ping` is ignored. An `error` event is read as the status
//! its type stands for (`overloaded_error` is a 529, `rate_limit_error` a 429, `api_error` a
//! 500): before any content it is a failed call, retried by the rules above; after content
//! began it ends the stream, and the agent hands `on_llm_error` a
//! [`StreamInterrupted`](crate::stream::StreamInterrupted) whose cause
//! [`classify`](crate::classify::classify()) reads as that status. What else can go wrong in a stream is
//! listed in [`crate::stream`].
//!
//! ```no_run
//! use agent_errors::{ChatModel, ChatRequest, Message};
//! use agent_errors::anthropic::AnthropicModel;
//!
//! # async fn run() -> Result<(), agent_errors::BoxError> {
//! // ANTHROPIC_API_KEY=... AGENT_ERRORS_MODEL=claude-sonnet-4-5
//! let model = AnthropicModel::from_env()?;
//! let reply = model
//!     .chat(&ChatRequest::new(vec![Message::user("Say hi")], vec![]))
//!     .await?;
//! println!("{:?}", reply.text);
//! # Ok(())
//! # }
//! ```

mod builder;
mod error;
mod stream;
mod wire;

use std::fmt;
use std::time::Duration;

pub use builder::AnthropicBuilder;
pub use error::{AnthropicConfigError, AnthropicError};

use crate::error::BoxError;
use crate::error::BoxFuture as ChatFuture;
use crate::llm::{ChatModel, ChatRequest, ChatResponse};
use crate::provider::{self, StatusError, Transport};
use crate::stream::ChatStream;
use crate::stream::guard;

/// Where requests go when no base URL is given.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";

/// The API version sent as `anthropic-version`.
pub const API_VERSION: &str = "2023-06-01";

/// The reply budget when neither the request nor the builder sets one: the API requires one,
/// and every Claude model accepts 4096.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// How long one request may take, retries aside, when no timeout is given.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

const MESSAGES_PATH: &str = "/v1/messages";

/// A chat model behind the Anthropic Messages API. See the [module docs](self) for the wire
/// format and what it retries.
///
/// # Examples
///
/// Building the model makes no request, so this runs offline:
///
/// ```
/// use agent_errors::Agent;
/// use agent_errors::anthropic::AnthropicModel;
///
/// let model = AnthropicModel::builder()
///     .api_key("sk-ant-test-only")
///     .model("claude-sonnet-4-5")
///     .max_tokens(2048)
///     .build()?;
/// assert_eq!(model.url(), "https://api.anthropic.com/v1/messages");
/// let agent = Agent::builder("assistant").model(model).build()?;
/// # let _ = agent;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct AnthropicModel {
    client: reqwest::Client,
    url: reqwest::Url,
    model: String,
    timeout: Duration,
    max_tokens: u32,
    headers: reqwest::header::HeaderMap,
    transport: Transport,
}

impl fmt::Debug for AnthropicModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnthropicModel")
            .field("url", &crate::redact::redact(self.url.as_str()))
            .field("model", &self.model)
            .field("max_tokens", &self.max_tokens)
            .field("timeout", &self.timeout)
            .field("transport", &self.transport)
            .finish_non_exhaustive()
    }
}

impl AnthropicModel {
    /// A builder.
    pub fn builder() -> AnthropicBuilder {
        AnthropicBuilder::new()
    }

    /// A model configured from `ANTHROPIC_BASE_URL`, `ANTHROPIC_API_KEY` and
    /// `AGENT_ERRORS_MODEL`.
    pub fn from_env() -> Result<AnthropicModel, AnthropicConfigError> {
        AnthropicBuilder::from_env().build()
    }

    /// The endpoint requests go to, with any credentials in it redacted.
    pub fn url(&self) -> std::borrow::Cow<'_, str> {
        crate::redact::redact(self.url.as_str())
    }

    /// Answers one request, with the typed error. [`ChatModel::chat`] is this, boxed.
    pub async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, AnthropicError> {
        let max_tokens = request.max_tokens.unwrap_or(self.max_tokens);
        self.transport
            .recover(&self.model, request, Some(max_tokens), |max_tokens| {
                self.send(request, max_tokens.unwrap_or(self.max_tokens))
            })
            .await
    }

    /// Answers one request as a stream, with the typed error: the request is retried (like
    /// [`complete`](Self::complete)) until the stream's first content arrives; errors after
    /// that come inside the stream. [`ChatModel::chat_stream`] is this, boxed.
    pub async fn stream(
        &self,
        request: &ChatRequest,
    ) -> Result<ChatStream<'static>, AnthropicError> {
        let max_tokens = request.max_tokens.unwrap_or(self.max_tokens);
        self.transport
            .recover(&self.model, request, Some(max_tokens), |max_tokens| {
                self.open_stream(request, max_tokens.unwrap_or(self.max_tokens))
            })
            .await
    }

    fn post(&self, body: &wire::RequestBody<'_>) -> reqwest::RequestBuilder {
        let http = self
            .client
            .post(self.url.clone())
            .headers(self.headers.clone())
            .header("anthropic-version", API_VERSION)
            .json(body);
        match self.transport.key() {
            Some(key) => http.header("x-api-key", key),
            None => http,
        }
    }

    async fn open_stream(
        &self,
        request: &ChatRequest,
        max_tokens: u32,
    ) -> Result<ChatStream<'static>, AnthropicError> {
        let mut body = wire::RequestBody::new(&self.model, request, max_tokens);
        body.stream();
        // The timeout covers the wait for the headers; the body is bounded by the stream limits.
        let response = tokio::time::timeout(self.timeout, self.post(&body).send())
            .await
            .map_err(|_| AnthropicError::HeadersTimeout {
                timeout: self.timeout,
            })?
            .map_err(|e| self.reqwest_error(e))?;
        if !response.status().is_success() {
            return Err(self.status_error(response).await);
        }
        let events = guard::decode_body(response, stream::Decoder::default());
        guard::open(events, self.transport.limits)
            .await
            .map_err(AnthropicError::from_stream)
    }

    async fn send(
        &self,
        request: &ChatRequest,
        max_tokens: u32,
    ) -> Result<ChatResponse, AnthropicError> {
        let body = wire::RequestBody::new(&self.model, request, max_tokens);
        let http = self.post(&body).timeout(self.timeout);
        let response = http.send().await.map_err(|e| self.reqwest_error(e))?;
        if !response.status().is_success() {
            return Err(self.status_error(response).await);
        }
        let body = provider::read_capped(response, provider::DEFAULT_MAX_RESPONSE_BYTES)
            .await
            .map_err(|e| self.reqwest_error(e))?;
        if body.cut {
            return Err(AnthropicError::ResponseTooLarge {
                limit: provider::DEFAULT_MAX_RESPONSE_BYTES,
            });
        }
        let answer: wire::Answer = serde_json::from_slice(&body.bytes)
            .map_err(|e| AnthropicError::unparsable(&body.bytes, e))?;
        Ok(answer.into_response())
    }

    /// An error answer as a [`StatusError`], its body read up to 64 KiB; the rest is never
    /// read. A body that does not come within the timeout is left out: the status says enough.
    /// (A streamed request's timeout ends with its headers, so the body needs its own.)
    async fn status_error(&self, response: reqwest::Response) -> AnthropicError {
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = provider::read_capped(response, provider::MAX_ERROR_BODY_BYTES);
        match tokio::time::timeout(self.timeout, body).await {
            Ok(Ok(body)) => StatusError::new(error::SERVER, status, &headers, &body.bytes).into(),
            Ok(Err(e)) => self.reqwest_error(e),
            Err(_) => StatusError::new(error::SERVER, status, &headers, b"").into(),
        }
    }

    fn reqwest_error(&self, source: reqwest::Error) -> AnthropicError {
        // reqwest writes the request URL into the error's message and Debug, credentials
        // included; `url()` is the redacted one.
        let source = source.without_url();
        if source.is_timeout() {
            AnthropicError::Timeout {
                timeout: self.timeout,
                source,
            }
        } else if source.is_connect()
            || source.is_request()
            || source.is_body()
            || source.is_decode()
        {
            AnthropicError::Connection { source }
        } else {
            AnthropicError::Request { source }
        }
    }
}

impl ChatModel for AnthropicModel {
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
        Some("anthropic")
    }
}
