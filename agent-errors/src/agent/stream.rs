//! A run that streams: the model's answer read event by event, each event handed to the
//! caller, the whole answer acted on only once its stream is complete.

use futures_util::StreamExt;
use tokio::sync::mpsc;

use crate::chat::{ChatRequest, ChatResponse};
use crate::error::BoxError;
use crate::model::ChatModel;
use crate::stream::{StreamAccumulator, StreamEvent};

/// What a streaming run hands its caller (see `RunOptions::stream_to`).
///
/// # Examples
///
/// Showing the answer as it arrives:
///
/// ```
/// use agent_errors::{Agent, RunOptions};
/// use agent_errors::run::RunDelta;
/// use agent_errors::stream::StreamEvent;
/// use agent_errors::testing::ScriptedModel;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let agent = Agent::builder("a").model(ScriptedModel::new().text("Hello!")).build()?;
/// let (sender, mut deltas) = tokio::sync::mpsc::channel(16);
/// let run = agent.run_with("greet me", RunOptions::new().stream_to(sender));
/// let show = async {
///     let mut screen = String::new();
///     while let Some(delta) = deltas.recv().await {
///         match delta {
///             RunDelta::Model(StreamEvent::TextDelta(text)) => screen.push_str(&text),
///             RunDelta::Model(_) => {} // tool calls, usage, finish
///             RunDelta::TurnRestarted { .. } => screen.clear(), // a retry: what was shown is void
///             _ => {} // the enum is non-exhaustive
///         }
///     }
///     screen
/// };
/// let (outcome, screen) = tokio::join!(run, show);
/// assert_eq!((outcome.result?, screen.as_str()), ("Hello!".to_owned(), "Hello!"));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RunDelta {
    /// A piece of the current model turn's answer.
    Model(StreamEvent),
    /// The current turn's answer so far is discarded: the model call failed (or its stream broke)
    /// and `on_llm_error` chose to ask again. What follows is the turn's new answer.
    TurnRestarted {
        /// The turn, counting from 1.
        turn: u32,
        /// The call that failed, counting from 1.
        failed_attempt: u32,
    },
}

/// The caller's end of the deltas.
#[derive(Debug, Clone)]
pub(super) struct DeltaSender(mpsc::Sender<RunDelta>);

impl DeltaSender {
    pub(super) fn new(sender: mpsc::Sender<RunDelta>) -> Self {
        DeltaSender(sender)
    }

    async fn send(&self, delta: RunDelta) {
        // A caller who stopped listening does not stop the run.
        let _ = self.0.send(delta).await;
    }

    pub(super) async fn turn_restarted(&self, turn: u32, failed_attempt: u32) {
        self.send(RunDelta::TurnRestarted {
            turn,
            failed_attempt,
        })
        .await;
    }
}

/// One model call: `chat` when nobody listens for deltas, else the streamed answer, each event
/// forwarded. A stream that breaks after output began is a
/// [`StreamInterrupted`](crate::stream::StreamInterrupted), never a shorter answer.
pub(super) async fn ask(
    model: &dyn ChatModel,
    request: &ChatRequest,
    deltas: Option<&DeltaSender>,
) -> Result<ChatResponse, BoxError> {
    let Some(deltas) = deltas else {
        return model.chat(request).await;
    };
    let mut stream = model.chat_stream(request).await?;
    let mut answer = StreamAccumulator::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(event) => {
                answer.push(&event);
                deltas.send(RunDelta::Model(event)).await;
            }
            Err(cause) if answer.has_output() => return Err(Box::new(answer.interrupted(cause))),
            Err(cause) => return Err(cause),
        }
    }
    Ok(answer.into_response())
}
