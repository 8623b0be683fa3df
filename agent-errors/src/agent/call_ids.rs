//! One id per call in a run. A call's id names it everywhere after the model asked for it: its
//! result, its idempotency key (the run's id and the call's), its place in a checkpoint, a
//! person's answer. Some servers number calls per turn, or give two calls of one turn one id;
//! a call whose id an earlier call of the run already has is given one of its own before
//! anything acts on it, or two payments would be sent under one idempotency key and the
//! service would make only the first.

use std::sync::Arc;

use crate::chat::{Message, ToolCall};

/// Gives each of `calls` (a turn's, in order) an id no earlier call of `transcript` or of the
/// turn has: a repeated id gets `_2`, `_3`, ... (the first free one), so it stays in the
/// letters, digits and `_` every provider accepts. Ids that are already distinct are kept.
pub(super) fn make_distinct(transcript: &[Message], calls: &mut [ToolCall]) {
    for i in 0..calls.len() {
        let (before, rest) = calls.split_at(i);
        if !taken(transcript, before, &rest[0].id) {
            continue;
        }
        let base = &rest[0].id;
        let free = (2u64..)
            .map(|n| format!("{base}_{n}"))
            .find(|id| !taken(transcript, before, id) && !calls_have(&rest[1..], id));
        if let Some(id) = free {
            calls[i].id = Arc::from(id);
        }
    }
}

/// Whether a call of `transcript`, or one of `turn`, has the id `id`.
fn taken(transcript: &[Message], turn: &[ToolCall], id: &str) -> bool {
    calls_have(turn, id)
        || transcript.iter().any(|message| match message {
            Message::Assistant { tool_calls, .. } => calls_have(tool_calls, id),
            _ => false,
        })
}

fn calls_have(calls: &[ToolCall], id: &str) -> bool {
    calls.iter().any(|call| &*call.id == id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(calls: &[ToolCall]) -> Vec<&str> {
        calls.iter().map(|call| &*call.id).collect()
    }

    #[test]
    fn repeated_ids_get_the_first_free_suffix_and_distinct_ones_are_kept() {
        let earlier = vec![Message::assistant(
            None,
            vec![ToolCall::new("call_1", "t", "{}")],
        )];
        let mut turn = vec![
            ToolCall::new("call_1", "t", "{}"),
            ToolCall::new("call_1", "t", "{}"),
            ToolCall::new("call_1_3", "t", "{}"),
            ToolCall::new("call_9", "t", "{}"),
        ];
        make_distinct(&earlier, &mut turn);
        assert_eq!(ids(&turn), ["call_1_2", "call_1_4", "call_1_3", "call_9"]);
    }
}
