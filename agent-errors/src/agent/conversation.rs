//! A conversation that continues: the history between user turns, each turn one run.

use std::fmt;

use super::{Agent, AgentOutput, RunError, RunOptions, RunOutcome};
use crate::chat::Message;
use crate::extensions::Extensions;

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
