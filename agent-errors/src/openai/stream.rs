//! The chat-completions stream: `data: {chunk}` events ending with `data: [DONE]`.

use std::collections::HashSet;

use serde::Deserialize;

use super::wire::{WireUsage, finish_reason};
use crate::chat::FinishReason;
use crate::error::BoxError;
use crate::stream::guard::{self, SseEvent};
use crate::stream::{StreamError, StreamEvent};
use crate::usage::Usage;

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Vec<ChunkChoice>,
    #[serde(default)]
    usage: Option<WireUsage>,
    /// Some servers report a failure mid-stream as a chunk holding an `error` object.
    #[serde(default)]
    error: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct ChunkChoice {
    #[serde(default)]
    delta: Delta,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize, Default)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    refusal: Option<String>,
    #[serde(default)]
    tool_calls: Vec<ToolCallDelta>,
}

#[derive(Deserialize)]
struct ToolCallDelta {
    #[serde(default)]
    index: usize,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FunctionDelta>,
}

#[derive(Deserialize)]
struct FunctionDelta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

/// Reads chunks into events; a tool call is finished when the answer finishes.
#[derive(Default)]
pub(crate) struct Decoder {
    /// Every call index seen, to tell a call's first chunk from the rest in O(1): a hostile
    /// stream may start hundreds of thousands of calls.
    seen: HashSet<usize>,
    /// The calls started and not yet finished, in the order they started.
    open: Vec<usize>,
    refused: bool,
    done: bool,
}

impl guard::Decoder for Decoder {
    fn decode(&mut self, event: SseEvent) -> Result<Vec<StreamEvent>, BoxError> {
        if event.data.trim() == "[DONE]" {
            self.done = true;
            return Ok(Vec::new());
        }
        let chunk: Chunk = serde_json::from_str(&event.data).map_err(|e| {
            StreamError::malformed(format!("not a completion chunk: {e}"), &event.data)
        })?;
        if let Some(error) = chunk.error {
            return Err(Box::new(guard::error_event(&error)));
        }
        let mut events = Vec::new();
        for choice in chunk.choices.into_iter().take(1) {
            self.read_delta(choice.delta, &mut events);
            if let Some(reason) = choice.finish_reason {
                // Each call is finished once: a server that repeats the finish reason on every
                // chunk must not cost a pass over every call per chunk.
                events.extend(
                    self.open
                        .drain(..)
                        .map(|index| StreamEvent::ToolCallFinished { index }),
                );
                let reason = if self.refused {
                    FinishReason::Refusal
                } else {
                    finish_reason(&reason)
                };
                events.push(StreamEvent::Finish(reason));
            }
        }
        events.extend(chunk.usage.map(|u| StreamEvent::Usage(Usage::from(u))));
        Ok(events)
    }

    fn is_done(&self) -> bool {
        self.done
    }
}

impl Decoder {
    fn read_delta(&mut self, delta: Delta, events: &mut Vec<StreamEvent>) {
        for text in [
            delta.content,
            delta.refusal.inspect(|_| self.refused = true),
        ]
        .into_iter()
        .flatten()
        .filter(|t| !t.is_empty())
        {
            events.push(StreamEvent::TextDelta(text));
        }
        for call in delta.tool_calls {
            let index = call.index;
            let (name, arguments) = call
                .function
                .map(|f| (f.name, f.arguments))
                .unwrap_or_default();
            if self.seen.insert(index) {
                self.open.push(index);
                events.push(StreamEvent::ToolCallStarted {
                    index,
                    id: call.id.unwrap_or_default(),
                    name: name.unwrap_or_default(),
                });
            }
            if let Some(arguments) = arguments.filter(|a| !a.is_empty()) {
                events.push(StreamEvent::ToolCallDelta { index, arguments });
            }
        }
    }
}
