//! Assertions on run reports and transcripts.

use std::collections::HashMap;
use std::fmt;

use crate::chat::Message;
use crate::events::RunReport;

/// Assertions on a [`RunReport`]: each panics with the whole event list when it fails, and
/// returns the report so they chain.
///
/// # Examples
///
/// A test of a tool's policy, written against the report:
///
/// ```
/// use agent_errors::{Agent, HttpError, policy};
/// use agent_errors::testing::{FaultyTool, ReportAssertions, ScriptedModel, echo_tool};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let flaky = FaultyTool::new(echo_tool("fetch")).fail_times(2, || HttpError::new(503, "busy"));
/// let agent = Agent::builder("a")
///     .model(ScriptedModel::new().tool_call("fetch", r#"{"text": "ok"}"#).text("done"))
///     .tool(flaky.tool().with_policy(policy!(execution = retry(3))))
///     .build()?;
/// let outcome = agent.run_with_report("go").await;
/// outcome.report
///     .assert_events(&["tool_retry", "tool_retry"])
///     .assert_turns(2)
///     .assert_tool_calls(1);
/// assert_eq!(flaky.calls(), 3);
/// # Ok(())
/// # }
/// ```
pub trait ReportAssertions {
    /// The events' names, in order.
    fn event_names(&self) -> Vec<&'static str>;

    /// The events' names are exactly these, in this order.
    #[track_caller]
    fn assert_events(&self, expected: &[&str]) -> &Self;

    /// Exactly `n` events have this name.
    #[track_caller]
    fn assert_count(&self, name: &str, n: usize) -> &Self;

    /// The run took exactly `n` model turns.
    #[track_caller]
    fn assert_turns(&self, n: u32) -> &Self;

    /// The model was called exactly `n` times, retries included.
    #[track_caller]
    fn assert_model_calls(&self, n: u32) -> &Self;

    /// The model made exactly `n` tool calls.
    #[track_caller]
    fn assert_tool_calls(&self, n: u32) -> &Self;
}

impl ReportAssertions for RunReport {
    fn event_names(&self) -> Vec<&'static str> {
        self.events.iter().map(|e| e.name()).collect()
    }

    fn assert_events(&self, expected: &[&str]) -> &Self {
        let names = self.event_names();
        assert!(
            names == expected,
            "expected events {expected:?}, got {names:?}\n{:#?}",
            self.events
        );
        self
    }

    fn assert_count(&self, name: &str, n: usize) -> &Self {
        let got = self.count(name);
        assert!(
            got == n,
            "expected {n} `{name}` events, got {got}\n{:#?}",
            self.events
        );
        self
    }

    fn assert_turns(&self, n: u32) -> &Self {
        assert!(
            self.turns == n,
            "expected {n} turns, got {}\n{self:#?}",
            self.turns
        );
        self
    }

    fn assert_model_calls(&self, n: u32) -> &Self {
        assert!(
            self.model_calls == n,
            "expected {n} model calls, got {}\n{self:#?}",
            self.model_calls
        );
        self
    }

    fn assert_tool_calls(&self, n: u32) -> &Self {
        assert!(
            self.tool_calls == n,
            "expected {n} tool calls, got {}\n{self:#?}",
            self.tool_calls
        );
        self
    }
}

/// A break of the loop invariant found in a conversation.
///
/// # Examples
///
/// ```
/// use agent_errors::{Message, ToolCall, ToolResult};
/// use agent_errors::testing::{TranscriptViolation, transcript_violations};
///
/// let call = ToolCall::new("c1", "search", "{}");
/// let history = [
///     Message::assistant(None, vec![call.clone()]),
///     Message::user("never mind"), // the call got no answer
/// ];
/// for violation in transcript_violations(&history) {
///     match violation {
///         TranscriptViolation::Unanswered { call_id } => assert_eq!(call_id, "c1"),
///         TranscriptViolation::AnsweredTwice { call_id } | TranscriptViolation::Stray { call_id } => panic!("{call_id}"),
///         other => panic!("{other}"), // `OutOfOrder`, `DuplicateCallId`, and the non-exhaustive rest
///     }
/// }
/// # let _ = ToolResult::ok(&call, "");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TranscriptViolation {
    /// A tool call was not answered before the conversation moved on.
    Unanswered {
        /// The call's id.
        call_id: String,
    },
    /// A tool call was answered more than once.
    AnsweredTwice {
        /// The call's id.
        call_id: String,
    },
    /// A tool result answers no pending call.
    Stray {
        /// The id it claims to answer.
        call_id: String,
    },
    /// Results came in a different order than the calls.
    OutOfOrder {
        /// The id expected next.
        expected: String,
        /// The id found.
        found: String,
    },
    /// Two calls in one turn share an id.
    DuplicateCallId {
        /// The id.
        call_id: String,
    },
}

impl fmt::Display for TranscriptViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TranscriptViolation::Unanswered { call_id } => {
                write!(f, "call `{call_id}` got no result")
            }
            TranscriptViolation::AnsweredTwice { call_id } => {
                write!(f, "call `{call_id}` got more than one result")
            }
            TranscriptViolation::Stray { call_id } => {
                write!(f, "a result answers `{call_id}`, which no pending call has")
            }
            TranscriptViolation::OutOfOrder { expected, found } => {
                write!(f, "expected the result of `{expected}`, found `{found}`")
            }
            TranscriptViolation::DuplicateCallId { call_id } => {
                write!(f, "two calls in one turn share the id `{call_id}`")
            }
        }
    }
}

/// Checks the loop invariant on a conversation: every assistant tool call is followed, before
/// anything else, by exactly one tool result with its id, in call order. A conversation may end
/// on an assistant turn whose calls are all answered. Returns every violation found.
///
/// # Examples
///
/// Every run's transcript keeps the rule, whatever failed on the way:
///
/// ```
/// use agent_errors::Agent;
/// use agent_errors::testing::{ScriptedModel, transcript_violations};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let agent = Agent::builder("a")
///     .model(ScriptedModel::new().tool_call("no_such_tool", "{}").text("sorry"))
///     .build()?;
/// let outcome = agent.run_with_report("go").await;
/// assert!(transcript_violations(&outcome.transcript).is_empty());
/// # Ok(())
/// # }
/// ```
pub fn transcript_violations(messages: &[Message]) -> Vec<TranscriptViolation> {
    let mut violations = Vec::new();
    let mut i = 0;
    while i < messages.len() {
        match &messages[i] {
            Message::Assistant { tool_calls, .. } if !tool_calls.is_empty() => {
                let mut seen: HashMap<&str, u32> = HashMap::new();
                for call in tool_calls {
                    if seen.insert(&*call.id, 0).is_some() {
                        violations.push(TranscriptViolation::DuplicateCallId {
                            call_id: call.id.to_string(),
                        });
                    }
                }
                let mut j = i + 1;
                let mut position = 0;
                while let Some(Message::Tool(result)) = messages.get(j) {
                    match seen.get_mut(&*result.call_id) {
                        None => violations.push(TranscriptViolation::Stray {
                            call_id: result.call_id.to_string(),
                        }),
                        Some(count) => {
                            *count += 1;
                            if *count > 1 {
                                violations.push(TranscriptViolation::AnsweredTwice {
                                    call_id: result.call_id.to_string(),
                                });
                            } else if let Some(expected) = tool_calls.get(position) {
                                if expected.id != result.call_id {
                                    violations.push(TranscriptViolation::OutOfOrder {
                                        expected: expected.id.to_string(),
                                        found: result.call_id.to_string(),
                                    });
                                }
                            }
                            position += 1;
                        }
                    }
                    j += 1;
                }
                for call in tool_calls {
                    if seen.get(&*call.id) == Some(&0) {
                        violations.push(TranscriptViolation::Unanswered {
                            call_id: call.id.to_string(),
                        });
                    }
                }
                i = j;
            }
            Message::Tool(result) => {
                violations.push(TranscriptViolation::Stray {
                    call_id: result.call_id.to_string(),
                });
                i += 1;
            }
            _ => i += 1,
        }
    }
    violations
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::{ToolCall, ToolResult};

    fn call(id: &str) -> ToolCall {
        ToolCall::new(id, "t", "{}")
    }

    #[test]
    fn a_well_formed_conversation_has_no_violations() {
        let (a, b) = (call("a"), call("b"));
        let messages = vec![
            Message::user("go"),
            Message::assistant(None, vec![a.clone(), b.clone()]),
            Message::Tool(ToolResult::ok(&a, "1")),
            Message::Tool(ToolResult::error(&b, "no")),
            Message::assistant(Some("done".into()), vec![]),
        ];
        assert_eq!(transcript_violations(&messages), vec![]);
    }

    #[test]
    fn finds_missing_doubled_stray_and_reordered_results() {
        let (a, b, c) = (call("a"), call("b"), call("c"));
        let messages = vec![
            Message::assistant(None, vec![a.clone(), b.clone(), c.clone()]),
            Message::Tool(ToolResult::ok(&b, "1")),
            Message::Tool(ToolResult::ok(&b, "1")),
            Message::Tool(ToolResult::ok(&call("z"), "?")),
            Message::user("next"),
        ];
        let found = transcript_violations(&messages);
        assert!(found.contains(&TranscriptViolation::OutOfOrder {
            expected: "a".into(),
            found: "b".into()
        }));
        assert!(found.contains(&TranscriptViolation::AnsweredTwice {
            call_id: "b".into()
        }));
        assert!(found.contains(&TranscriptViolation::Stray {
            call_id: "z".into()
        }));
        assert!(found.contains(&TranscriptViolation::Unanswered {
            call_id: "a".into()
        }));
        assert!(found.contains(&TranscriptViolation::Unanswered {
            call_id: "c".into()
        }));
    }
}
