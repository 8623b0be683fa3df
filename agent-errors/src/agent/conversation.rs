//! A conversation that continues: the history between user turns, each turn one run.

use std::collections::HashMap;
use std::fmt;

use super::{Agent, AgentOutput, HistoryError, RunError, RunOptions, RunOutcome};
use crate::chat::Message;
use crate::extensions::Extensions;
use crate::sanitize::scrub;

/// The bound on a call id quoted in a [`HistoryError`], in characters.
const MAX_QUOTED_ID_CHARS: usize = 64;

/// The calls of the last assistant message, and which have their result.
struct OpenCalls<'a> {
    index: usize,
    /// Call id to its position in `answered`.
    ids: HashMap<&'a str, usize>,
    /// Per call, in call order: its id and whether a result answered it.
    answered: Vec<(&'a str, bool)>,
}

impl<'a> OpenCalls<'a> {
    fn of(index: usize, message: &'a Message) -> Result<Option<Self>, HistoryError> {
        let Message::Assistant { tool_calls, .. } = message else {
            return Ok(None);
        };
        if tool_calls.is_empty() {
            return Ok(None);
        }
        let mut open = OpenCalls {
            index,
            ids: HashMap::with_capacity(tool_calls.len()),
            answered: Vec::with_capacity(tool_calls.len()),
        };
        for call in tool_calls {
            if open.ids.insert(&call.id, open.answered.len()).is_some() {
                return Err(HistoryError::DuplicateCallId {
                    index,
                    call_id: quoted(&call.id),
                });
            }
            open.answered.push((&call.id, false));
        }
        Ok(Some(open))
    }

    fn answer(&mut self, index: usize, call_id: &str) -> Result<(), HistoryError> {
        let Some(&at) = self.ids.get(call_id) else {
            return Err(HistoryError::ResultWithoutCall {
                index,
                call_id: quoted(call_id),
            });
        };
        let answered = &mut self.answered[at].1;
        if *answered {
            return Err(HistoryError::DuplicateResult {
                index,
                call_id: quoted(call_id),
            });
        }
        *answered = true;
        Ok(())
    }

    fn close(self) -> Result<(), HistoryError> {
        match self.answered.iter().find(|(_, answered)| !answered) {
            Some((call_id, _)) => Err(HistoryError::CallWithoutResult {
                index: self.index,
                call_id: quoted(call_id),
            }),
            None => Ok(()),
        }
    }
}

fn quoted(call_id: &str) -> String {
    scrub(call_id, MAX_QUOTED_ID_CHARS)
}

/// Checks that every tool call in `history` is answered exactly once, right after the message
/// that made it, and that every tool message answers such a call. Linear in the history.
pub(super) fn check_history(history: &[Message]) -> Result<(), HistoryError> {
    let mut open: Option<OpenCalls<'_>> = None;
    for (index, message) in history.iter().enumerate() {
        if let Message::Tool(result) = message {
            match open.as_mut() {
                Some(calls) => calls.answer(index, &result.call_id)?,
                None => {
                    return Err(HistoryError::ResultWithoutCall {
                        index,
                        call_id: quoted(&result.call_id),
                    });
                }
            }
            continue;
        }
        if let Some(calls) = open.take() {
            calls.close()?;
        }
        open = OpenCalls::of(index, message)?;
    }
    open.map_or(Ok(()), OpenCalls::close)
}

/// A conversation of one user message, with room for the turns of a short run (a tool call,
/// its answer, the final answer): the transcript is not grown (moved to a new allocation) as
/// they are added.
pub(super) fn one_message(input: impl Into<String>) -> Vec<Message> {
    let mut history = Vec::with_capacity(4);
    history.push(Message::user(input));
    history
}

/// `history` with the system prompt first, unless it already starts with a system message (a
/// transcript handed back keeps the one it was given).
pub(super) fn with_system_prompt(prompt: Option<&str>, history: Vec<Message>) -> Vec<Message> {
    let starts_with_system = matches!(history.first(), Some(Message::System { .. }));
    match prompt {
        Some(prompt) if !starts_with_system => {
            let mut messages = Vec::with_capacity(history.len() + 4);
            messages.push(Message::system(prompt));
            messages.extend(history);
            messages
        }
        _ => history,
    }
}

/// A chat with an agent that keeps its history between user turns: each
/// [`send`](Conversation::send) is one run on the history so far plus the new message, and the
/// run's transcript becomes the history. Each run starts with a fresh per-run breaker and
/// repair budget; the agent's service breaker carries over.
///
/// # Examples
///
/// ```
/// use agent_errors::Agent;
/// use agent_errors::testing::ScriptedModel;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let model = ScriptedModel::new().text("hello").text("still here");
/// let agent = Agent::builder("greeter").model(model).build()?;
/// let mut chat = agent.conversation();
/// assert_eq!(chat.send("hi").await?, "hello");
/// assert_eq!(chat.send("are you there?").await?, "still here");
/// assert_eq!(chat.history().len(), 4);
/// # Ok(())
/// # }
/// ```
pub struct Conversation<O = String> {
    agent: Agent<O>,
    history: Vec<Message>,
    extensions: Extensions,
}

impl<O> fmt::Debug for Conversation<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Conversation")
            .field("agent", &self.agent)
            .field("messages", &self.history.len())
            .finish_non_exhaustive()
    }
}

impl<O: AgentOutput> Agent<O> {
    /// Starts a conversation with no history.
    pub fn conversation(&self) -> Conversation<O> {
        Conversation::from_history(self.clone(), Vec::new())
    }
}

impl<O: AgentOutput> Conversation<O> {
    /// Continues from `history` (a transcript saved earlier, say).
    ///
    /// The history is checked when a turn runs: one that breaks the one-result-per-call rule
    /// (a tool result with no call, two results for one call, a call with no result) ends the
    /// turn with [`RunError::InvalidHistory`] before the model is called; see [`HistoryError`].
    pub fn from_history(agent: Agent<O>, history: Vec<Message>) -> Self {
        Conversation {
            agent,
            history,
            extensions: Extensions::new(),
        }
    }

    /// Gives every run of this conversation `value`, as [`RunOptions::context`] does.
    #[must_use]
    pub fn context<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.extensions.insert(value);
        self
    }

    /// The messages so far, system prompt included once a turn has run.
    pub fn history(&self) -> &[Message] {
        &self.history
    }

    /// Takes the history out, to save it.
    pub fn into_history(self) -> Vec<Message> {
        self.history
    }

    /// Sends the user's `text` and returns the agent's answer. The turn is kept in the history
    /// whatever happens: a run that ends in an error still answered every tool call it made.
    pub async fn send(&mut self, text: impl Into<String>) -> Result<O, RunError> {
        self.send_with(text, RunOptions::new()).await.result
    }

    /// [`send`](Conversation::send) with these options (a cancellation handle, more context
    /// values). Options that carry context values use theirs instead of the conversation's.
    pub async fn send_with(
        &mut self,
        text: impl Into<String>,
        options: RunOptions,
    ) -> RunOutcome<O> {
        let mut history = std::mem::take(&mut self.history);
        history.push(Message::user(text));
        let mut extensions = self.extensions.clone();
        if !options.extensions.is_empty() {
            extensions = options.extensions.clone();
        }
        let options = options.extensions(extensions);
        let outcome = self.agent.run_conversation(history, options).await;
        self.history.clone_from(&outcome.transcript);
        outcome
    }
}
