//! The Messages API wire format, as far as this provider speaks it.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::chat::{
    ChatRequest, ChatResponse, FinishReason, Message, RequestOptions, ResponseFormat, ToolCall,
    ToolChoice, ToolSpec,
};
use crate::usage::Usage;

/// The key under which tool-call arguments that are not a JSON object are sent back.
pub(crate) const RAW_ARGUMENTS_KEY: &str = "raw_arguments";

#[derive(Serialize)]
pub(crate) struct RequestBody<'a> {
    model: &'a str,
    max_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<String>,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<WireToolChoice<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    stop_sequences: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    output_config: Option<OutputConfig<'a>>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    stream: bool,
}

#[derive(Serialize)]
struct WireMessage<'a> {
    role: Role,
    content: Vec<Block<'a>>,
}

#[derive(Serialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Role {
    User,
    Assistant,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block<'a> {
    Text {
        text: &'a str,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: Value,
    },
    ToolResult {
        tool_use_id: &'a str,
        content: &'a str,
        is_error: bool,
    },
}

#[derive(Serialize)]
struct WireTool<'a> {
    name: &'a str,
    description: &'a str,
    input_schema: &'a Value,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireToolChoice<'a> {
    Auto {
        #[serde(skip_serializing_if = "Option::is_none")]
        disable_parallel_tool_use: Option<bool>,
    },
    Any {
        #[serde(skip_serializing_if = "Option::is_none")]
        disable_parallel_tool_use: Option<bool>,
    },
    Tool {
        name: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        disable_parallel_tool_use: Option<bool>,
    },
    None,
}

#[derive(Serialize)]
struct OutputConfig<'a> {
    format: OutputFormat<'a>,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum OutputFormat<'a> {
    JsonSchema { schema: &'a Value },
}

impl<'a> RequestBody<'a> {
    pub(crate) fn new(model: &'a str, request: &'a ChatRequest, max_tokens: u32) -> Self {
        let options = &request.options;
        let systems: Vec<&str> = request
            .messages
            .iter()
            .filter_map(|m| match m {
                Message::System { content } if !content.is_empty() => Some(content.as_str()),
                _ => None,
            })
            .collect();
        RequestBody {
            model,
            max_tokens,
            system: (!systems.is_empty()).then(|| systems.join("\n\n")),
            messages: messages(&request.messages),
            tools: request.tools.iter().map(WireTool::from).collect(),
            tool_choice: tool_choice(options, !request.tools.is_empty()),
            temperature: options.temperature.map(as_written),
            top_p: options.top_p.map(as_written),
            stop_sequences: &options.stop,
            output_config: output_config(options),
            stream: false,
        }
    }

    /// Asks for a streamed answer.
    pub(crate) fn stream(&mut self) {
        self.stream = true;
    }
}

/// The `f64` a person would write for an `f32`: `0.2`, not `0.20000000298023224`, which is what
/// widening the bits gives.
fn as_written(value: f32) -> f64 {
    value.to_string().parse().unwrap_or(f64::from(value))
}

/// The conversation as alternating turns: system messages left out (they are the top-level
/// `system`), tool results as `tool_result` blocks of a user turn, consecutive messages of one
/// role joined into one turn, and turns left empty (no text, no calls) dropped, since the API
/// refuses empty text and empty turns. In a user turn the `tool_result` blocks come first, as
/// the API requires, even when user text was added between a call and its result.
fn messages(conversation: &[Message]) -> Vec<WireMessage<'_>> {
    let mut turns: Vec<WireMessage<'_>> = Vec::new();
    for message in conversation {
        let (role, blocks) = match message {
            Message::System { .. } => continue,
            Message::User { content } => (Role::User, text_block(content).into_iter().collect()),
            Message::Assistant {
                content,
                tool_calls,
            } => {
                let mut blocks: Vec<Block<'_>> = content
                    .as_deref()
                    .and_then(text_block)
                    .into_iter()
                    .collect();
                blocks.extend(tool_calls.iter().map(|call| Block::ToolUse {
                    id: &call.id,
                    name: &call.name,
                    input: tool_input(&call.arguments),
                }));
                (Role::Assistant, blocks)
            }
            Message::Tool(result) => (
                Role::User,
                vec![Block::ToolResult {
                    tool_use_id: &result.call_id,
                    content: &result.content,
                    is_error: result.is_error,
                }],
            ),
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some(last) if last.role == role => last.content.extend(blocks),
            _ => turns.push(WireMessage {
                role,
                content: blocks,
            }),
        }
    }
    for turn in &mut turns {
        // A stable sort: results keep their order, and so does the text after them.
        turn.content
            .sort_by_key(|block| !matches!(block, Block::ToolResult { .. }));
    }
    turns
}

fn text_block(text: &str) -> Option<Block<'_>> {
    (!text.is_empty()).then_some(Block::Text { text })
}

/// A tool call's arguments as the object `tool_use.input` must be. Arguments that are not a JSON
/// object (broken JSON the model wrote, which the agent answered with an error result, or a
/// JSON array or string) are sent as `{"raw_arguments": "<the text as written>"}`: the request
/// stays valid, and the model still sees what it wrote next to the error that answered it.
/// Empty arguments are `{}`.
pub(crate) fn tool_input(arguments: &str) -> Value {
    if arguments.trim().is_empty() {
        return Value::Object(Map::new());
    }
    match serde_json::from_str::<Value>(arguments) {
        Ok(object @ Value::Object(_)) => object,
        _ => {
            let mut wrapped = Map::new();
            wrapped.insert(
                RAW_ARGUMENTS_KEY.to_owned(),
                Value::String(arguments.to_owned()),
            );
            Value::Object(wrapped)
        }
    }
}

/// `tool_choice`, sent only with tools (the API refuses it without). `parallel_tool_calls:
/// false` is its `disable_parallel_tool_use`, which `none` does not take.
fn tool_choice(options: &RequestOptions, has_tools: bool) -> Option<WireToolChoice<'_>> {
    if !has_tools {
        return None;
    }
    let disable_parallel_tool_use = options.parallel_tool_calls.map(|parallel| !parallel);
    match options.tool_choice.as_ref() {
        None if disable_parallel_tool_use.is_none() => None,
        None | Some(ToolChoice::Auto) => Some(WireToolChoice::Auto {
            disable_parallel_tool_use,
        }),
        Some(ToolChoice::None) => Some(WireToolChoice::None),
        Some(ToolChoice::Required) => Some(WireToolChoice::Any {
            disable_parallel_tool_use,
        }),
        Some(ToolChoice::Tool(name)) => Some(WireToolChoice::Tool {
            name,
            disable_parallel_tool_use,
        }),
    }
}

/// Structured output: a JSON Schema answer goes in `output_config.format`. The API has no
/// "any JSON object" mode, so [`ResponseFormat::JsonObject`] sends nothing.
fn output_config(options: &RequestOptions) -> Option<OutputConfig<'_>> {
    match options.response_format.as_ref()? {
        ResponseFormat::JsonSchema { schema, .. } => Some(OutputConfig {
            format: OutputFormat::JsonSchema { schema },
        }),
        _ => None,
    }
}

impl<'a> From<&'a ToolSpec> for WireTool<'a> {
    fn from(spec: &'a ToolSpec) -> Self {
        WireTool {
            name: &spec.name,
            description: &spec.description,
            input_schema: &spec.parameters,
        }
    }
}

/// A Messages API answer. `content` is required: a 200 body without it (a gateway's
/// `{"type": "error", ...}`, an empty object) is not an answer, and read as an empty one it
/// would pass for a model that said nothing.
#[derive(Deserialize)]
pub(crate) struct Answer {
    content: Vec<Value>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

/// `usage` of an answer, of `message_start` or of `message_delta`.
#[derive(Deserialize, Default, Clone, Copy)]
pub(crate) struct WireUsage {
    #[serde(default)]
    pub(crate) input_tokens: Option<u64>,
    #[serde(default)]
    pub(crate) cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    pub(crate) cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    pub(crate) output_tokens: Option<u64>,
}

impl WireUsage {
    /// Every input token, cached or not: tokens written to and read from the prompt cache are
    /// input the model read, billed at other rates.
    pub(crate) fn input(&self) -> Option<u64> {
        let parts = [
            self.input_tokens,
            self.cache_creation_input_tokens,
            self.cache_read_input_tokens,
        ];
        parts.iter().any(Option::is_some).then(|| {
            parts
                .iter()
                .flatten()
                .fold(0u64, |a, b| a.saturating_add(*b))
        })
    }

    pub(crate) fn usage(&self) -> Usage {
        Usage::new(self.input().unwrap_or(0), self.output_tokens.unwrap_or(0))
    }
}

/// A `stop_reason`.
pub(crate) fn finish_reason(reason: &str) -> FinishReason {
    match reason {
        "end_turn" | "stop_sequence" => FinishReason::Stop,
        // Both cut the answer short: the window ran out before max_tokens did.
        "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
        "tool_use" => FinishReason::ToolCalls,
        "refusal" => FinishReason::Refusal,
        other => FinishReason::Other(other.to_owned()),
    }
}

impl Answer {
    /// The answer: its text blocks joined, its `tool_use` blocks as calls with their input as
    /// JSON text; other blocks (thinking, ...) are left out.
    pub(crate) fn into_response(self) -> ChatResponse {
        let mut text = String::new();
        let mut calls = Vec::new();
        for block in &self.content {
            match block.get("type").and_then(Value::as_str) {
                Some("text") => {
                    text.push_str(block.get("text").and_then(Value::as_str).unwrap_or(""));
                }
                Some("tool_use") => {
                    let field = |key: &str| {
                        block
                            .get(key)
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned()
                    };
                    let id = Some(field("id"))
                        .filter(|id| !id.is_empty())
                        .unwrap_or_else(|| format!("call_{}", calls.len()));
                    let input = match block.get("input") {
                        None | Some(Value::Null) => "{}".to_owned(),
                        Some(input) => input.to_string(),
                    };
                    calls.push(ToolCall::new(id, field("name"), input));
                }
                _ => {}
            }
        }
        let mut response = ChatResponse::tool_calls(calls);
        response.text = Some(text).filter(|t| !t.is_empty());
        response.finish_reason = self.stop_reason.as_deref().map(finish_reason);
        response.usage = self.usage.map(|u| u.usage());
        response
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::chat::ToolResult;

    #[test]
    fn arguments_that_are_not_an_object_are_wrapped_not_sent_broken() {
        assert_eq!(tool_input(r#"{"a": 1}"#), json!({"a": 1}));
        assert_eq!(tool_input("  "), json!({}));
        assert_eq!(
            tool_input(r#"{"a": 1"#),
            json!({"raw_arguments": r#"{"a": 1"#})
        );
        assert_eq!(tool_input("[1]"), json!({"raw_arguments": "[1]"}));
    }

    #[test]
    fn roles_alternate_and_empty_turns_are_dropped() {
        let call = ToolCall::new("t1", "f", "{}");
        let request = ChatRequest::new(
            vec![
                Message::user("a"),
                Message::user(""),
                Message::user("b"),
                Message::assistant(Some(String::new()), vec![]),
                Message::assistant(None, vec![call.clone()]),
                Message::Tool(ToolResult::ok(&call, "1")),
                Message::user("c"),
            ],
            vec![],
        );
        let body = serde_json::to_value(RequestBody::new("m", &request, 5)).unwrap();
        assert_eq!(
            body["messages"],
            json!([
                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "1", "is_error": false},
                    {"type": "text", "text": "c"}
                ]}
            ])
        );
        assert!(body.get("tool_choice").is_none() && body.get("system").is_none());
    }

    #[test]
    fn tool_results_come_before_user_text_added_between_a_call_and_its_result() {
        let call = ToolCall::new("t1", "f", "{}");
        let request = ChatRequest::new(
            vec![
                Message::user("a"),
                Message::assistant(None, vec![call.clone()]),
                Message::user("never mind"),
                Message::Tool(ToolResult::ok(&call, "1")),
            ],
            vec![],
        );
        let body = serde_json::to_value(RequestBody::new("m", &request, 5)).unwrap();
        assert_eq!(
            body["messages"][2]["content"],
            json!([
                {"type": "tool_result", "tool_use_id": "t1", "content": "1", "is_error": false},
                {"type": "text", "text": "never mind"}
            ])
        );
    }

    #[test]
    fn an_answer_cut_by_the_context_window_is_a_length_finish() {
        assert_eq!(
            finish_reason("model_context_window_exceeded"),
            FinishReason::Length
        );
        assert_eq!(finish_reason("max_tokens"), FinishReason::Length);
        assert_eq!(
            finish_reason("pause_turn"),
            FinishReason::Other("pause_turn".into())
        );
    }

    #[test]
    fn usage_counts_cache_tokens_as_input() {
        let usage: WireUsage = serde_json::from_value(json!({
            "input_tokens": 10, "cache_creation_input_tokens": 100,
            "cache_read_input_tokens": 1000, "output_tokens": 5
        }))
        .unwrap();
        assert_eq!(usage.usage(), Usage::new(1110, 5));
        assert_eq!(WireUsage::default().input(), None);
    }
}
