//! Our chat types to rig's and back: a [`ChatRequest`] as a rig `CompletionRequest`, a rig
//! `CompletionResponse` as a [`ChatResponse`].

use rig_core::completion::{
    self as rig, AssistantContent, CompletionRequest, CompletionResponse, ToolDefinition,
};
use rig_core::message::{
    self as rig_message, AssistantMessage, CallId, ToolFunction, ToolName, ToolResultContent,
    UserContent,
};

use crate::chat::{
    ChatRequest, ChatResponse, FinishReason, Message, ResponseFormat, ToolCall, ToolChoice,
    ToolSpec,
};
use crate::usage::Usage;

/// Why a request could not be written as rig's; a [`RigModel`](super::RigModel) call fails with
/// it, before anything is sent. Never retried (`classify` finds nothing retryable in it).
///
/// # Examples
///
/// ```
/// use agent_errors::rig::ConvertError;
///
/// fn explain(error: &ConvertError) -> &'static str {
///     match error {
///         ConvertError::EmptyToolName => "a tool call or result names no tool",
///         ConvertError::EmptyConversation => "nothing to send",
///         ConvertError::InvalidSchema => "the structured-output schema is not an object",
///         _ => "another reason",
///     }
/// }
/// assert_eq!(explain(&ConvertError::EmptyConversation), "nothing to send");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConvertError {
    /// A tool call or tool result names no tool (rig refuses an empty tool name).
    #[error("a tool call or tool result in the conversation names no tool")]
    EmptyToolName,
    /// The conversation has no message to send.
    #[error("the conversation has no message to send")]
    EmptyConversation,
    /// The structured-output schema is not a JSON Schema rig accepts (an object or a bool).
    #[error("the response format's schema is not a JSON Schema object")]
    InvalidSchema,
}

/// The settings a model sends with every request: its own model id among them, so each model of
/// a fallback chain names itself.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Settings {
    pub(crate) model_id: Option<String>,
    pub(crate) temperature: Option<f64>,
    pub(crate) max_tokens: Option<u64>,
    pub(crate) additional_params: Option<serde_json::Value>,
}

/// `request` as rig's, under `settings`. What the request sets wins over the settings.
pub(crate) fn to_rig(
    request: &ChatRequest,
    settings: &Settings,
) -> Result<CompletionRequest, ConvertError> {
    let mut history = Vec::with_capacity(request.messages.len());
    for message in &request.messages {
        push_message(&mut history, message)?;
    }
    // rig's request is built around its last message, the prompt; the rest goes before it.
    let prompt = history.pop().ok_or(ConvertError::EmptyConversation)?;
    let tools = request
        .tools
        .iter()
        .map(tool_definition)
        .collect::<Result<Vec<_>, _>>()?;
    let options = &request.options;
    let mut rig_request = CompletionRequest::new(prompt)
        .messages(history)
        .tools(tools)
        .model::<String>(settings.model_id.clone())
        .temperature(options.temperature.map(f64::from).or(settings.temperature))
        .max_tokens(request.max_tokens.map(u64::from).or(settings.max_tokens));
    rig_request.additional_params = settings.additional_params.clone();
    rig_request.options.top_p = options.top_p.map(f64::from);
    rig_request.options.seed = options.seed;
    rig_request.options.stop = options.stop.clone();
    rig_request.options.parallel_tool_calls = options.parallel_tool_calls;
    if let Some(choice) = &options.tool_choice {
        rig_request = rig_request.tool_choice(tool_choice(choice)?);
    }
    if let Some(ResponseFormat::JsonSchema { schema, .. }) = &options.response_format {
        let schema = rig_core::schemars::Schema::try_from(schema.clone())
            .map_err(|_| ConvertError::InvalidSchema)?;
        rig_request = rig_request.output_schema(schema);
    }
    Ok(rig_request)
}

fn tool_name(name: &str) -> Result<ToolName, ConvertError> {
    ToolName::new(name).map_err(|_| ConvertError::EmptyToolName)
}

fn tool_definition(spec: &ToolSpec) -> Result<ToolDefinition, ConvertError> {
    Ok(ToolDefinition::new(
        tool_name(&spec.name)?,
        spec.description.clone(),
        spec.parameters.clone(),
    ))
}

fn tool_choice(choice: &ToolChoice) -> Result<rig_message::ToolChoice, ConvertError> {
    Ok(match choice {
        ToolChoice::None => rig_message::ToolChoice::None,
        ToolChoice::Required => rig_message::ToolChoice::Required,
        ToolChoice::Tool(name) => rig_message::ToolChoice::Specific {
            function_names: vec![tool_name(name)?],
        },
        ToolChoice::Auto => rig_message::ToolChoice::Auto,
    })
}

/// Appends `message`; consecutive tool results share one user message, as providers expect.
fn push_message(
    history: &mut Vec<rig_message::Message>,
    message: &Message,
) -> Result<(), ConvertError> {
    let converted = match message {
        Message::System { content } => rig_message::Message::system(content.clone()),
        Message::User { content } => rig_message::Message::user(content.clone()),
        Message::Assistant {
            content,
            tool_calls,
        } => {
            let mut blocks = Vec::with_capacity(1 + tool_calls.len());
            blocks.extend(content.clone().map(AssistantContent::text));
            for call in tool_calls {
                blocks.push(AssistantContent::ToolCall(
                    rig_message::ToolCall::from_wire(
                        call.id.to_string(),
                        ToolFunction::parse(tool_name(&call.name)?, &call.arguments),
                    ),
                ));
            }
            rig_message::Message::Assistant(AssistantMessage::new(blocks))
        }
        Message::Tool(result) => {
            let block = UserContent::ToolResult(rig_message::ToolResult {
                call: CallId::from_wire(result.call_id.to_string()),
                name: tool_name(&result.name)?,
                content: vec![ToolResultContent::text(result.content.clone())],
                is_error: result.is_error,
            });
            if let Some(rig_message::Message::User { content }) = history.last_mut()
                && content
                    .iter()
                    .all(|part| matches!(part, UserContent::ToolResult(_)))
            {
                content.push(block);
                return Ok(());
            }
            rig_message::Message::User {
                content: vec![block],
            }
        }
    };
    history.push(converted);
    Ok(())
}

/// rig's answer as ours: text blocks joined, tool calls with their arguments as JSON text, the
/// finish reason, the usage, and the model that answered.
pub(crate) fn from_rig(response: &CompletionResponse) -> ChatResponse {
    let mut text: Option<String> = None;
    let mut tool_calls = Vec::new();
    for block in &response.choice {
        match block {
            AssistantContent::Text(part) => {
                text.get_or_insert_with(String::new).push_str(&part.text)
            }
            AssistantContent::ToolCall(call) => tool_calls.push(tool_call(call)),
            _ => {}
        }
    }
    ChatResponse {
        text,
        tool_calls,
        finish_reason: finish_reason(response),
        usage: response.usage.is_reported().then(|| usage(&response.usage)),
        model: Some(response.origin.model.clone()).filter(|model| !model.is_empty()),
    }
}

fn tool_call(call: &rig_message::ToolCall) -> ToolCall {
    // Arguments that were not a JSON object are passed on as the model wrote them, for the
    // gate to refuse and a fixer to repair.
    let arguments = match &call.function.invalid_arguments {
        Some(raw) => raw.clone(),
        None => serde_json::Value::Object(call.function.arguments.clone()).to_string(),
    };
    ToolCall::new(
        call.id.wire().into_owned(),
        call.function.name.as_str(),
        arguments,
    )
}

fn finish_reason(response: &CompletionResponse) -> Option<FinishReason> {
    // The provider's report that it failed the turn (a refusal's explanation) is a refusal.
    if response.error.is_some() {
        return Some(FinishReason::Refusal);
    }
    Some(match response.finish_reason()? {
        rig::FinishReason::Stop => FinishReason::Stop,
        rig::FinishReason::Length => FinishReason::Length,
        rig::FinishReason::ToolCalls => FinishReason::ToolCalls,
        rig::FinishReason::ContentFilter => FinishReason::ContentFilter,
        rig::FinishReason::Other(reason) if reason == "refusal" => FinishReason::Refusal,
        rig::FinishReason::Other(reason) => FinishReason::Other(reason),
        // rig's list may grow: a reason it adds is passed on by name.
        other => FinishReason::Other(format!("{other:?}")),
    })
}

fn usage(usage: &rig::Usage) -> Usage {
    Usage::new(
        usage.input_tokens.unwrap_or(0),
        usage.output_tokens.unwrap_or(0),
    )
}
