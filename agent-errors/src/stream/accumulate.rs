//! Building the final answer from a stream's events.

use std::collections::HashMap;
use std::sync::Arc;

use super::{StreamEvent, StreamInterrupted};
use crate::chat::{ChatResponse, FinishReason, ToolCall};
use crate::error::BoxError;
use crate::usage::Usage;

/// Collects a stream's events into the final [`ChatResponse`]: text deltas concatenated, each
/// tool call's argument fragments appended in order, the last usage and finish reason kept.
///
/// # Examples
///
/// ```
/// use agent_errors::stream::{StreamAccumulator, StreamEvent};
///
/// let mut acc = StreamAccumulator::new();
/// acc.push(&StreamEvent::ToolCallStarted { index: 0, id: "c1".into(), name: "add".into() });
/// acc.push(&StreamEvent::ToolCallDelta { index: 0, arguments: r#"{"a":"#.into() });
/// acc.push(&StreamEvent::ToolCallDelta { index: 0, arguments: "1}".into() });
/// let response = acc.into_response();
/// assert_eq!(response.tool_calls[0].arguments, r#"{"a":1}"#);
/// ```
#[derive(Debug, Clone, Default)]
pub struct StreamAccumulator {
    text: String,
    calls: Vec<(usize, ToolCall)>,
    /// Where each call index sits in `calls`: a lookup per event must not cost a scan when a
    /// hostile stream starts a great many calls.
    positions: HashMap<usize, usize>,
    usage: Option<Usage>,
    finish_reason: Option<FinishReason>,
    events: u64,
}

impl StreamAccumulator {
    /// An empty accumulator.
    pub fn new() -> Self {
        StreamAccumulator::default()
    }

    /// Adds one event. A delta for a call that never started starts it with an empty id and name.
    pub fn push(&mut self, event: &StreamEvent) {
        self.events += 1;
        match event {
            StreamEvent::TextDelta(text) => self.text.push_str(text),
            StreamEvent::ToolCallStarted { index, id, name } => {
                let call = self.call(*index);
                if !id.is_empty() {
                    call.id = Arc::from(id.as_str());
                }
                // A name comes whole in one event, or in pieces to be joined.
                if call.name.is_empty() {
                    call.name = Arc::from(name.as_str());
                } else if !name.is_empty() {
                    call.name = Arc::from(format!("{}{name}", call.name));
                }
            }
            StreamEvent::ToolCallDelta { index, arguments } => {
                self.call(*index).arguments.push_str(arguments);
            }
            StreamEvent::ToolCallFinished { .. } => {}
            StreamEvent::Usage(usage) => self.usage = Some(*usage),
            StreamEvent::Finish(reason) => self.finish_reason = Some(reason.clone()),
        }
    }

    fn call(&mut self, index: usize) -> &mut ToolCall {
        let calls = &mut self.calls;
        let at = *self.positions.entry(index).or_insert_with(|| {
            calls.push((index, ToolCall::new("", "", "")));
            calls.len() - 1
        });
        &mut calls[at].1
    }

    /// Whether any event arrived: after that, a failure is an interruption, not a failed start.
    pub fn has_output(&self) -> bool {
        self.events > 0
    }

    /// The text so far.
    pub fn partial_text(&self) -> &str {
        &self.text
    }

    /// The tool calls so far, arguments possibly incomplete.
    pub fn partial_tool_calls(&self) -> Vec<ToolCall> {
        self.calls.iter().map(|(_, call)| call.clone()).collect()
    }

    /// The usage reported so far.
    pub fn usage(&self) -> Option<Usage> {
        self.usage
    }

    /// The stream broke after output began: what it had said, and why it broke.
    pub fn interrupted(self, cause: BoxError) -> StreamInterrupted {
        StreamInterrupted {
            partial_tool_calls: self.partial_tool_calls(),
            partial_text: self.text,
            usage: self.usage,
            cause,
        }
    }

    /// The final answer. Calls without an id get `call_{index}`; empty arguments become `{}`.
    pub fn into_response(self) -> ChatResponse {
        let tool_calls = self
            .calls
            .into_iter()
            .map(|(index, mut call)| {
                if call.id.is_empty() {
                    call.id = Arc::from(format!("call_{index}"));
                }
                if call.arguments.trim().is_empty() {
                    call.arguments = "{}".to_owned();
                }
                call
            })
            .collect();
        let mut response = ChatResponse::tool_calls(tool_calls);
        response.text = Some(self.text).filter(|t| !t.is_empty());
        response.usage = self.usage;
        response.finish_reason = self.finish_reason;
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleaved_calls_keep_their_first_seen_order_and_their_own_fragments() {
        let mut acc = StreamAccumulator::new();
        let delta = |index, arguments: &str| StreamEvent::ToolCallDelta {
            index,
            arguments: arguments.into(),
        };
        for (index, name) in [(5, "a"), (2, "b")] {
            acc.push(&StreamEvent::ToolCallStarted {
                index,
                id: String::new(),
                name: name.into(),
            });
        }
        for event in [
            delta(2, "{\"y\""),
            delta(9, "{}"),
            delta(5, "{}"),
            delta(2, ":1}"),
        ] {
            acc.push(&event);
        }
        let calls: Vec<(String, String, String)> = acc
            .into_response()
            .tool_calls
            .into_iter()
            .map(|c| (c.id.to_string(), c.name.to_string(), c.arguments))
            .collect();
        let call = |id: &str, name: &str, args: &str| (id.into(), name.into(), args.into());
        assert_eq!(
            calls,
            [
                call("call_5", "a", "{}"),
                call("call_2", "b", "{\"y\":1}"),
                call("call_9", "", "{}"),
            ]
        );
    }
}
