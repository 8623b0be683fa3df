//! The reacting model as a rig model: a transport on rig's scripted wire (`MockScript`) that
//! receives rig's whole request each turn, turns its history into our `ChatRequest`, asks the
//! benchmark's reacting model and answers with the turn it chose, or fails the call with the
//! provider error it injected. Faults land at the same places as for every other strategy (the
//! transcript's length), and calls and tokens are counted by the same model.

use agent_errors::llm::ToolSpec;
use agent_errors::stream::StreamAccumulator;
use agent_errors::{
    BoxError, ChatModel, ChatRequest, ChatResponse, HttpError, Message, ToolCall, ToolResult,
};
use futures_util::StreamExt;
use http::{HeaderMap, HeaderValue, StatusCode};
use rig_core::ProviderResponseError;
use rig_core::completion::{AssistantContent, CompletionRequest, CompletionResponse, Usage};
use rig_core::driver::{Exchange, Model, Opened, Opening, Transport};
use rig_core::error::ProviderError;
use rig_core::message::{
    self as rig_message, Origin, ToolFunction, ToolName, ToolResultContent, UserContent,
};
use rig_core::test_utils::{MOCK_API, MockFrame, MockScript};

use crate::model::ReactingModel;

/// The reacting model behind rig's scripted wire.
#[derive(Clone)]
pub(crate) struct ReactingTransport {
    model: ReactingModel,
}

/// `model` as a rig completion model, named as it is.
pub(crate) fn rig_model(model: ReactingModel) -> Model<MockScript, ReactingTransport> {
    let wire = MockScript::new(model.name().to_owned());
    Model::new(wire, ReactingTransport { model })
}

impl Transport<MockScript> for ReactingTransport {
    fn send(&self, request: CompletionRequest, _exchange: Exchange) -> Opening<MockFrame> {
        let model = self.model.clone();
        Opening::new(async move {
            let ours = chat_request(&request);
            let answer = whole_answer(&model, &ours).await?;
            let response = completion_response(&answer, model.name())?;
            Ok(Opened::new(futures_util::stream::iter([Ok(
                MockFrame::Response(Box::new(response)),
            )])))
        })
    }
}

/// The model's answer, asked as a stream (so a cut lands where it lands for every strategy)
/// and collected: rig gets it whole. A cut answer is a reply cut short, as rig's HTTP
/// transports report a connection closed mid-body.
async fn whole_answer(
    model: &ReactingModel,
    request: &ChatRequest,
) -> Result<ChatResponse, ProviderError> {
    let mut stream = model.chat_stream(request).await.map_err(provider_error)?;
    let mut collected = StreamAccumulator::new();
    while let Some(event) = stream.next().await {
        let event = event.map_err(|_| ProviderError::Truncated)?;
        collected.push(&event);
    }
    Ok(collected.into_response())
}

/// An injected model failure as rig's provider error: its status and `Retry-After`, as rig's
/// HTTP transport preserves them.
fn provider_error(error: BoxError) -> ProviderError {
    let Some(http) = error.downcast_ref::<HttpError>() else {
        return ProviderError::Provider(error.to_string());
    };
    let status = StatusCode::from_u16(http.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut headers = HeaderMap::new();
    if let Some(value) = http
        .header("retry-after")
        .and_then(|v| HeaderValue::from_str(v).ok())
    {
        headers.insert(http::header::RETRY_AFTER, value);
    }
    ProviderError::ProviderResponse(
        ProviderResponseError::new(status, http.message()).with_headers(Some(headers)),
    )
}

/// rig's request as ours: every message of its history, each tool result its own message (as
/// our loops send them, so a transcript's length is the same place for every strategy), and
/// anything else rig sends as its JSON text, so that nothing it shows the model escapes the
/// secret scan.
pub(crate) fn chat_request(request: &CompletionRequest) -> ChatRequest {
    let mut messages = Vec::with_capacity(request.chat_history.len());
    for message in &request.chat_history {
        match message {
            rig_message::Message::System { content } => messages.push(Message::system(content)),
            rig_message::Message::User { content } => {
                messages.extend(content.iter().map(user_part));
            }
            rig_message::Message::Assistant(turn) => {
                let mut text: Option<String> = None;
                let mut calls = Vec::new();
                for block in &turn.content {
                    match block {
                        AssistantContent::Text(part) => {
                            text.get_or_insert_with(String::new).push_str(&part.text);
                        }
                        AssistantContent::ToolCall(call) => calls.push(tool_call(call)),
                        other => text
                            .get_or_insert_with(String::new)
                            .push_str(&json_text(other)),
                    }
                }
                messages.push(Message::assistant(text, calls));
            }
        }
    }
    let tools: Vec<ToolSpec> = request
        .tools
        .iter()
        .map(|t| ToolSpec {
            name: t.name.as_str().to_owned(),
            description: t.description.clone(),
            parameters: t.parameters.clone(),
        })
        .collect();
    ChatRequest::new(messages, tools)
}

fn user_part(part: &UserContent) -> Message {
    match part {
        UserContent::Text(text) => Message::user(text.text.clone()),
        UserContent::ToolResult(result) => Message::Tool(ToolResult {
            call_id: result.call.wire().as_ref().into(),
            name: result.name.as_str().into(),
            content: result
                .content
                .iter()
                .map(|c| match c {
                    ToolResultContent::Text(text) => text.text.clone(),
                    other => json_text(other),
                })
                .collect::<Vec<_>>()
                .join("\n"),
            is_error: result.is_error,
        }),
        other => Message::user(json_text(other)),
    }
}

fn tool_call(call: &rig_message::ToolCall) -> ToolCall {
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

fn json_text(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// Our answer as rig's: its text, its tool calls with their arguments as the model wrote them
/// (arguments that are not a JSON object are kept for rig to refuse, as a provider's wire
/// does), and its usage.
// The error type is rig's, as every transport's is.
#[allow(clippy::result_large_err)]
fn completion_response(
    answer: &ChatResponse,
    provider: &str,
) -> Result<CompletionResponse, ProviderError> {
    let mut choice = Vec::with_capacity(1 + answer.tool_calls.len());
    choice.extend(answer.text.clone().map(AssistantContent::text));
    for call in &answer.tool_calls {
        let name = ToolName::new(call.name.to_string())
            .map_err(|e| ProviderError::Provider(e.to_string()))?;
        choice.push(AssistantContent::ToolCall(
            rig_message::ToolCall::from_wire(
                call.id.to_string(),
                ToolFunction::parse(name, &call.arguments),
            ),
        ));
    }
    let mut usage = Usage::new();
    if let Some(reported) = &answer.usage {
        usage = usage
            .input_tokens(reported.input_tokens)
            .output_tokens(reported.output_tokens);
    }
    Ok(CompletionResponse::new(
        choice,
        usage,
        Origin::new(MOCK_API, provider, ""),
        serde_json::Value::Null,
    ))
}
