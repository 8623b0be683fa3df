//! The rule every transcript keeps, checked on a saved run before it is resumed: each call the
//! model made gets exactly one result, right after its turn. A checkpoint that breaks it (a
//! damaged or forged store) would hand the model a transcript it refuses on every later turn,
//! so it is refused, naming the call.

use std::collections::HashMap;

use super::saved_run::{BrokenTranscript, SavedRun};
use crate::chat::{Message, ToolCall};
use crate::sanitize::{MAX_TOOL_NAME_CHARS, sanitize};

/// The first place `run` breaks the rule: the call's id (sanitized: it is the store's text)
/// and what is wrong.
pub(in crate::agent) fn violation(run: &SavedRun) -> Option<(String, BrokenTranscript)> {
    let found = |id: &str, problem| Some((sanitize(id, MAX_TOOL_NAME_CHARS), problem));
    let pending_turn = match (run.pending.first(), run.transcript.last()) {
        (None, _) => None,
        (Some(_), Some(Message::Assistant { tool_calls, .. })) => {
            let same = tool_calls.len() == run.pending.len()
                && tool_calls
                    .iter()
                    .zip(&run.pending)
                    .all(|(call, pending)| call.id == pending.call.id);
            if !same {
                return found(&run.pending[0].call.id, BrokenTranscript::PendingMismatch);
            }
            Some(run.transcript.len() - 1)
        }
        (Some(first), _) => return found(&first.call.id, BrokenTranscript::PendingMismatch),
    };
    let mut i = 0;
    while i < run.transcript.len() {
        match &run.transcript[i] {
            Message::Assistant { tool_calls, .. } if !tool_calls.is_empty() => {
                let mut answers = match answer_counts(tool_calls) {
                    Ok(answers) => answers,
                    Err(id) => return found(id, BrokenTranscript::DuplicateCallId),
                };
                i += 1;
                while let Some(Message::Tool(result)) = run.transcript.get(i) {
                    if let Some(problem) = count(&mut answers, &result.call_id) {
                        return found(&result.call_id, problem);
                    }
                    i += 1;
                }
                if pending_turn == Some(i - 1) {
                    // The turn being answered: its answers so far are saved with its calls.
                    for pending in &run.pending {
                        if let Some(result) = &pending.result {
                            if result.call_id != pending.call.id {
                                return found(&result.call_id, BrokenTranscript::OrphanResult);
                            }
                            if let Some(problem) = count(&mut answers, &result.call_id) {
                                return found(&result.call_id, problem);
                            }
                        }
                    }
                    continue;
                }
                if let Some(call) = tool_calls.iter().find(|c| answers[&*c.id] == 0) {
                    return found(&call.id, BrokenTranscript::Unanswered);
                }
            }
            Message::Tool(result) => return found(&result.call_id, BrokenTranscript::OrphanResult),
            _ => i += 1,
        }
    }
    None
}

/// A count of answers per call of a turn, all zero; the first id given twice if one is.
fn answer_counts(calls: &[ToolCall]) -> Result<HashMap<&str, u32>, &str> {
    let mut answers = HashMap::with_capacity(calls.len());
    for call in calls {
        if answers.insert(&*call.id, 0).is_some() {
            return Err(&call.id);
        }
    }
    Ok(answers)
}

/// Counts an answer to `call_id`; what is wrong with it, if anything.
fn count(answers: &mut HashMap<&str, u32>, call_id: &str) -> Option<BrokenTranscript> {
    match answers.get_mut(call_id) {
        None => Some(BrokenTranscript::OrphanResult),
        Some(n) if *n > 0 => Some(BrokenTranscript::AnsweredTwice),
        Some(n) => {
            *n = 1;
            None
        }
    }
}
