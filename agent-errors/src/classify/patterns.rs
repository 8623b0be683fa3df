//! The last resort: word-bounded phrases in the message text.

use std::sync::LazyLock;

use regex::{Regex, RegexSet};

use super::ErrorKind;

/// Phrases per kind, in priority order: when a message matches several, the first listed wins.
///
/// Retryable kinds come first on purpose: reading a network failure as a permission problem
/// ends a run that one retry would have saved ("cannot access host: connection timed out").
const PATTERNS: [(ErrorKind, &str); 7] = [
    (
        ErrorKind::Timeout,
        r"\b(?:timed?[ -]?out|deadline (?:exceeded|elapsed)|took too long)\b",
    ),
    (
        ErrorKind::Quota,
        r"\b(?:rate[ -]?limit(?:ed|s)?|too many requests|quota (?:exceeded|exhausted|reached)|(?:exceeded|exhausted) (?:your |the )?quota|resource[ _]exhausted|throttl(?:ed|ing))\b",
    ),
    (
        ErrorKind::Transient,
        r"\b(?:connection (?:reset|refused|aborted|closed)|broken pipe|temporar(?:ily|y) (?:unavailable|failure)|service unavailable|overloaded|econn(?:reset|refused|aborted)|(?:network|host) (?:is )?unreachable|dns error|failed to lookup address|name or service not known|could not resolve host|no such host|enotfound)\b",
    ),
    (
        ErrorKind::Auth,
        r"\b(?:permission denied|access (?:is )?denied|forbidden|unauthori[sz]ed|not authori[sz]ed|authentication (?:failed|required)|invalid (?:api[ _-]?key|credentials|token)|(?:token|credentials?|session) (?:has )?expired|expired (?:token|credentials?))\b",
    ),
    (
        ErrorKind::NotFound,
        r"\b(?:not found|does not exist|doesn't exist|no such (?:file|directory|key|table|resource|user|object|bucket|entity|record))\b",
    ),
    (
        ErrorKind::Validation,
        r"\b(?:invalid (?:argument|parameter|input|value|request|format|json|syntax)s?|missing (?:required )?(?:field|parameter|argument|property)s?|malformed|bad request|unprocessable|(?:failed to|could not|cannot) parse|out of range)\b",
    ),
    (
        ErrorKind::ServerError,
        r"\b(?:internal (?:server )?error|bad gateway|server error|upstream (?:error|failure))\b",
    ),
];

/// The patterns, case-insensitive, with ASCII word boundaries.
///
/// A Unicode `\b` makes the regex engine give up its DFA on the first non-ASCII byte and fall
/// back to a search that costs about a microsecond per byte; an ASCII `\b` keeps the DFA on
/// any text. Every phrase is ASCII, so the only difference is at its edges: a phrase touching
/// a non-ASCII letter ("éforbidden") now counts as a word of its own.
static SET: LazyLock<RegexSet> = LazyLock::new(|| {
    RegexSet::new(
        PATTERNS
            .iter()
            .map(|(_, pattern)| format!("(?i){}", pattern.replace(r"\b", r"(?-u:\b)"))),
    )
    .expect("the patterns are constants covered by unit tests")
});

/// An HTTP status written in the text, for errors that are only text (a `String`, a boxed
/// message, an `anyhow!` message), in the spellings people and libraries use: after a word that
/// says it is one ("HTTP 503", "HTTP/1.1 429", "status 502", "status=503", "status code: 404"),
/// alone in parentheses ("warehouse API down (503)"), or followed by its reason phrase
/// ("503 Service Unavailable"). Its kind is the status table's.
///
/// A bare number is never read as a status ("order 503 shipped", "3 of 503 rows"): only those
/// spellings say that a number is one. A reason phrase must be the number's own ("404 Too Many
/// Requests" is not a status). One pass of the regex engine, linear in the text's length.
static STATUS: LazyLock<Regex> = LazyLock::new(|| {
    let phrases = REASONS.map(|(_, phrase)| phrase).join("|");
    Regex::new(&format!(
        r"(?i)(?-u:\b)(?:https?(?:/[0-9](?:\.[0-9])?)?|status(?:[ _]code)?)[ :=]*([1-5][0-9][0-9])(?-u:\b)|\(([45][0-9][0-9])\)|(?-u:\b)([45][0-9][0-9])[ -]+({phrases})(?-u:\b)"
    ))
    .expect("the pattern is built from constants covered by unit tests")
});

/// The reason phrases of the statuses the status table tells apart, as servers write them
/// (RFC 9110's and the common older ones), lower-case.
const REASONS: [(u16, &str); 24] = [
    (400, "bad request"),
    (401, "unauthorized"),
    (402, "payment required"),
    (403, "forbidden"),
    (404, "not found"),
    (405, "method not allowed"),
    (407, "proxy authentication required"),
    (408, "request timeout"),
    (409, "conflict"),
    (410, "gone"),
    (413, "payload too large"),
    (413, "content too large"),
    (414, "uri too long"),
    (422, "unprocessable entity"),
    (422, "unprocessable content"),
    (423, "locked"),
    (425, "too early"),
    (429, "too many requests"),
    (500, "internal server error"),
    (501, "not implemented"),
    (502, "bad gateway"),
    (503, "service unavailable"),
    (504, "gateway timeout"),
    (529, "overloaded"),
];

/// How much of a message the patterns read, in bytes (cut down to a character boundary).
///
/// What names the failure comes first in any message worth reading; the rest of a long one is
/// a body, a dump or an attack. Reading a bounded prefix makes the patterns' cost constant
/// whatever the length.
pub(super) const MAX_SCANNED_BYTES: usize = 4096;

/// The kind the message's wording points at, if any phrase matches in its first
/// [`MAX_SCANNED_BYTES`].
///
/// A status written in the text comes first: it says what the failure *is*, where the phrases
/// only guess from the wording ("502 Bad Gateway" is the transient 502, not a server error).
pub(super) fn kind_of_message(message: &str) -> Option<ErrorKind> {
    let scanned = scanned_prefix(message);
    if let Some(kind) = kind_of_written_status(scanned) {
        return Some(kind);
    }
    SET.matches(scanned)
        .into_iter()
        .next()
        .map(|first| PATTERNS[first].0)
}

/// The kind of the first HTTP status written in `text`, when the status table knows it.
fn kind_of_written_status(text: &str) -> Option<ErrorKind> {
    let status = STATUS.captures_iter(text).find_map(written_status)?;
    match super::http::status_kind(status).0 {
        ErrorKind::Unknown => None,
        kind => Some(kind),
    }
}

/// The status one match of [`STATUS`] names: a number with a reason phrase counts only when
/// the phrase is that number's.
fn written_status(found: regex::Captures<'_>) -> Option<u16> {
    if let Some(number) = found.get(1).or_else(|| found.get(2)) {
        return number.as_str().parse().ok();
    }
    let status: u16 = found.get(3)?.as_str().parse().ok()?;
    let phrase = found.get(4)?.as_str();
    REASONS
        .iter()
        .any(|&(code, reason)| code == status && reason.eq_ignore_ascii_case(phrase))
        .then_some(status)
}

/// The longest prefix of `message` of at most [`MAX_SCANNED_BYTES`] that ends on a character
/// boundary.
fn scanned_prefix(message: &str) -> &str {
    let mut end = message.len().min(MAX_SCANNED_BYTES);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    &message[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pattern_compiles() {
        assert_eq!(SET.len(), PATTERNS.len());
    }

    #[test]
    fn phrases_map_to_their_kinds() {
        let cases = [
            ("Operation Timed Out", ErrorKind::Timeout),
            ("gateway timeout", ErrorKind::Timeout),
            ("429 Too Many Requests", ErrorKind::Quota),
            ("you are being rate-limited", ErrorKind::Quota),
            ("ECONNRESET", ErrorKind::Transient),
            ("upstream connection refused", ErrorKind::Transient),
            (
                "dns error: failed to lookup address information",
                ErrorKind::Transient,
            ),
            (
                "getaddrinfo ENOTFOUND api.example.com",
                ErrorKind::Transient,
            ),
            ("Access Denied", ErrorKind::Auth),
            ("the token has expired", ErrorKind::Auth),
            ("no such file or directory", ErrorKind::NotFound),
            ("user 42 does not exist", ErrorKind::NotFound),
            ("missing required field `name`", ErrorKind::Validation),
            ("Internal Server Error", ErrorKind::ServerError),
        ];
        for (message, kind) in cases {
            assert_eq!(kind_of_message(message), Some(kind), "{message:?}");
        }
    }

    #[test]
    fn only_a_bounded_prefix_is_read_and_it_ends_on_a_char_boundary() {
        let filler = "é ü ß 漢 ".repeat(MAX_SCANNED_BYTES);
        assert_eq!(kind_of_message(&format!("{filler}timed out")), None);
        assert_eq!(
            kind_of_message(&format!("timed out {filler}")),
            Some(ErrorKind::Timeout)
        );
        for len in 0..16 {
            // Every possible cut inside a multi-byte character lands on a boundary.
            let text = format!("{}{filler}", "a".repeat(len));
            let prefix = scanned_prefix(&text);
            assert!(prefix.len() <= MAX_SCANNED_BYTES && prefix.len() > MAX_SCANNED_BYTES - 4);
        }
        assert_eq!(scanned_prefix("short"), "short");
    }

    #[test]
    fn a_status_written_in_the_text_is_read_by_the_status_table() {
        let cases = [
            ("HTTP 503", Some(ErrorKind::Transient)),
            ("upstream said HTTP/1.1 429", Some(ErrorKind::Quota)),
            (
                "request failed with status code: 401",
                Some(ErrorKind::Auth),
            ),
            ("status 504 from the gateway", Some(ErrorKind::Timeout)),
            ("http 404", Some(ErrorKind::NotFound)),
            ("HTTP 200", None),
            ("HTTP 5030", None),
            ("order 503 shipped", None),
            // The other common spellings: in parentheses, with the reason phrase, key=value.
            ("warehouse API down (503)", Some(ErrorKind::Transient)),
            ("got 503 Service Unavailable", Some(ErrorKind::Transient)),
            ("status=503", Some(ErrorKind::Transient)),
            ("502 Bad Gateway", Some(ErrorKind::Transient)),
            ("401 Unauthorized", Some(ErrorKind::Auth)),
            ("upstream: 429 too many requests", Some(ErrorKind::Quota)),
            // The status beats a phrase that guesses otherwise.
            ("HTTP 401: the job timed out", Some(ErrorKind::Auth)),
        ];
        for (message, kind) in cases {
            assert_eq!(kind_of_message(message), kind, "{message:?}");
        }
    }

    #[test]
    fn ordinary_numbers_are_not_read_as_statuses() {
        for message in [
            "processed 503 records",
            "3 of 503 rows failed",
            "order (2503) is late",
            "order (50) is late",
            "took 503ms",
            "version 5.0.3",
            "listening on port 5030",
            "error code 404 in the config",
            "row 404 Found twice",
            "404 Too Many Requests",
            "(200)",
            "status 5031",
            "id 404-not-found-page",
        ] {
            assert_eq!(kind_of_written_status(message), None, "{message:?}");
        }
    }

    #[test]
    fn reading_a_written_status_is_linear_in_the_text() {
        // Many near-misses in a row: each is rejected at once, the whole scan stays one pass.
        let near_misses = "(50 404 Found status= HTTP/ ".repeat(MAX_SCANNED_BYTES);
        assert_eq!(kind_of_message(&near_misses), None);
        let late = format!("{}(503)", "x ".repeat(1000));
        assert_eq!(kind_of_message(&late), Some(ErrorKind::Transient));
    }

    #[test]
    fn words_inside_other_words_do_not_match() {
        for message in [
            "accessor failed",
            "forbiddenness of the operation",
            "timeouts configured: 3",
            "unfounded claim",
            "invalidated cache entry",
        ] {
            assert_eq!(kind_of_message(message), None, "{message:?}");
        }
    }

    #[test]
    fn phrases_among_non_ascii_text_still_match() {
        assert_eq!(
            kind_of_message("Zugriff verweigert: ACCESS DENIED für Benutzer «ü»"),
            Some(ErrorKind::Auth)
        );
        assert_eq!(
            kind_of_message("接続: connection refused。"),
            Some(ErrorKind::Transient)
        );
        // Case folding is still Unicode-aware: the Kelvin sign folds to `k`.
        assert_eq!(
            kind_of_message("no such \u{212A}ey"),
            Some(ErrorKind::NotFound)
        );
    }
}
