//! The Messages API stream: `message_start`, then per content block `content_block_start`,
//! `content_block_delta`s and `content_block_stop`, then `message_delta` (the stop reason and
//! the output tokens) and `message_stop`; `ping` at any time, and `error` when the server fails
//! mid-stream.

use std::collections::HashMap;

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
    /// The content blocks that are tool calls, by index (a map: a hostile stream may start
    /// hundreds of thousands of them).
    tool_blocks: HashMap<usize, ToolBlock>,
    done: bool,
}

/// A content block that is a tool call.
struct ToolBlock {
    /// The `input` its `content_block_start` carried, when that was not `{}`: Anthropic always
    /// starts with `{}` and streams the input as `input_json_delta`s, but a compatible server may
    /// send the whole input here and no deltas. Used only if no delta comes, as Anthropic's SDKs
    /// do.
    start_input: Option<String>,
    has_delta: bool,
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
                Ok(self.block_stop(index))
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
                let start_input = block
                    .get("input")
                    .filter(|input| input.as_object().is_some_and(|o| !o.is_empty()))
                    .map(Value::to_string);
                let block = ToolBlock {
                    start_input,
                    has_delta: false,
                };
                self.tool_blocks.insert(index, block);
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
            Some("input_json_delta") if self.tool_blocks.contains_key(&index) => {
                let arguments = field("partial_json");
                if let (Some(block), Some(_)) = (self.tool_blocks.get_mut(&index), &arguments) {
                    block.has_delta = true;
                }
                arguments
                    .map(|arguments| StreamEvent::ToolCallDelta { index, arguments })
                    .into_iter()
                    .collect()
            }
            Some("input_json_delta") => {
                return Err(malformed(
                    "arguments for a block that is not a tool call",
                    event,
                ));
            }
            _ => Vec::new(),
        })
    }

    /// The end of a block: a tool call's arguments are complete (its start's input, when no
    /// delta came).
    fn block_stop(&mut self, index: usize) -> Vec<StreamEvent> {
        let Some(block) = self.tool_blocks.get_mut(&index) else {
            return Vec::new();
        };
        let start_input = if block.has_delta {
            None
        } else {
            block.start_input.take()
        };
        start_input
            .map(|arguments| StreamEvent::ToolCallDelta { index, arguments })
            .into_iter()
            .chain([StreamEvent::ToolCallFinished { index }])
            .collect()
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
            // Counts here are cumulative: each one given replaces what message_start said, and
            // one left out or null keeps it (as Anthropic's SDKs read them).
            let usage = &mut self.usage;
            usage.output_tokens = update.output_tokens.or(usage.output_tokens);
            usage.input_tokens = update.input_tokens.or(usage.input_tokens);
            usage.cache_creation_input_tokens = update
                .cache_creation_input_tokens
                .or(usage.cache_creation_input_tokens);
            usage.cache_read_input_tokens = update
                .cache_read_input_tokens
                .or(usage.cache_read_input_tokens);
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
    use crate::chat::FinishReason;
    use crate::stream::guard::Decoder as _;
    use crate::usage::Usage;

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

    fn tool_start(d: &mut Decoder, index: usize, input: Value) -> Vec<StreamEvent> {
        let start = serde_json::json!({"type": "content_block_start", "index": index,
            "content_block": {"type": "tool_use", "id": "t1", "name": "f", "input": input}});
        feed(d, "content_block_start", start).unwrap()
    }

    fn block_stop(d: &mut Decoder, index: usize) -> Vec<StreamEvent> {
        let stop = serde_json::json!({"type": "content_block_stop", "index": index});
        feed(d, "content_block_stop", stop).unwrap()
    }

    fn json_delta(d: &mut Decoder, index: usize, partial: &str) -> Vec<StreamEvent> {
        let delta = serde_json::json!({"type": "content_block_delta", "index": index,
            "delta": {"type": "input_json_delta", "partial_json": partial}});
        feed(d, "content_block_delta", delta).unwrap()
    }

    #[test]
    fn a_tool_input_sent_whole_at_the_start_is_used_when_no_delta_follows() {
        let mut d = Decoder::default();
        tool_start(&mut d, 1, serde_json::json!({"a": 1}));
        assert_eq!(
            block_stop(&mut d, 1),
            [
                StreamEvent::ToolCallDelta {
                    index: 1,
                    arguments: r#"{"a":1}"#.into()
                },
                StreamEvent::ToolCallFinished { index: 1 }
            ]
        );
        // Deltas, when they come, are the input: the start's is not added to them.
        tool_start(&mut d, 2, serde_json::json!({"a": 1}));
        json_delta(&mut d, 2, "");
        json_delta(&mut d, 2, r#"{"b": 2}"#);
        assert_eq!(
            block_stop(&mut d, 2),
            [StreamEvent::ToolCallFinished { index: 2 }]
        );
        // Anthropic's own `{}` start adds nothing: the accumulator makes empty arguments `{}`.
        tool_start(&mut d, 3, serde_json::json!({}));
        assert_eq!(
            block_stop(&mut d, 3),
            [StreamEvent::ToolCallFinished { index: 3 }]
        );
    }

    #[test]
    fn interleaved_tool_blocks_keep_their_own_index_and_unknown_ones_are_malformed() {
        let mut d = Decoder::default();
        tool_start(&mut d, 1, serde_json::json!({}));
        tool_start(&mut d, 2, serde_json::json!({}));
        assert_eq!(
            [
                json_delta(&mut d, 2, r#"{"x""#),
                json_delta(&mut d, 1, r#"{"a""#),
                json_delta(&mut d, 2, ":2}"),
            ]
            .concat(),
            [
                StreamEvent::ToolCallDelta {
                    index: 2,
                    arguments: r#"{"x""#.into()
                },
                StreamEvent::ToolCallDelta {
                    index: 1,
                    arguments: r#"{"a""#.into()
                },
                StreamEvent::ToolCallDelta {
                    index: 2,
                    arguments: ":2}".into()
                },
            ]
        );
        let stray = serde_json::json!({"type": "content_block_delta", "index": 7,
            "delta": {"type": "input_json_delta", "partial_json": "{}"}});
        assert!(matches!(
            feed(&mut d, "content_block_delta", stray)
                .unwrap_err()
                .downcast_ref(),
            Some(StreamError::Malformed { .. })
        ));
        assert!(block_stop(&mut d, 7).is_empty());
    }

    #[test]
    fn usage_counts_left_out_of_the_delta_keep_what_the_start_said() {
        let mut d = Decoder::default();
        let start = serde_json::json!({"type": "message_start", "message": {"usage": {
            "input_tokens": 20, "cache_read_input_tokens": 5, "output_tokens": 1}}});
        feed(&mut d, "message_start", start).unwrap();
        let delta = serde_json::json!({"type": "message_delta", "delta": {},
            "usage": {"input_tokens": 21, "cache_read_input_tokens": null, "output_tokens": 9}});
        assert_eq!(
            feed(&mut d, "message_delta", delta).unwrap(),
            [StreamEvent::Usage(Usage::new(26, 9))]
        );
    }

    #[test]
    fn a_hostile_usage_value_leaves_a_short_clean_reason() {
        let mut d = Decoder::default();
        let hostile = format!("\x1b[31m{}", "x".repeat(100_000));
        let delta =
            serde_json::json!({"type": "message_delta", "usage": {"output_tokens": hostile}});
        let error = feed(&mut d, "message_delta", delta).unwrap_err();
        match error.downcast_ref::<StreamError>() {
            Some(StreamError::Malformed { reason, data }) => {
                assert!(reason.starts_with("bad usage"), "{reason}");
                assert!(reason.chars().count() <= 300 && !reason.contains('\x1b'));
                assert!(data.chars().count() <= 1024);
            }
            other => panic!("expected a malformed event, got {other:?}"),
        }
    }

    proptest::proptest! {
        /// Whatever a server sends, decoding returns events or an error, never a panic; and a
        /// content block's events all carry the index the server gave.
        #[test]
        fn no_event_makes_the_decoder_panic(
            events in proptest::collection::vec(
                (
                    proptest::sample::select(vec![
                        "message_start", "content_block_start", "content_block_delta",
                        "content_block_stop", "message_delta", "message_stop", "error", "ping",
                    ]),
                    any_event(),
                ),
                0..12,
            )
        ) {
            let mut d = Decoder::default();
            for (name, data) in events {
                let _ = d.decode(SseEvent { event: Some(name.to_owned()), data });
            }
        }
    }

    /// A JSON value of any shape a field might hold.
    fn any_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        prop_oneof![
            Just(Value::Null),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            ".{0,8}".prop_map(Value::from),
            Just(serde_json::json!({})),
            Just(serde_json::json!({"a": 1})),
            Just(serde_json::json!([1])),
        ]
    }

    /// Event data: JSON shaped like the Messages API's with hostile values, or any text.
    fn any_event() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let kind = proptest::sample::select(vec![
            "text",
            "tool_use",
            "text_delta",
            "input_json_delta",
            "thinking",
            "error",
            "overloaded_error",
        ]);
        let index = prop_oneof![(0u64..3).prop_map(Value::from), any_value()];
        let values = (any_value(), any_value(), any_value());
        let shaped = (kind, index, values).prop_map(|(kind, index, (a, b, c))| {
            serde_json::json!({
                "type": kind, "index": index,
                "content_block": {"type": kind, "id": b, "name": c, "input": b},
                "delta": {"type": kind, "text": b, "partial_json": c, "stop_reason": a},
                "usage": {"input_tokens": a, "output_tokens": c, "cache_read_input_tokens": b},
                "message": {"usage": {"input_tokens": b}},
                "error": {"type": b, "message": c, "code": a},
            })
            .to_string()
        });
        prop_oneof![shaped, ".{0,40}"]
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
