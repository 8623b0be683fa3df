//! The SSE reader on arbitrary bytes: no panic, events within the size caps, and the same events
//! (or the same failure) however the bytes are cut into chunks, as a network cuts them.
//!
//! Input: one byte giving how many cuts to make (up to 15), that many bytes giving where (each
//! a fraction of the rest, out of 256), then the stream's bytes.

#![no_main]

use agent_errors::fuzz::{MAX_SSE_EVENT_BYTES, MAX_SSE_LINE_BYTES, read_sse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&cuts, rest)) = data.split_first() else {
        return;
    };
    let cuts = usize::from(cuts % 16).min(rest.len());
    let (fractions, body) = rest.split_at(cuts);

    let whole = read_sse([body]);
    if let Ok(events) = &whole {
        for (name, data) in events {
            assert!(
                data.len() <= MAX_SSE_EVENT_BYTES,
                "an event of {} bytes",
                data.len()
            );
            assert!(name.as_ref().is_none_or(|n| n.len() <= MAX_SSE_LINE_BYTES));
        }
    }

    let mut at: Vec<usize> = fractions
        .iter()
        .map(|&f| body.len() * usize::from(f) / 256)
        .collect();
    at.sort_unstable();
    let mut chunks = Vec::with_capacity(at.len() + 1);
    let mut start = 0;
    for end in at {
        chunks.push(&body[start..end]);
        start = end;
    }
    chunks.push(&body[start..]);
    let split = read_sse(chunks);
    assert_eq!(whole, split, "cut at {fractions:?}");
});
