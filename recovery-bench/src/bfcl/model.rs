//! The scripted model: BFCL's ground-truth calls replayed turn by turn, one call per answer,
//! with one fixed rule for errors, the same for every strategy.
//!
//! **The rule.** It reads the results it was sent since the turn's user message. A result
//! that reports a failure (the library's error result, a JSON object with an `error` member as
//! BFCL's simulators answer, or BFCL's executor's `Error during execution`) makes it call the
//! same tool with the same arguments once more, as a new call; a second failure of that step
//! makes it move on to the next step. After the last step of the turn it answers `Done.`.
//! It never invents a call, so what it can finish is what the recovery layer gets through.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use agent_errors::{BoxError, ChatModel, ChatRequest, ChatResponse, Message, ToolCall};
use futures_util::future::BoxFuture;
use serde::Deserialize;
use serde_json::Value;

/// One ground-truth call, as the server parsed it from BFCL's answer file.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Call {
    pub(crate) name: String,
    pub(crate) arguments: Value,
}

/// The model of one task run.
#[derive(Clone)]
pub(crate) struct ReplayModel {
    /// Per turn, the user's request and the ground truth's calls.
    turns: Arc<Vec<(String, Vec<Call>)>>,
    turn: Arc<AtomicUsize>,
    calls: Arc<AtomicU64>,
}

impl ReplayModel {
    pub(crate) fn new(turns: Vec<(String, Vec<Call>)>) -> Self {
        ReplayModel {
            turns: Arc::new(turns),
            turn: Arc::default(),
            calls: Arc::default(),
        }
    }

    /// The user turn the next runs are for.
    pub(crate) fn set_turn(&self, turn: usize) {
        self.turn.store(turn, Ordering::Relaxed);
    }

    /// Model calls made.
    pub(crate) fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// The answer to `messages`, by the rule.
    pub(crate) fn answer(&self, messages: &[Message]) -> ChatResponse {
        let turn = self.turn.load(Ordering::Relaxed);
        let Some((question, calls)) = self.turns.get(turn) else {
            return ChatResponse::text("Done.");
        };
        let start = messages
            .iter()
            .rposition(|m| matches!(m, Message::User { content } if content == question))
            .map_or(0, |at| at + 1);
        let (step, again) = position(&messages[start..]);
        match calls.get(step) {
            Some(call) => ChatResponse::tool_calls(vec![ToolCall::new(
                format!("t{turn}s{step}r{}", u8::from(again)),
                call.name.clone(),
                call.arguments.to_string(),
            )]),
            None => ChatResponse::text("Done."),
        }
    }
}

/// The step the rule is at after `since` (the turn's messages after its user request), and
/// whether the call is the step's second.
fn position(since: &[Message]) -> (usize, bool) {
    let mut step = 0;
    let mut again = false;
    for message in since {
        let Message::Tool(result) = message else {
            continue;
        };
        if !again && failed(result.is_error, &result.content) {
            again = true;
        } else {
            step += 1;
            again = false;
        }
    }
    (step, again)
}

/// Whether a result reports a failure, read as a model reads it.
pub(crate) fn failed(is_error: bool, content: &str) -> bool {
    if is_error || content.starts_with("Error during execution") {
        return true;
    }
    serde_json::from_str::<Value>(content)
        .ok()
        .and_then(|v| v.as_object().map(|o| o.contains_key("error")))
        .unwrap_or(false)
}

impl ChatModel for ReplayModel {
    fn chat<'a>(
        &'a self,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChatResponse, BoxError>> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let answer = self.answer(&request.messages);
        Box::pin(async move { Ok(answer) })
    }

    fn name(&self) -> &str {
        "bfcl-replay"
    }
}

#[cfg(test)]
mod tests {
    use agent_errors::ToolResult;

    use super::*;

    fn model() -> ReplayModel {
        let call = |name: &str| Call {
            name: name.to_owned(),
            arguments: serde_json::json!({"x": 1}),
        };
        ReplayModel::new(vec![("do it".to_owned(), vec![call("a"), call("b")])])
    }

    fn called(response: &ChatResponse) -> (String, String) {
        let call = &response.tool_calls[0];
        (call.id.to_string(), call.name.to_string())
    }

    #[test]
    fn a_failed_step_is_called_once_more_then_left() {
        let model = model();
        let mut messages = vec![Message::user("do it")];
        let first = model.answer(&messages);
        assert_eq!(called(&first), ("t0s0r0".into(), "a".into()));
        let call = first.tool_calls[0].clone();
        messages.push(Message::assistant(None, vec![call.clone()]));
        messages.push(Message::Tool(ToolResult::ok(&call, r#"{"error": "busy"}"#)));
        let again = model.answer(&messages);
        assert_eq!(called(&again), ("t0s0r1".into(), "a".into()));
        let call = again.tool_calls[0].clone();
        messages.push(Message::assistant(None, vec![call.clone()]));
        messages.push(Message::Tool(ToolResult::error(&call, "HTTP 503")));
        let next = model.answer(&messages);
        assert_eq!(called(&next), ("t0s1r0".into(), "b".into()));
        let call = next.tool_calls[0].clone();
        messages.push(Message::assistant(None, vec![call.clone()]));
        messages.push(Message::Tool(ToolResult::ok(&call, r#"{"result": 2}"#)));
        assert_eq!(model.answer(&messages).text.as_deref(), Some("Done."));
    }

    #[test]
    fn outputs_that_only_mention_an_error_are_results() {
        assert!(!failed(false, r#"{"content": "error log: none"}"#));
        assert!(!failed(false, "no error here"));
        assert!(failed(false, "Error during execution: bad"));
        assert!(failed(true, "ok"));
    }
}
