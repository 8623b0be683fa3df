//! Compacting old failures in what the model is sent: when the model called a tool again after
//! it failed, the earlier failures of that tool go as one-line summaries and only the latest in
//! full. The run's transcript keeps every message as it was; only the request is shorter.

use crate::chat::{Message, ToolResult};

/// The bound on the part of a failure's text a summary keeps, in characters.
const SUMMARY_CHARS: usize = 80;

/// `messages` with every failed tool result that a later failure of the same tool supersedes
/// replaced by a one-line summary, or `None` when there is nothing to shorten (no copy made).
pub(in crate::agent) fn compacted(messages: &[Message]) -> Option<Vec<Message>> {
    let latest = latest_failures(messages);
    let superseded = |index: usize, result: &ToolResult| {
        let last = latest.iter().find(|(name, _)| *name == &*result.name);
        last.is_some_and(|&(_, at)| at != index) && summary(result).len() < result.content.len()
    };
    let any = messages.iter().enumerate().any(|(index, message)| {
        matches!(message, Message::Tool(result) if result.is_error && superseded(index, result))
    });
    if !any {
        return None;
    }
    let compact = messages
        .iter()
        .enumerate()
        .map(|(index, message)| match message {
            Message::Tool(result) if result.is_error && superseded(index, result) => {
                Message::Tool(ToolResult {
                    content: summary(result),
                    ..result.clone()
                })
            }
            other => other.clone(),
        });
    Some(compact.collect())
}

/// Per tool name, the index of its latest failed result.
fn latest_failures(messages: &[Message]) -> Vec<(&str, usize)> {
    let mut latest: Vec<(&str, usize)> = Vec::new();
    for (index, message) in messages.iter().enumerate() {
        let Message::Tool(result) = message else {
            continue;
        };
        if !result.is_error {
            continue;
        }
        match latest.iter_mut().find(|(name, _)| *name == &*result.name) {
            Some(entry) => entry.1 = index,
            None => latest.push((&result.name, index)),
        }
    }
    latest
}

/// One line saying an earlier attempt failed, with the start of its first line (the text was
/// sanitized when it became the result; cutting it keeps it so).
fn summary(result: &ToolResult) -> String {
    let first_line = result.content.lines().next().unwrap_or_default();
    let mut head: String = first_line.chars().take(SUMMARY_CHARS).collect();
    if head.len() < first_line.len() || result.content.len() > first_line.len() {
        head.push('…');
    }
    format!("(earlier failure, summarised; the latest is below) {head}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::ToolCall;

    fn failure(id: &str, name: &str, text: &str) -> Message {
        Message::Tool(ToolResult::error(&ToolCall::new(id, name, "{}"), text))
    }

    #[test]
    fn only_the_latest_failure_of_a_tool_stays_whole() {
        let long = format!("timed out\n{}", "detail ".repeat(40));
        let messages = vec![
            Message::user("go"),
            failure("1", "lookup", &long),
            failure("2", "other", &long),
            failure("3", "lookup", &long),
        ];
        let compact = compacted(&messages).unwrap();
        let Message::Tool(first) = &compact[1] else {
            panic!()
        };
        assert!(
            first.content.starts_with("(earlier failure"),
            "{}",
            first.content
        );
        assert!(first.content.contains("timed out"));
        assert!(!first.content.contains('\n'));
        assert_eq!(compact[2], messages[2]);
        assert_eq!(compact[3], messages[3]);
    }

    #[test]
    fn nothing_to_shorten_makes_no_copy() {
        let messages = vec![failure("1", "lookup", "no"), failure("2", "lookup", "no")];
        assert!(compacted(&messages).is_none());
        assert!(compacted(&[Message::user("hi")]).is_none());
    }
}
