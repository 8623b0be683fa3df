//! `Retry-After` values on arbitrary input: no panic, never a wait past the cap, delta-seconds
//! read exactly, and the same answer through an `HttpError`'s headers as from the parser.
//!
//! Input: two bytes of cap in seconds (little-endian), then the header value (invalid UTF-8
//! replaced).

#![no_main]

use std::time::{Duration, SystemTime};

use agent_errors::HttpError;
use agent_errors::classify::{Classifier, parse_retry_after};
use libfuzzer_sys::fuzz_target;

/// A fixed clock, so a date's delay does not depend on when the target runs.
fn now() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_790_000_000)
}

fuzz_target!(|data: &[u8]| {
    let (cap, value) = match data {
        [a, b, rest @ ..] => (
            Duration::from_secs(u64::from(u16::from_le_bytes([*a, *b]))),
            rest,
        ),
        _ => return,
    };
    let value = String::from_utf8_lossy(value);

    let delay = parse_retry_after(&value, now(), cap);
    if let Some(delay) = delay {
        assert!(delay <= cap, "{delay:?} past the cap {cap:?} for {value:?}");
    }
    let digits = value.trim_ascii();
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        let expected = digits
            .parse::<u64>()
            .map_or(cap, |seconds| Duration::from_secs(seconds).min(cap));
        assert_eq!(delay, Some(expected), "delta-seconds {value:?}");
    }

    // Through the classifier: the header (or its millisecond form) is read with the same cap.
    let classifier = Classifier::new().with_retry_after_cap(cap);
    let seconds = HttpError::new(503, "busy").with_header("retry-after", value.as_ref());
    let read = classifier.classify(&seconds).retry_after;
    if let Some(read) = read {
        assert!(read <= cap, "{read:?} past the cap {cap:?} for {value:?}");
    }
    let millis = HttpError::new(429, "slow down").with_header("retry-after-ms", value.as_ref());
    if let Some(read) = classifier.classify(&millis).retry_after {
        assert!(
            read <= cap,
            "{read:?} past the cap {cap:?} for {value:?} ms"
        );
    }
});
