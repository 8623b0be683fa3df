//! An OpenAI-compatible chat-completions provider (feature `openai`): OpenAI, Ollama, vLLM and
//! llama.cpp servers all speak it.
//!
//! [`OpenAiModel`] implements [`ChatModel`] over `POST {base_url}/chat/completions` with reqwest
//! (rustls, no system OpenSSL). Tools are offered with their JSON Schemas, tool calls are read
//! back with their arguments as raw text, and tool results are sent back as `tool` messages.
//! The wire format has no error flag for tool messages, so an error result's content is sent
//! prefixed with [`TOOL_ERROR_PREFIX`].
//!
//! A request's [`RequestOptions`](crate::llm::RequestOptions) become the fields of the same names
//! (`temperature`, `top_p`, `stop`, `seed`, `tool_choice`, `parallel_tool_calls`,
//! `response_format`); unset options are not sent. `tool_choice` and `parallel_tool_calls` are
//! sent only with tools on offer, since servers refuse them in a request without tools.
//!
//! # Recovery inside the provider
//!
//! Below the agent's `on_llm_error`, each call recovers from what a retry can fix, following the
//! status table of [`classify`](mod@crate::classify) and adding the rules of model calls:
//!
//! - connection errors, bodies that could not be read or decoded, a success whose body broke
//!   off or is not JSON ([`OpenAiError::BrokenResponse`]: a proxy dropped the connection), and
//!   the statuses the table calls retryable (408, 409, 423, 425, 500, 502, 503, 504 and the
//!   other 5xx but 501) are retried: 3 attempts in all, 250 ms then 500 ms apart by default
//!   ([`OpenAiBuilder::transport_retry`]); a `Retry-After` (or OpenAI's `retry-after-ms`)
//!   replaces the computed delay, cut to [`OpenAiBuilder::max_retry_after`];
//! - 429 and overload errors (529, or "overloaded" in the body) are capacity events, retried the
//!   same way for calls whose [`CallSource`](crate::llm::CallSource) is on the foreground allowlist
//!   (default `{main_agent}`) and failing fast for all others; a 429 that says the quota or
//!   spending limit is used up is never retried;
//! - a 400 that reports a context overflow is sent once more with `max_tokens` set to the room
//!   the error says is left, unless that is below the floor (3000 tokens by default);
//! - a 401 calls the credential-refresh hook, if one is set, and is sent once more with the new
//!   key (the key is kept for later calls);
//! - `x-should-retry: false` stops all of this, and a request timeout is never retried: the
//!   timeout is the whole budget of the call.
//!
//! A success that is valid JSON of the wrong shape is not retried: it would come back the same.
//! Bodies are read under a size cap while they stream in: a non-streamed answer larger than
//! [`OpenAiBuilder::max_response_bytes`] (8 MiB by default) is
//! [`OpenAiError::ResponseTooLarge`], and an error body is cut to 64 KiB and classified by its
//! status; past the cap the connection is dropped and the rest is never read.
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

mod builder;
mod error;
mod stream;
mod wire;

use std::fmt;
use std::time::Duration;

pub use builder::OpenAiBuilder;
pub use error::{OpenAiConfigError, OpenAiError};
pub use wire::MaxTokensField;

use crate::error::BoxError;
use crate::error::BoxFuture as ChatFuture;
use crate::llm::{ChatModel, ChatRequest, ChatResponse};
use crate::provider::{self, StatusError, Transport};
use crate::stream::ChatStream;
use crate::stream::guard;

/// Prepended to the content of a tool result with `is_error` set, since OpenAI's `tool` message
/// has no error field.
pub const TOOL_ERROR_PREFIX: &str = "ERROR: ";

/// Where requests go when no base URL is given.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// How long one request may take, retries aside, when no timeout is given.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// A chat model behind an OpenAI-compatible `/chat/completions` endpoint. See the
/// [module docs](self) for what it retries.
///
/// # Examples
///
/// Building the model makes no request, so this runs offline; an agent then calls it on every turn:
///
/// ```
/// use agent_errors::Agent;
/// use agent_errors::openai::OpenAiModel;
///
/// let model = OpenAiModel::builder()
///     .api_key("sk-test-only")
///     .model("gpt-4o-mini")
///     .build()?;
/// let agent = Agent::builder("assistant").model(model).build()?;
/// assert_eq!(agent.name(), "assistant");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct OpenAiModel {
    client: reqwest::Client,
    url: reqwest::Url,
    model: String,
    timeout: Duration,
    max_tokens: Option<u32>,
    max_tokens_field: MaxTokensField,
    max_response_bytes: usize,
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
            .recover(&self.model, request, max_tokens, |max_tokens| {
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
            .recover(&self.model, request, max_tokens, |max_tokens| {
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
            return Err(self.status_error(response).await);
        }
        let events = guard::decode_body(response, stream::Decoder::default());
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
        if !response.status().is_success() {
            return Err(self.status_error(response).await);
        }
        let body = provider::read_capped(response, self.max_response_bytes)
            .await
            .map_err(|e| self.reqwest_error(e))?;
        if body.cut {
            return Err(OpenAiError::too_large(self.max_response_bytes));
        }
        let completion: wire::Completion = serde_json::from_slice(&body.bytes)
            .map_err(|e| OpenAiError::unparsable(&body.bytes, e))?;
        completion
            .into_response()
            .ok_or_else(|| OpenAiError::NoChoices {
                body: provider::excerpt(&body.bytes),
            })
    }

    /// An error status with the first 64 KiB of its body; the rest is never read. A body that
    /// does not come within the timeout is left out: the status says enough. (A streamed
    /// request's timeout ends with its headers, so the body needs its own.)
    async fn status_error(&self, response: reqwest::Response) -> OpenAiError {
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = tokio::time::timeout(
            self.timeout,
            provider::read_capped(response, provider::MAX_ERROR_BODY_BYTES),
        );
        match body.await {
            Ok(Ok(body)) => StatusError::new(error::SERVER, status, &headers, &body.bytes).into(),
            Ok(Err(e)) => self.reqwest_error(e),
            Err(_) => StatusError::new(error::SERVER, status, &headers, b"").into(),
        }
    }

    fn reqwest_error(&self, source: reqwest::Error) -> OpenAiError {
        // reqwest writes the request URL into the error's message and Debug, credentials
        // included; `url()` is the redacted one.
        let source = source.without_url();
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
