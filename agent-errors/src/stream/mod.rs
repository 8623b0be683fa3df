//! Streamed answers: the events a [`ChatModel::chat_stream`](crate::ChatModel::chat_stream)
//! yields, the accumulator that turns them into the final [`ChatResponse`], and the typed
//! failures of a stream.
//!
//! A stream that fails before its first event is a failed call like any other (providers retry
//! it as a transport failure). One that fails after output began is never returned as a
//! complete answer: the agent turns it into [`StreamInterrupted`], carrying the partial text and
//! tool calls, which `on_llm_error` sees.

mod accumulate;
mod error;
#[cfg(feature = "_provider")]
pub(crate) mod guard;

use std::pin::Pin;

use futures_util::Stream;

pub use accumulate::StreamAccumulator;
pub use error::{StreamError, StreamInterrupted};

use crate::chat::{ChatResponse, FinishReason};
use crate::error::BoxError;
use crate::usage::Usage;

/// A streamed answer: events until the model is done, or an error. Ends after the first error.
pub type ChatStream<'a> = Pin<Box<dyn Stream<Item = Result<StreamEvent, BoxError>> + Send + 'a>>;

/// One piece of a streamed answer.
///
/// # Examples
///
/// A streaming [`ChatModel`](crate::ChatModel) of your own yields these; a consumer matches them:
///
/// ```
/// use agent_errors::stream::StreamEvent;
///
/// let events = [
///     StreamEvent::TextDelta("Checking ".into()),
///     StreamEvent::ToolCallStarted { index: 0, id: "c1".into(), name: "weather".into() },
///     StreamEvent::ToolCallDelta { index: 0, arguments: r#"{"city":"Oslo"}"#.into() },
///     StreamEvent::ToolCallFinished { index: 0 },
/// ];
/// let mut text = String::new();
/// let mut calls = Vec::new();
/// for event in events {
///     match event {
///         StreamEvent::TextDelta(delta) => text.push_str(&delta),
///         StreamEvent::ToolCallStarted { name, .. } => calls.push(name),
///         StreamEvent::ToolCallDelta { .. } | StreamEvent::ToolCallFinished { .. } => {}
///         StreamEvent::Usage(_) | StreamEvent::Finish(_) => {}
///         _ => {} // the enum is non-exhaustive
///     }
/// }
/// assert_eq!((text.as_str(), calls), ("Checking ", vec!["weather".to_owned()]));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StreamEvent {
    /// More of the answer's text.
    TextDelta(String),
    /// A tool call began. `index` tells this answer's calls apart; later events refer to it.
    ToolCallStarted {
        /// The call's place among this answer's calls.
        index: usize,
        /// The id its result must answer.
        id: String,
        /// The tool's name.
        name: String,
    },
    /// More of a tool call's arguments (raw JSON text, to be appended).
    ToolCallDelta {
        /// The call.
        index: usize,
        /// The fragment.
        arguments: String,
    },
    /// A tool call's arguments are complete.
    ToolCallFinished {
        /// The call.
        index: usize,
    },
    /// Tokens used so far; a later one replaces an earlier one.
    Usage(Usage),
    /// Why the model stopped.
    Finish(FinishReason),
}

/// The events that replay a whole response: what a model that cannot stream yields.
///
/// # Examples
///
/// ```
/// use agent_errors::ChatResponse;
/// use agent_errors::stream::{StreamEvent, response_events};
///
/// let events = response_events(ChatResponse::text("hi"));
/// assert_eq!(events, [StreamEvent::TextDelta("hi".into())]);
/// ```
pub fn response_events(response: ChatResponse) -> Vec<StreamEvent> {
    let mut events = Vec::with_capacity(3 + 3 * response.tool_calls.len());
    if let Some(text) = response.text {
        events.push(StreamEvent::TextDelta(text));
    }
    for (index, call) in response.tool_calls.into_iter().enumerate() {
        events.push(StreamEvent::ToolCallStarted {
            index,
            id: call.id.to_string(),
            name: call.name.to_string(),
        });
        events.push(StreamEvent::ToolCallDelta {
            index,
            arguments: call.arguments,
        });
        events.push(StreamEvent::ToolCallFinished { index });
    }
    events.extend(response.usage.map(StreamEvent::Usage));
    events.extend(response.finish_reason.map(StreamEvent::Finish));
    events
}

/// A stream that yields these events, then ends.
///
/// # Examples
///
/// A stream that breaks after its first piece, to test what your code does with it:
///
/// ```
/// use futures_util::StreamExt;
/// use agent_errors::stream::{StreamEvent, stream_of};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let mut stream = stream_of(vec![
///     Ok(StreamEvent::TextDelta("par".into())),
///     Err("connection reset".into()),
/// ]);
/// assert!(stream.next().await.unwrap().is_ok());
/// assert!(stream.next().await.unwrap().is_err());
/// # }
/// ```
pub fn stream_of<'a>(events: Vec<Result<StreamEvent, BoxError>>) -> ChatStream<'a> {
    Box::pin(futures_util::stream::iter(events))
}
