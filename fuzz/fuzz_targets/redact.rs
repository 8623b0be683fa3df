//! Redaction on arbitrary input: no panic, the output bound holds, and a user pattern that
//! does not compile is an error rather than a panic.
//!
//! Input: one byte giving the length of a pattern (up to 63 bytes), the pattern, then the
//! text (invalid UTF-8 replaced).

#![no_main]

use agent_errors::redact::{MAX_SCANNED_BYTES, REDACTED, Redactor, redact};
use agent_errors::redact::TRUNCATION_MARKER;
use libfuzzer_sys::fuzz_target;

/// Every redacted span is at least one byte replaced by `REDACTED`; a cut text gets the marker.
fn bound(input_len: usize) -> usize {
    REDACTED.len() * input_len.min(MAX_SCANNED_BYTES) + TRUNCATION_MARKER.len_utf8()
}

fuzz_target!(|data: &[u8]| {
    let Some((&pattern_len, rest)) = data.split_first() else {
        return;
    };
    let pattern_len = usize::from(pattern_len % 64).min(rest.len());
    let (pattern, text) = rest.split_at(pattern_len);
    let pattern = String::from_utf8_lossy(pattern);
    let text = String::from_utf8_lossy(text);

    let out = redact(&text);
    assert!(
        out.len() <= bound(text.len()),
        "{} > bound for {}",
        out.len(),
        text.len()
    );

    // A user's pattern: compiled or refused, never a panic; the same bound with it.
    if let Ok(redactor) = Redactor::new().with_pattern(&pattern) {
        let out = redactor.redact(&text);
        assert!(out.len() <= bound(text.len()));
    }
});
