//! The loops most agent code runs today, written the way they usually are: no recovery at
//! all, every tool error's text handed to the model, or every failure retried with a fixed
//! delay. A crash loses the run: it starts again from the user's request.

use std::collections::HashMap;
use std::time::Duration;

use agent_errors::stream::StreamAccumulator;
use agent_errors::{
    BoxError, ChatModel, ChatRequest, ChatResponse, Message, ToolCall, ToolDef, ToolResult,
};
use futures_util::StreamExt;
use futures_util::future::BoxFuture;

use super::{RunEnd, Strategy, TaskEnv, until_crash};

/// Model turns before a run is given up.
const MAX_TURNS: usize = 16;
/// Retries of the naive loop, after the first call.
const NAIVE_RETRIES: u32 = 3;
const NAIVE_DELAY: Duration = Duration::from_secs(1);

/// Which of the common loops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BaselineKind {
    /// The first error (tool or model) ends the run.
    NoRecovery,
    /// Every tool error's text goes back to the model; a model error ends the run.
    ErrorsToModel,
    /// Every failure, tool or model, is retried 3 times with a fixed delay; a tool failure
    /// that outlasts them goes to the model as text.
    NaiveRetry,
}

/// A hand-written agent loop of the given kind.
pub(crate) struct Baseline(pub(crate) BaselineKind);

impl Strategy for Baseline {
    fn name(&self) -> &'static str {
        match self.0 {
            BaselineKind::NoRecovery => "1 no recovery",
            BaselineKind::ErrorsToModel => "2 errors to model",
            BaselineKind::NaiveRetry => "3 naive retry",
        }
    }

    fn run<'a>(&'a self, env: &'a TaskEnv) -> BoxFuture<'a, RunEnd> {
        Box::pin(async move {
            loop {
                if let Some(end) = until_crash(&env.world, run_loop(self.0, env)).await {
                    return end;
                }
            }
        })
    }
}

async fn run_loop(kind: BaselineKind, env: &TaskEnv) -> RunEnd {
    let tools: HashMap<String, ToolDef> = env
        .tools
        .iter()
        .map(|t| (t.tool().name().to_owned(), t.tool()))
        .collect();
    let specs: Vec<_> = env.tools.iter().map(|t| t.tool().spec()).collect();
    let mut messages = vec![Message::user(env.task.prompt)];
    for _ in 0..MAX_TURNS {
        let request = ChatRequest::new(messages.clone(), specs.clone());
        let response = model_call(kind, &env.primary, &request)
            .await
            .map_err(|e| format!("model call failed: {e}"))?;
        if response.tool_calls.is_empty() {
            return Ok(response.text.unwrap_or_default());
        }
        messages.push(Message::assistant(
            response.text.clone(),
            response.tool_calls.clone(),
        ));
        for call in &response.tool_calls {
            let result = match tool_call(kind, tools.get(&*call.name), call).await {
                Ok(output) => ToolResult::ok(call, output),
                Err(error) if kind == BaselineKind::NoRecovery => {
                    return Err(format!("tool `{}` failed: {error}", call.name));
                }
                Err(error) => ToolResult::error(call, error.to_string()),
            };
            messages.push(Message::Tool(result));
        }
    }
    Err("turn cap reached".to_owned())
}

fn attempts(kind: BaselineKind) -> u32 {
    match kind {
        BaselineKind::NaiveRetry => 1 + NAIVE_RETRIES,
        _ => 1,
    }
}

/// One model call, streamed and collected; the naive loop retries any failure.
async fn model_call(
    kind: BaselineKind,
    model: &dyn ChatModel,
    request: &ChatRequest,
) -> Result<ChatResponse, BoxError> {
    let mut last = None;
    for attempt in 0..attempts(kind) {
        if attempt > 0 {
            tokio::time::sleep(NAIVE_DELAY).await;
        }
        match streamed(model, request).await {
            Ok(response) => return Ok(response),
            Err(error) => last = Some(error),
        }
    }
    Err(last.unwrap_or_else(|| "no attempt made".into()))
}

async fn streamed(model: &dyn ChatModel, request: &ChatRequest) -> Result<ChatResponse, BoxError> {
    let mut stream = model.chat_stream(request).await?;
    let mut collected = StreamAccumulator::new();
    while let Some(event) = stream.next().await {
        collected.push(&event?);
    }
    Ok(collected.into_response())
}

/// One tool call; the naive loop retries any failure, bad arguments included.
async fn tool_call(
    kind: BaselineKind,
    tool: Option<&ToolDef>,
    call: &ToolCall,
) -> Result<String, BoxError> {
    let Some(tool) = tool else {
        return Err(format!("unknown tool `{}`", call.name).into());
    };
    let mut last = None;
    for attempt in 0..attempts(kind) {
        if attempt > 0 {
            tokio::time::sleep(NAIVE_DELAY).await;
        }
        let outcome = match agent_errors::testing::handler_of(tool).call(&call.arguments) {
            Ok(running) => running.await,
            Err(error) => Err(error.into()),
        };
        match outcome {
            Ok(output) => return Ok(output),
            Err(error) => last = Some(error),
        }
    }
    Err(last.unwrap_or_else(|| "no attempt made".into()))
}
