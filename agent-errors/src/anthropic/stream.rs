//! The Messages API stream: `message_start`, then per content block `content_block_start`,
//! `content_block_delta`s and `content_block_stop`, then `message_delta` (the stop reason and
//! the output tokens) and `message_stop`; `ping` at any time, and `error` when the server fails
//! mid-stream.

use serde_json::Value;

use super::wire::{WireUsage, finish_reason};
use crate::error::BoxError;
use crate::stream::guard::{self, SseEvent};
use crate::stream::{StreamError, StreamEvent};

/// Reads SSE events into stream events. `message_start` yields nothing (its usage is kept for
/// the end), so a failure before the first content is a failed start the provider retries, not
/// an interruption of output.
#[derive(Default)]
pub(crate) struct Decoder {
    /// The usage `message_start` reported, completed by `message_delta`.
    usage: WireUsage,
    /// The content blocks that are tool calls, by index.
    tool_blocks: Vec<usize>,
    done: bool,
}

fn malformed(reason: &str, event: &SseEvent) -> BoxError {
    Box::new(StreamError::malformed(reason, &event.data))
}

impl guard::Decoder for Decoder {
    fn decode(&mut self, event: SseEvent) -> Result<Vec<StreamEvent>, BoxError> {
        let data: Value = match serde_json::from_str(&event.data) {
            Ok(data) => data,
            // A server's failure is still a failure when its text is not JSON: a 500.
            Err(_) if event.event.as_deref() == Some("error") => {
                let error = serde_json::json!({ "message": event.data });
                return Err(Box::new(guard::error_event(&error)));
            }
            Err(e) => return Err(malformed(&format!("not a Messages API event: {e}"), &event)),
        };
        // The data's own `type` names the event; the SSE `event:` line is the fallback.
        let kind = data
            .get("type")
            .and_then(Value::as_str)
            .or(event.event.as_deref())
            .unwrap_or_default();
        match kind {
            "message_start" => {
                if let Some(usage) = data.pointer("/message/usage") {
                    self.usage = serde_json::from_value(usage.clone())
                        .map_err(|e| malformed(&format!("bad usage: {e}"), &event))?;
                }
                Ok(Vec::new())
            }
            "content_block_start" => self.block_start(&data, &event),
            "content_block_delta" => self.block_delta(&data, &event),
            "content_block_stop" => {
                let index = block_index(&data, &event)?;
                Ok(if self.tool_blocks.contains(&index) {
                    vec![StreamEvent::ToolCallFinished { index }]
                } else {
                    Vec::new()
                })
            }
            "message_delta" => self.message_delta(&data, &event),
            "message_stop" => {
                self.done = true;
                Ok(Vec::new())
            }
            "error" => {
                let error = data.get("error").unwrap_or(&data);
                Err(Box::new(guard::error_event(error)))
            }
            // `ping`, and event types added after this was written, carry nothing to read.
            _ => Ok(Vec::new()),
        }
    }

    fn is_done(&self) -> bool {
        self.done
    }
}

fn block_index(data: &Value, event: &SseEvent) -> Result<usize, BoxError> {
    data.get("index")
        .and_then(Value::as_u64)
        .and_then(|i| usize::try_from(i).ok())
        .ok_or_else(|| malformed("a content block event without an index", event))
}

impl Decoder {
    fn block_start(
        &mut self,
        data: &Value,
        event: &SseEvent,
    ) -> Result<Vec<StreamEvent>, BoxError> {
        let index = block_index(data, event)?;
        let block = data
            .get("content_block")
            .ok_or_else(|| malformed("content_block_start without a block", event))?;
        let text = |key: &str| {
            block
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        match block.get("type").and_then(Value::as_str) {
            Some("text") => {
                let text = text("text");
                Ok(if text.is_empty() {
                    Vec::new()
                } else {
                    vec![StreamEvent::TextDelta(text)]
                })
            }
            Some("tool_use") => {
                self.tool_blocks.push(index);
                Ok(vec![StreamEvent::ToolCallStarted {
                    index,
                    id: text("id"),
                    name: text("name"),
                }])
            }
            // Thinking and server-side blocks are not part of the answer this crate models.
            _ => Ok(Vec::new()),
        }
    }

    fn block_delta(
        &mut self,
        data: &Value,
        event: &SseEvent,
    ) -> Result<Vec<StreamEvent>, BoxError> {
        let index = block_index(data, event)?;
        let delta = data
            .get("delta")
            .ok_or_else(|| malformed("content_block_delta without a delta", event))?;
        let field = |key: &str| {
            delta
                .get(key)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        Ok(match delta.get("type").and_then(Value::as_str) {
            Some("text_delta") => field("text")
                .map(StreamEvent::TextDelta)
                .into_iter()
                .collect(),
            Some("input_json_delta") if self.tool_blocks.contains(&index) => field("partial_json")
                .map(|arguments| StreamEvent::ToolCallDelta { index, arguments })
                .into_iter()
                .collect(),
            Some("input_json_delta") => {
                return Err(malformed(
                    "arguments for a block that is not a tool call",
                    event,
                ));
            }
            _ => Vec::new(),
        })
    }

    fn message_delta(
        &mut self,
        data: &Value,
        event: &SseEvent,
    ) -> Result<Vec<StreamEvent>, BoxError> {
        let mut events = Vec::new();
        if let Some(usage) = data.get("usage") {
            let update: WireUsage = serde_json::from_value(usage.clone())
                .map_err(|e| malformed(&format!("bad usage: {e}"), event))?;
            // Counts here are cumulative: they replace what message_start said.
            self.usage.output_tokens = update.output_tokens.or(self.usage.output_tokens);
            if update.input().is_some() {
                self.usage.input_tokens = update.input_tokens;
                self.usage.cache_creation_input_tokens = update.cache_creation_input_tokens;
                self.usage.cache_read_input_tokens = update.cache_read_input_tokens;
            }
            events.push(StreamEvent::Usage(self.usage.usage()));
        }
        if let Some(reason) = data.pointer("/delta/stop_reason").and_then(Value::as_str) {
            events.push(StreamEvent::Finish(finish_reason(reason)));
        }
        Ok(events)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::{FinishReason, Usage};
    use crate::stream::guard::Decoder as _;

    fn feed(decoder: &mut Decoder, name: &str, data: Value) -> Result<Vec<StreamEvent>, BoxError> {
        decoder.decode(SseEvent {
            event: Some(name.to_owned()),
            data: data.to_string(),
        })
    }

    #[test]
    fn an_error_event_whose_text_is_not_json_is_a_server_error() {
        let mut d = Decoder::default();
        let error = d
            .decode(SseEvent {
                event: Some("error".into()),
                data: "upstream exploded".into(),
            })
            .unwrap_err();
        match error.downcast_ref::<StreamError>() {
            Some(StreamError::ErrorEvent { http, .. }) => {
                assert_eq!((http.status(), http.message()), (500, "upstream exploded"));
            }
            other => panic!("expected an error event, got {other:?}"),
        }
        let not_json = SseEvent {
            event: Some("content_block_delta".into()),
            data: "{oops".into(),
        };
        assert!(matches!(
            d.decode(not_json).unwrap_err().downcast_ref(),
            Some(StreamError::Malformed { .. })
        ));
    }

    #[test]
    fn usage_from_start_is_completed_by_the_delta() {
        let mut d = Decoder::default();
        let start = serde_json::json!({"type": "message_start", "message": {"usage": {
            "input_tokens": 20, "cache_read_input_tokens": 5, "output_tokens": 1}}});
        assert!(feed(&mut d, "message_start", start).unwrap().is_empty());
        assert_eq!(d.usage.usage(), Usage::new(25, 1));
        let delta = serde_json::json!({"type": "message_delta",
            "delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": 9}});
        assert_eq!(
            feed(&mut d, "message_delta", delta).unwrap(),
            [
                StreamEvent::Usage(Usage::new(25, 9)),
                StreamEvent::Finish(FinishReason::Length)
            ]
        );
    }
}
