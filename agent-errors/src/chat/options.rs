//! What a request asks of the provider beyond its messages and tools: sampling, the tool
//! choice and the output format.

/// What a request asks of the provider beyond its messages and tools. Every field is optional:
/// unset means the provider's own default, and nothing is sent for it.
///
/// A provider that cannot honour an option leaves it out of the request rather than failing.
///
/// # Examples
///
/// ```
/// use agent_errors::llm::{RequestOptions, ToolChoice};
///
/// let options = RequestOptions::new()
///     .temperature(0.2)
///     .stop(["\n\nHuman:"])
///     .tool_choice(ToolChoice::Required)
///     .parallel_tool_calls(false);
/// assert_eq!(options.temperature, Some(0.2));
/// ```
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct RequestOptions {
    /// Sampling temperature.
    pub temperature: Option<f32>,
    /// Nucleus sampling: the probability mass to sample from.
    pub top_p: Option<f32>,
    /// Sequences that end the answer when the model writes them.
    pub stop: Vec<String>,
    /// A seed for providers that sample deterministically with one.
    pub seed: Option<u64>,
    /// Whether and which tool the model must call.
    pub tool_choice: Option<ToolChoice>,
    /// Whether the model may call several tools in one turn.
    pub parallel_tool_calls: Option<bool>,
    /// The shape the final answer must take.
    pub response_format: Option<ResponseFormat>,
}

impl RequestOptions {
    /// No options: every provider default applies.
    pub fn new() -> Self {
        RequestOptions::default()
    }

    /// Sets the sampling temperature.
    #[must_use]
    pub fn temperature(mut self, temperature: f32) -> Self {
        self.temperature = Some(temperature);
        self
    }

    /// Sets nucleus sampling.
    #[must_use]
    pub fn top_p(mut self, top_p: f32) -> Self {
        self.top_p = Some(top_p);
        self
    }

    /// Sets the stop sequences.
    #[must_use]
    pub fn stop<S: Into<String>>(mut self, stop: impl IntoIterator<Item = S>) -> Self {
        self.stop = stop.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the seed.
    #[must_use]
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Sets the tool choice.
    #[must_use]
    pub fn tool_choice(mut self, choice: ToolChoice) -> Self {
        self.tool_choice = Some(choice);
        self
    }

    /// Allows or forbids several tool calls in one turn.
    #[must_use]
    pub fn parallel_tool_calls(mut self, parallel: bool) -> Self {
        self.parallel_tool_calls = Some(parallel);
        self
    }

    /// Sets the answer's format.
    #[must_use]
    pub fn response_format(mut self, format: ResponseFormat) -> Self {
        self.response_format = Some(format);
        self
    }
}

/// Whether and which tool the model must call.
///
/// # Examples
///
/// ```
/// use agent_errors::llm::{RequestOptions, ToolChoice};
///
/// let choice = ToolChoice::Tool("get_weather".into());
/// let forced = match &choice {
///     ToolChoice::Auto | ToolChoice::None => None,
///     ToolChoice::Required => Some("any tool"),
///     ToolChoice::Tool(name) => Some(name.as_str()),
///     _ => None, // the enum is non-exhaustive
/// };
/// assert_eq!(forced, Some("get_weather"));
/// let _options = RequestOptions::new().tool_choice(choice);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ToolChoice {
    /// The model decides (the usual default).
    Auto,
    /// The model must not call tools.
    None,
    /// The model must call at least one tool (OpenAI `required`, Anthropic `any`).
    Required,
    /// The model must call this tool.
    Tool(String),
}

/// The shape the final answer must take.
///
/// # Examples
///
/// ```
/// use agent_errors::llm::{RequestOptions, ResponseFormat};
///
/// let format = ResponseFormat::JsonSchema {
///     name: "weather".into(),
///     schema: serde_json::json!({"type": "object", "properties": {"celsius": {"type": "number"}}}),
///     strict: true,
/// };
/// let strict = match &format {
///     ResponseFormat::JsonObject => false,
///     ResponseFormat::JsonSchema { strict, .. } => *strict,
///     _ => false, // the enum is non-exhaustive
/// };
/// assert!(strict);
/// let _options = RequestOptions::new().response_format(format);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ResponseFormat {
    /// Any JSON object.
    JsonObject,
    /// JSON matching this schema (structured output).
    JsonSchema {
        /// A name for the schema, as providers require one (letters, digits, `_` and `-`).
        name: String,
        /// The JSON Schema.
        schema: serde_json::Value,
        /// Whether the provider must enforce the schema exactly (OpenAI `strict`).
        strict: bool,
    },
}
