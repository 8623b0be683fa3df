//! The conversation a model sees and answers: messages, tool calls and their results, the
//! tools on offer, what is asked ([`ChatRequest`]) and what is answered ([`ChatResponse`]).
//! The [`ChatModel`](crate::ChatModel) trait that answers a request lives one floor up, in
//! `model`, beside streaming.
//!
//! These types are shared by the executor (which answers [`ToolCall`]s with [`ToolResult`]s) and
//! the model layer; neither depends on the other through them.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::events::EventSink;
use crate::retry::RunRetries;
use crate::usage::{RunMeter, Usage};

mod call;
mod estimate;
mod options;

pub use call::{ToolCall, ToolResult};
pub use options::{RequestOptions, ResponseFormat, ToolChoice};

/// One message of a conversation.
///
/// # Examples
///
/// ```
/// use agent_errors::Message;
///
/// let history = vec![
///     Message::system("You answer in one word."),
///     Message::user("Capital of Norway?"),
///     Message::assistant(Some("Oslo".into()), vec![]),
/// ];
/// for message in &history {
///     let line = match message {
///         Message::System { content } => format!("system: {content}"),
///         Message::User { content } => format!("user: {content}"),
///         Message::Assistant { content, tool_calls } => {
///             format!("assistant: {} ({} calls)", content.as_deref().unwrap_or(""), tool_calls.len())
///         }
///         Message::Tool(result) => format!("{}: {}", result.name, result.content),
///         _ => continue, // the enum is non-exhaustive
///     };
///     println!("{line}");
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Message {
    /// Instructions.
    System {
        /// The text.
        content: String,
    },
    /// The user's words.
    User {
        /// The text.
        content: String,
    },
    /// The model's turn: text, tool calls, or both.
    Assistant {
        /// The text, if any.
        content: Option<String>,
        /// The tool calls, if any.
        tool_calls: Vec<ToolCall>,
    },
    /// A tool's answer.
    Tool(ToolResult),
}

impl Message {
    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Message::System {
            content: content.into(),
        }
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Message::User {
            content: content.into(),
        }
    }

    /// An assistant message.
    pub fn assistant(content: Option<String>, tool_calls: Vec<ToolCall>) -> Self {
        Message::Assistant {
            content,
            tool_calls,
        }
    }
}

/// A tool as offered to a model.
///
/// # Examples
///
/// ```
/// use agent_errors::llm::ToolSpec;
///
/// let spec = ToolSpec {
///     name: "get_weather".into(),
///     description: "The weather in a city now.".into(),
///     parameters: serde_json::json!({
///         "type": "object",
///         "properties": {"city": {"type": "string"}},
///         "required": ["city"],
///     }),
/// };
/// assert_eq!(spec.parameters["required"][0], "city");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// The JSON Schema of its arguments.
    pub parameters: serde_json::Value,
}

/// Who is waiting for a model call: only sources on a foreground allowlist retry on capacity
/// errors.
///
/// # Examples
///
/// Mark a request nobody waits on, so capacity errors do not hold it in a retry loop:
///
/// ```
/// use agent_errors::{ChatRequest, Message, llm::CallSource};
///
/// let request = ChatRequest::new(vec![Message::user("Title for this chat?")], Vec::new())
///     .with_source(CallSource::BACKGROUND);
/// assert_eq!(request.source.as_str(), "background");
/// assert_eq!(CallSource::new("nightly_report").to_string(), "nightly_report");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CallSource(pub Cow<'static, str>);

impl CallSource {
    /// The main agent loop: a user is waiting.
    pub const MAIN_AGENT: CallSource = CallSource(Cow::Borrowed("main_agent"));
    /// A fixer agent repairing a call.
    pub const FIXER: CallSource = CallSource(Cow::Borrowed("fixer"));
    /// Work nobody waits on (titles, summaries, scoring).
    pub const BACKGROUND: CallSource = CallSource(Cow::Borrowed("background"));

    /// A source of this name.
    pub fn new(name: impl Into<Cow<'static, str>>) -> Self {
        CallSource(name.into())
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for CallSource {
    fn default() -> Self {
        CallSource::MAIN_AGENT
    }
}

impl fmt::Display for CallSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What the model is asked.
///
/// # Examples
///
/// ```
/// use agent_errors::{ChatRequest, Message};
/// use agent_errors::llm::{RequestOptions, ToolChoice};
///
/// let request = ChatRequest::new(vec![Message::user("Weather in Oslo?")], Vec::new())
///     .with_max_tokens(Some(256))
///     .with_options(RequestOptions::new().temperature(0.0).tool_choice(ToolChoice::Auto));
/// assert_eq!(request.max_tokens, Some(256));
/// ```
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct ChatRequest {
    /// The conversation so far.
    pub messages: Vec<Message>,
    /// The tools on offer, shared: an agent sends the same list in every request.
    pub tools: Arc<[ToolSpec]>,
    /// A cap on the reply's length, when set.
    pub max_tokens: Option<u32>,
    /// Sampling, tool choice and output format: what the provider is asked beyond the messages.
    pub options: RequestOptions,
    /// Who is waiting for the answer.
    pub source: CallSource,
    /// Where model wrappers record their events: the run's log inside an agent run.
    pub events: EventSink,
    /// The run's retry allowance inside an agent run: the provider's transport and the model
    /// wrappers spend it for every retry they make, so a run's retries have one bound.
    pub(crate) retries: RunRetries,
    /// The run's meter inside an agent run with caps: every request a model wrapper makes
    /// beyond the one it was asked for (a retry, a switch to a fallback) is counted on it and
    /// held to the run's caps, and so are the tokens of an answer it throws away.
    pub(crate) meter: RunMeter,
}

impl ChatRequest {
    /// A request with these messages and tools from the main agent.
    pub fn new(messages: Vec<Message>, tools: impl Into<Arc<[ToolSpec]>>) -> Self {
        ChatRequest {
            messages,
            tools: tools.into(),
            max_tokens: None,
            options: RequestOptions::default(),
            source: CallSource::MAIN_AGENT,
            events: EventSink::default(),
            retries: RunRetries::default(),
            meter: RunMeter::default(),
        }
    }

    /// Before a model wrapper asks its model again (a retry): whether the run's retry
    /// allowance and its caps let it. Always true outside a run.
    pub(crate) fn may_ask_again(&self) -> bool {
        self.retries.try_spend() && self.meter.request().is_ok()
    }

    /// Sets the source.
    #[must_use]
    pub fn with_source(mut self, source: CallSource) -> Self {
        self.source = source;
        self
    }

    /// Sets where model wrappers record events.
    #[must_use]
    pub fn with_events(mut self, events: EventSink) -> Self {
        self.events = events;
        self
    }

    /// Sets `max_tokens`.
    #[must_use]
    pub fn with_max_tokens(mut self, max_tokens: Option<u32>) -> Self {
        self.max_tokens = max_tokens;
        self
    }

    /// Sets the sampling, tool-choice and output-format options.
    #[must_use]
    pub fn with_options(mut self, options: RequestOptions) -> Self {
        self.options = options;
        self
    }
}

/// Why the model stopped answering.
///
/// # Examples
///
/// ```
/// use agent_errors::ChatResponse;
/// use agent_errors::llm::FinishReason;
///
/// let response = ChatResponse::text("The answer is").with_finish_reason(FinishReason::Length);
/// let complete = match &response.finish_reason {
///     Some(FinishReason::Stop | FinishReason::ToolCalls) | None => true,
///     Some(FinishReason::Length) => false, // cut off: ask again with more tokens
///     Some(FinishReason::ContentFilter | FinishReason::Refusal) => false,
///     Some(FinishReason::Other(reason)) => reason != "pause_turn",
///     Some(_) => false, // the enum is non-exhaustive
/// };
/// assert!(!complete);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum FinishReason {
    /// The answer is complete (OpenAI `stop`, Anthropic `end_turn` and `stop_sequence`).
    Stop,
    /// The answer was cut off at the token budget (`length`, `max_tokens`): it is not complete.
    Length,
    /// The model stopped to call tools (`tool_calls`, `tool_use`).
    ToolCalls,
    /// The provider withheld content (`content_filter`).
    ContentFilter,
    /// The model declined to answer (Anthropic `refusal`, OpenAI's `refusal` message field).
    Refusal,
    /// Any other reason, as the provider spelled it (Anthropic `pause_turn`, ...).
    Other(String),
}

/// What the model answered.
///
/// # Examples
///
/// What a [`ChatModel`](crate::ChatModel) of your own returns:
///
/// ```
/// use agent_errors::{ChatResponse, ToolCall};
///
/// let turn = ChatResponse::tool_calls(vec![ToolCall::new("c1", "search", r#"{"q": "rust"}"#)]);
/// assert!(turn.text.is_none());
/// let answer = ChatResponse::text("Rust is a language.");
/// assert_eq!(answer.text.as_deref(), Some("Rust is a language."));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ChatResponse {
    /// Text, if any.
    pub text: Option<String>,
    /// Tool calls, if any.
    pub tool_calls: Vec<ToolCall>,
    /// Why the model stopped, when the provider said.
    pub finish_reason: Option<FinishReason>,
    /// Tokens used, when the provider said.
    pub usage: Option<Usage>,
    /// The model that answered, when known: the provider's model id, so a fallback chain's
    /// answer says which of its models gave it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

impl ChatResponse {
    /// A final text answer.
    pub fn text(text: impl Into<String>) -> Self {
        ChatResponse {
            text: Some(text.into()),
            ..ChatResponse::default()
        }
    }

    /// A turn of tool calls.
    pub fn tool_calls(tool_calls: Vec<ToolCall>) -> Self {
        ChatResponse {
            tool_calls,
            ..ChatResponse::default()
        }
    }

    /// Sets the finish reason.
    #[must_use]
    pub fn with_finish_reason(mut self, reason: FinishReason) -> Self {
        self.finish_reason = Some(reason);
        self
    }

    /// Sets the usage.
    #[must_use]
    pub fn with_usage(mut self, usage: Usage) -> Self {
        self.usage = Some(usage);
        self
    }

    /// Sets the model that answered.
    #[must_use]
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }
}

/// A model answer cut off at its token budget (finish reason [`FinishReason::Length`]): the
/// agent hands it to `on_llm_error` as the model call's error instead of acting on it, so a
/// handler can retry, respond in its place, or rethrow (the run then ends with
/// `RunError::Model` holding this).
///
/// # Examples
///
/// An `on_llm_error` handler that keeps what a cut-off answer said instead of failing the run:
///
/// ```
/// use agent_errors::{Agent, ChatResponse, LlmErrorDecision};
/// use agent_errors::llm::{FinishReason, Truncated};
/// use agent_errors::testing::{Reply, ScriptedModel};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let cut_off = ChatResponse::text("The three steps are: first").with_finish_reason(FinishReason::Length);
/// let agent = Agent::builder("writer")
///     .model(ScriptedModel::new().reply(Reply::response(cut_off)))
///     .on_llm_error(|error, _attempt| match error.downcast_ref::<Truncated>() {
///         Some(truncated) => LlmErrorDecision::RespondWith(
///             format!("{} [cut off]", truncated.partial.text.as_deref().unwrap_or_default()),
///         ),
///         None => LlmErrorDecision::Rethrow,
///     })
///     .build()?;
/// assert_eq!(agent.run("Explain.").await?, "The three steps are: first [cut off]");
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the model's answer was cut off at its token budget")]
pub struct Truncated {
    /// What the model wrote before it was cut off (tool-call arguments likely incomplete).
    pub partial: ChatResponse,
}
