//! The failure being handled ([`Failure`]) and its words: the whole chain for operators, the
//! levels the model may read, and what the model should do about a tool that crashed.

use crate::classify::{Classification, Classifier, chain, model_words};
use crate::error::ToolError;
use crate::executor::failure::{Failed, ToolPanic, classify_tool_error};

/// The failure being handled, with what we know about it.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) error: ToolError,
    pub(crate) class: Classification,
    /// Calls made so far for this tool call, the first included.
    pub(crate) attempts: u32,
    /// The tool that failed, when not the one called: a fallback.
    pub(crate) blamed: Option<String>,
    /// That a fallback was tried for this failure and failed too, sanitized and bounded: said
    /// after the failure's own words, never in place of them.
    pub(crate) fallback_failed: Option<String>,
}

impl Failure {
    /// The failure of `failed`, classified unless the attempt already did.
    pub(crate) fn new(
        failed: impl Into<Failed>,
        attempts: u32,
        classifier: Option<&Classifier>,
    ) -> Self {
        let Failed { error, class } = failed.into();
        let class = class.unwrap_or_else(|| classify_tool_error(&error, classifier));
        Failure {
            error,
            class,
            attempts,
            blamed: None,
            fallback_failed: None,
        }
    }

    /// What the model (or a `throw`) is told: the failure's own words for the model, then, when
    /// a fallback was tried, that it failed too.
    pub(crate) fn shown_message(&self) -> String {
        let mut text = self.model_message();
        if let Some(fallback) = &self.fallback_failed {
            text.push_str(" (");
            text.push_str(fallback);
            text.push(')');
        }
        text
    }

    /// The failure's own words and those of its causes, each said once: for operators (events,
    /// logs), scrubbed where they are sent.
    pub(crate) fn message(&self) -> String {
        chain_text(self.error.cause())
    }

    /// The failure's words the model may read: [`message`](Failure::message) down to a level
    /// whose words are for operators only (a rig tool's `ToolExecutionError`, of which the model
    /// reads only its model feedback).
    pub(crate) fn model_message(&self) -> String {
        words_of(self.error.cause(), model_words)
    }

    /// What the model should do when its kind's suggestion would mislead: a panic is a `Bug`
    /// like a refused argument, but no change of arguments fixes the tool.
    pub(crate) fn suggestion(&self) -> Option<&'static str> {
        self.error
            .cause()
            .is::<ToolPanic>()
            .then_some(PANIC_SUGGESTION)
    }
}

/// The suggestion for a tool that panicked.
const PANIC_SUGGESTION: &str = "The tool crashed: a bug in the tool, not in the \
     arguments. Do not call it again the same way; use another tool or approach, or tell the user.";

/// An error's words and those of its causes, each said once.
pub(super) fn chain_text(error: &(dyn std::error::Error + 'static)) -> String {
    words_of(error, |level| (level.to_string(), true))
}

/// The words `say` gives each level of an error's chain, each said once, down to the level after
/// which `say` says the causes must not speak.
fn words_of(
    error: &(dyn std::error::Error + 'static),
    say: impl Fn(&(dyn std::error::Error + 'static)) -> (String, bool),
) -> String {
    let mut text: Option<String> = None;
    for level in chain(error) {
        let (said, causes_speak) = say(level);
        match &mut text {
            None => text = Some(said),
            Some(text) if !text.contains(&said) => {
                text.push_str(": ");
                text.push_str(&said);
            }
            Some(_) => {}
        }
        if !causes_speak {
            break;
        }
    }
    text.unwrap_or_default()
}
