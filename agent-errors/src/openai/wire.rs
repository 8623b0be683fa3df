//! The chat-completions wire format, as far as this provider speaks it.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use super::TOOL_ERROR_PREFIX;
use crate::chat::{
    ChatRequest, ChatResponse, FinishReason, Message, RequestOptions, ResponseFormat, ToolCall,
    ToolChoice, ToolSpec,
};
use crate::usage::Usage;

/// Which request field carries the reply budget.
///
/// # Examples
///
/// OpenAI's reasoning models take the reply budget under another name:
///
/// ```
/// use agent_errors::openai::{MaxTokensField, OpenAiModel};
///
/// let field = MaxTokensField::MaxCompletionTokens;
/// let model = OpenAiModel::builder()
///     .model("o4-mini")
///     .max_tokens(4096)
///     .max_tokens_field(field)
///     .build();
/// assert!(model.is_ok());
/// let sent_as = match field {
///     MaxTokensField::MaxTokens => "max_tokens",
///     MaxTokensField::MaxCompletionTokens => "max_completion_tokens",
/// };
/// assert_eq!(sent_as, "max_completion_tokens");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MaxTokensField {
    /// `max_tokens`: understood by Ollama, vLLM, llama.cpp and most OpenAI models.
    #[default]
    MaxTokens,
    /// `max_completion_tokens`: required by OpenAI's reasoning models.
    MaxCompletionTokens,
}

#[derive(Serialize)]
pub(crate) struct RequestBody<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u32>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
    #[serde(flatten)]
    options: WireOptions<'a>,
}

/// The request's options as chat-completions fields; unset ones are left out.
#[derive(Serialize)]
struct WireOptions<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f32>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    stop: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    seed: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<WireToolChoice<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parallel_tool_calls: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<WireResponseFormat<'a>>,
}

/// `"auto"`, `"none"`, `"required"`, or `{"type": "function", "function": {"name": ...}}`.
#[derive(Serialize)]
#[serde(untagged)]
enum WireToolChoice<'a> {
    Mode(&'static str),
    Function {
        #[serde(rename = "type")]
        kind: &'static str,
        function: WireToolName<'a>,
    },
}

#[derive(Serialize)]
struct WireToolName<'a> {
    name: &'a str,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireResponseFormat<'a> {
    JsonObject,
    JsonSchema { json_schema: WireJsonSchema<'a> },
}

#[derive(Serialize)]
struct WireJsonSchema<'a> {
    name: &'a str,
    schema: &'a serde_json::Value,
    strict: bool,
}

impl<'a> WireOptions<'a> {
    /// Tool choice and parallel calls go only with tools: servers refuse them without any.
    fn new(options: &'a RequestOptions, tools_offered: bool) -> Self {
        WireOptions {
            temperature: options.temperature,
            top_p: options.top_p,
            stop: &options.stop,
            seed: options.seed,
            tool_choice: options
                .tool_choice
                .as_ref()
                .filter(|_| tools_offered)
                .map(WireToolChoice::from),
            parallel_tool_calls: options.parallel_tool_calls.filter(|_| tools_offered),
            response_format: options
                .response_format
                .as_ref()
                .map(WireResponseFormat::from),
        }
    }
}

impl<'a> From<&'a ToolChoice> for WireToolChoice<'a> {
    fn from(choice: &'a ToolChoice) -> Self {
        match choice {
            ToolChoice::Auto => WireToolChoice::Mode("auto"),
            ToolChoice::None => WireToolChoice::Mode("none"),
            ToolChoice::Required => WireToolChoice::Mode("required"),
            ToolChoice::Tool(name) => WireToolChoice::Function {
                kind: "function",
                function: WireToolName { name },
            },
        }
    }
}

impl<'a> From<&'a ResponseFormat> for WireResponseFormat<'a> {
    fn from(format: &'a ResponseFormat) -> Self {
        match format {
            ResponseFormat::JsonObject => WireResponseFormat::JsonObject,
            ResponseFormat::JsonSchema {
                name,
                schema,
                strict,
            } => WireResponseFormat::JsonSchema {
                json_schema: WireJsonSchema {
                    name,
                    schema,
                    strict: *strict,
                },
            },
        }
    }
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
enum WireMessage<'a> {
    System {
        content: &'a str,
    },
    User {
        content: &'a str,
    },
    Assistant {
        content: Option<&'a str>,
        #[serde(skip_serializing_if = "<[_]>::is_empty")]
        tool_calls: Vec<WireToolCall<'a>>,
    },
    Tool {
        tool_call_id: &'a str,
        content: Cow<'a, str>,
    },
}

#[derive(Serialize)]
struct WireToolCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunctionCall<'a>,
}

#[derive(Serialize)]
struct WireFunctionCall<'a> {
    name: &'a str,
    arguments: &'a str,
}

#[derive(Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunction<'a>,
}

#[derive(Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a serde_json::Value,
}

impl<'a> RequestBody<'a> {
    pub(crate) fn new(
        model: &'a str,
        request: &'a ChatRequest,
        max_tokens: Option<u32>,
        field: MaxTokensField,
    ) -> Self {
        let (max_tokens, max_completion_tokens) = match field {
            MaxTokensField::MaxTokens => (max_tokens, None),
            MaxTokensField::MaxCompletionTokens => (None, max_tokens),
        };
        RequestBody {
            model,
            messages: request.messages.iter().map(WireMessage::from).collect(),
            tools: request.tools.iter().map(WireTool::from).collect(),
            max_tokens,
            max_completion_tokens,
            stream: false,
            stream_options: None,
            options: WireOptions::new(&request.options, !request.tools.is_empty()),
        }
    }

    /// Asks for a streamed answer, with usage in its last chunk.
    pub(crate) fn stream(&mut self) {
        self.stream = true;
        self.stream_options = Some(StreamOptions {
            include_usage: true,
        });
    }
}

impl<'a> From<&'a Message> for WireMessage<'a> {
    fn from(message: &'a Message) -> Self {
        match message {
            Message::System { content } => WireMessage::System { content },
            Message::User { content } => WireMessage::User { content },
            Message::Assistant {
                content,
                tool_calls,
            } => WireMessage::Assistant {
                // Servers refuse an assistant turn with neither text nor tool calls.
                content: match content.as_deref() {
                    None if tool_calls.is_empty() => Some(""),
                    text => text,
                },
                tool_calls: tool_calls
                    .iter()
                    .map(|call| WireToolCall {
                        id: &call.id,
                        kind: "function",
                        function: WireFunctionCall {
                            name: &call.name,
                            arguments: &call.arguments,
                        },
                    })
                    .collect(),
            },
            Message::Tool(result) => WireMessage::Tool {
                tool_call_id: &result.call_id,
                content: if result.is_error {
                    Cow::Owned(format!("{TOOL_ERROR_PREFIX}{}", result.content))
                } else {
                    Cow::Borrowed(&result.content)
                },
            },
        }
    }
}

impl<'a> From<&'a ToolSpec> for WireTool<'a> {
    fn from(spec: &'a ToolSpec) -> Self {
        WireTool {
            kind: "function",
            function: WireFunction {
                name: &spec.name,
                description: &spec.description,
                parameters: &spec.parameters,
            },
        }
    }
}

#[derive(Deserialize)]
pub(crate) struct Completion {
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct Choice {
    message: AnswerMessage,
    #[serde(default)]
    finish_reason: Option<String>,
}

/// `usage` of a completion or of a stream's last chunk.
#[derive(Deserialize)]
pub(crate) struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
}

impl From<WireUsage> for Usage {
    fn from(usage: WireUsage) -> Self {
        Usage::new(usage.prompt_tokens, usage.completion_tokens)
    }
}

/// A chat-completions `finish_reason`.
pub(crate) fn finish_reason(reason: &str) -> FinishReason {
    match reason {
        "stop" => FinishReason::Stop,
        "length" => FinishReason::Length,
        "tool_calls" | "function_call" => FinishReason::ToolCalls,
        "content_filter" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_owned()),
    }
}

#[derive(Deserialize)]
struct AnswerMessage {
    #[serde(default)]
    content: Option<serde_json::Value>,
    /// OpenAI's structured-output refusal: the model's explanation, in place of content.
    #[serde(default)]
    refusal: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<AnswerToolCall>>,
}

#[derive(Deserialize)]
struct AnswerToolCall {
    #[serde(default)]
    id: Option<String>,
    function: AnswerFunction,
}

#[derive(Deserialize)]
struct AnswerFunction {
    name: String,
    #[serde(default)]
    arguments: Option<serde_json::Value>,
}

impl Completion {
    /// The first choice as a response; `None` when there is no choice.
    pub(crate) fn into_response(self) -> Option<ChatResponse> {
        let choice = self.choices.into_iter().next()?;
        let message = choice.message;
        let tool_calls = message
            .tool_calls
            .unwrap_or_default()
            .into_iter()
            .enumerate()
            .map(|(index, call)| {
                ToolCall::new(
                    call.id.unwrap_or_else(|| format!("call_{index}")),
                    call.function.name,
                    raw_arguments(call.function.arguments),
                )
            })
            .collect();
        let mut response = ChatResponse::tool_calls(tool_calls);
        response.text = message.content.and_then(text_of).filter(|t| !t.is_empty());
        response.finish_reason = choice.finish_reason.as_deref().map(finish_reason);
        if let Some(refusal) = message.refusal.filter(|r| !r.is_empty()) {
            response.text = Some(refusal);
            response.finish_reason = Some(FinishReason::Refusal);
        }
        response.usage = self.usage.map(Usage::from);
        Some(response)
    }
}

/// The arguments exactly as sent when they are a string (the wire format), so a broken JSON text
/// reaches the agent's `invalid_args` handling untouched. Servers that send an object get its
/// JSON text; a missing value means no arguments, `{}`.
fn raw_arguments(arguments: Option<serde_json::Value>) -> String {
    match arguments {
        Some(serde_json::Value::String(raw)) => raw,
        None | Some(serde_json::Value::Null) => "{}".to_owned(),
        Some(other) => other.to_string(),
    }
}

/// A string content, or the text parts of a content array.
fn text_of(content: serde_json::Value) -> Option<String> {
    match content {
        serde_json::Value::String(text) => Some(text),
        serde_json::Value::Array(parts) => Some(
            parts
                .iter()
                .filter_map(|part| part.get("text").and_then(serde_json::Value::as_str))
                .collect(),
        ),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(body: serde_json::Value) -> ChatResponse {
        serde_json::from_value::<Completion>(body)
            .unwrap()
            .into_response()
            .unwrap()
    }

    #[test]
    fn object_arguments_become_json_text_and_missing_ids_are_made_up() {
        let response = parse(json!({"choices": [{"message": {"tool_calls": [
            {"function": {"name": "a", "arguments": {"x": 1}}},
            {"id": "call_b", "function": {"name": "b"}},
        ]}}]}));
        assert_eq!(
            response.tool_calls,
            [
                ToolCall::new("call_0", "a", r#"{"x":1}"#),
                ToolCall::new("call_b", "b", "{}")
            ]
        );
        assert_eq!(response.text, None);
    }

    #[test]
    fn content_parts_are_joined_and_empty_text_is_none() {
        let response = parse(json!({"choices": [{"message": {"content": [
            {"type": "text", "text": "Hello, "}, {"type": "text", "text": "world"}
        ]}}]}));
        assert_eq!(response.text.as_deref(), Some("Hello, world"));
        let response =
            parse(json!({"choices": [{"message": {"content": "", "tool_calls": null}}]}));
        assert_eq!(response, ChatResponse::default());
    }

    #[test]
    fn an_empty_assistant_turn_is_sent_as_empty_text() {
        let request = ChatRequest::new(vec![Message::assistant(None, vec![])], vec![]);
        let body = RequestBody::new("m", &request, Some(10), MaxTokensField::MaxCompletionTokens);
        assert_eq!(
            serde_json::to_value(&body).unwrap(),
            json!({"model": "m", "messages": [{"role": "assistant", "content": ""}],
                   "max_completion_tokens": 10})
        );
    }

    fn body_with(options: RequestOptions, tools: Vec<ToolSpec>) -> serde_json::Value {
        let request = ChatRequest::new(vec![Message::user("hi")], tools).with_options(options);
        let body = RequestBody::new("m", &request, None, MaxTokensField::MaxTokens);
        serde_json::to_value(&body).unwrap()
    }

    fn a_tool() -> ToolSpec {
        ToolSpec {
            name: "t".into(),
            description: "d".into(),
            parameters: json!({"type": "object"}),
        }
    }

    #[test]
    fn every_tool_choice_has_its_wire_form() {
        let choices = [
            (ToolChoice::Auto, json!("auto")),
            (ToolChoice::None, json!("none")),
            (ToolChoice::Required, json!("required")),
            (
                ToolChoice::Tool("t".into()),
                json!({"type": "function", "function": {"name": "t"}}),
            ),
        ];
        for (choice, wire) in choices {
            let body = body_with(RequestOptions::new().tool_choice(choice), vec![a_tool()]);
            assert_eq!(body["tool_choice"], wire);
        }
    }

    #[test]
    fn unset_options_and_tool_options_without_tools_are_not_sent() {
        let body = body_with(RequestOptions::new(), vec![]);
        assert_eq!(
            body,
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        );
        let tool_only = RequestOptions::new()
            .tool_choice(ToolChoice::Required)
            .parallel_tool_calls(false);
        let body = body_with(tool_only, vec![]);
        assert_eq!(body.get("tool_choice"), None);
        assert_eq!(body.get("parallel_tool_calls"), None);
    }

    #[test]
    fn response_formats_have_their_wire_form() {
        let body = body_with(
            RequestOptions::new().response_format(ResponseFormat::JsonObject),
            vec![],
        );
        assert_eq!(body["response_format"], json!({"type": "json_object"}));
        let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}});
        let format = ResponseFormat::JsonSchema {
            name: "Count".into(),
            schema: schema.clone(),
            strict: true,
        };
        let body = body_with(RequestOptions::new().response_format(format), vec![]);
        assert_eq!(
            body["response_format"],
            json!({"type": "json_schema",
                   "json_schema": {"name": "Count", "schema": schema, "strict": true}})
        );
    }
}
