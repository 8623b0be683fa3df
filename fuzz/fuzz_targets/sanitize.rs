//! The sanitizer on arbitrary input: the bound holds, nothing hidden survives, a second pass
//! changes nothing, and `scrub` (redaction first) keeps the same bound.
//!
//! Input: two bytes of bound (little-endian, up to 511 characters), then the text (invalid
//! UTF-8 replaced).

#![no_main]

use agent_errors::sanitize::{sanitize, scrub};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (max_chars, text) = match data {
        [a, b, rest @ ..] => (usize::from(u16::from_le_bytes([*a, *b]) % 512), rest),
        _ => return,
    };
    let text = String::from_utf8_lossy(text);

    let once = sanitize(&text, max_chars);
    assert!(once.chars().count() <= max_chars, "bound: {once:?}");
    assert!(
        !once.chars().any(char::is_control),
        "control character in {once:?}"
    );
    assert!(
        !once.contains("  ") && once.trim() == once,
        "whitespace in {once:?}"
    );
    assert_eq!(
        sanitize(&once, max_chars),
        once,
        "not idempotent for {text:?}"
    );

    let scrubbed = scrub(&text, max_chars);
    assert!(scrubbed.chars().count() <= max_chars, "bound: {scrubbed:?}");
    assert!(
        !scrubbed.chars().any(char::is_control),
        "control character in {scrubbed:?}"
    );
});
