//! A rig reply streamed as our [`StreamEvent`]s.
//!
//! Text goes out as it arrives. rig names a tool call's id only when the call ends, so a call is
//! sent whole at its end (started, its arguments, finished). Once rig's events run out, the
//! folded reply gives the finish reason and usage. A failure in the middle is the stream's last
//! item, rig's `ProviderError` unchanged: the agent turns it into an interrupted stream, which
//! `on_llm_error` sees with what had arrived.

use std::collections::VecDeque;

use futures_util::StreamExt;
use rig_core::completion::AssistantContent;
use rig_core::operation::Completion;
use rig_core::streaming::{Item, StreamEvent as RigEvent, Streamed};

use super::convert::from_rig;
use crate::error::BoxError;
use crate::stream::{ChatStream, StreamEvent};

/// What the stream still holds: rig's reply (until it ends), events ready to go out, and how
/// many tool calls went out so far.
struct State {
    reply: Option<Streamed<Completion>>,
    ready: VecDeque<StreamEvent>,
    calls: usize,
}

/// `reply` as our stream.
pub(crate) fn events(reply: Streamed<Completion>) -> ChatStream<'static> {
    let state = State {
        reply: Some(reply),
        ready: VecDeque::new(),
        calls: 0,
    };
    Box::pin(futures_util::stream::unfold(state, next))
}

async fn next(mut state: State) -> Option<(Result<StreamEvent, BoxError>, State)> {
    loop {
        if let Some(event) = state.ready.pop_front() {
            return Some((Ok(event), state));
        }
        let reply = state.reply.as_mut()?;
        match reply.next().await {
            Some(Ok(Item::Event(event))) => state.take(event),
            Some(Ok(_)) => {}
            Some(Err(error)) => {
                state.reply = None;
                return Some((Err(Box::new(error)), state));
            }
            None => {
                let reply = state.reply.take()?;
                match reply.finish().await {
                    Ok(response) => state.ready.extend(ending(&from_rig(&response))),
                    Err(error) => return Some((Err(Box::new(error)), state)),
                }
            }
        }
    }
}

impl State {
    /// Queues what `event` adds to the answer.
    fn take(&mut self, event: RigEvent) {
        match event {
            RigEvent::Text { text, .. } if !text.is_empty() => {
                self.ready.push_back(StreamEvent::TextDelta(text));
            }
            RigEvent::End {
                content: AssistantContent::ToolCall(call),
                ..
            } => {
                let index = self.calls;
                self.calls += 1;
                let arguments = match &call.function.invalid_arguments {
                    Some(raw) => raw.clone(),
                    None => serde_json::Value::Object(call.function.arguments.clone()).to_string(),
                };
                self.ready.extend([
                    StreamEvent::ToolCallStarted {
                        index,
                        id: call.id.wire().into_owned(),
                        name: call.function.name.as_str().to_owned(),
                    },
                    StreamEvent::ToolCallDelta { index, arguments },
                    StreamEvent::ToolCallFinished { index },
                ]);
            }
            _ => {}
        }
    }
}

/// The events that close an answer: its usage and why it stopped.
fn ending(answer: &crate::chat::ChatResponse) -> Vec<StreamEvent> {
    let mut events = Vec::with_capacity(2);
    events.extend(answer.usage.map(StreamEvent::Usage));
    events.extend(answer.finish_reason.clone().map(StreamEvent::Finish));
    events
}
