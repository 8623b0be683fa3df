//! What a person is shown of a call's arguments: the text as the tool receives it, character
//! for character, except where showing it would mislead or leak. A character a screen draws as
//! nothing or moves text with (zero-width, bidirectional controls, control characters, any
//! whitespace but a space, a tab or a line break) is written as its escape, `\u{200d}`, so the
//! person sees that it is there; a value that looks like a secret is shown as `[REDACTED]`, and
//! the question says its text was altered; past [`MAX_SHOWN_CHARS`] the text is cut, and the
//! question says so. Linear in the arguments' length.

use std::fmt::Write as _;
use std::sync::LazyLock;

use regex::Regex;

use super::MAX_SHOWN_CHARS;

/// The arguments as shown, and how they differ from what the tool receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Shown {
    /// The text a person reads.
    pub(crate) text: String,
    /// Not the whole set: the rest is past [`MAX_SHOWN_CHARS`] (or past what redaction reads).
    pub(crate) cut: bool,
    /// Not character for character: a character was escaped or a value redacted.
    pub(crate) altered: bool,
}

/// Characters written as escapes: invisible ones (format, private use, unassigned, default
/// ignorable, the braille blank), controls and whitespace other than a space, a tab or a line
/// break (a no-break space, a line separator, a carriage return that overwrites a line).
static UNSEEN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"[[\p{Cf}\p{Co}\p{Cn}\p{Default_Ignorable_Code_Point}\u{2800}\p{Cc}\p{White_Space}]--[ \t\n]]",
    )
    .expect("a constant pattern, covered by the tests")
});

/// `sent` as a person is shown it.
pub(crate) fn shown(sent: &str) -> Shown {
    let (head, scan_cut) = crate::redact::scan_bound(sent);
    let escaped = escape_unseen(head);
    let redacted = crate::redact::redact(&escaped);
    let altered = escaped.len() != head.len() || *redacted != *escaped;
    let (text, over) = match redacted.char_indices().nth(MAX_SHOWN_CHARS) {
        Some((end, _)) => (redacted[..end].to_owned(), true),
        None => (redacted.into_owned(), false),
    };
    Shown {
        text,
        cut: scan_cut || over,
        altered,
    }
}

/// `text` with every [`UNSEEN`] character written as `\u{hex}`.
fn escape_unseen(text: &str) -> String {
    let plain = |b: u8| (0x20..0x7f).contains(&b) || b == b'\t' || b == b'\n';
    if text.bytes().all(plain) {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut last = 0;
    for found in UNSEEN.find_iter(text) {
        out.push_str(&text[last..found.start()]);
        for c in found.as_str().chars() {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        }
        last = found.end();
    }
    out.push_str(&text[last..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invisible_and_moving_characters_are_escaped_and_plain_text_is_kept() {
        let plain = shown("{\"user\": \"alice\",\n\t\"n\": 1}");
        assert_eq!(plain.text, "{\"user\": \"alice\",\n\t\"n\": 1}");
        assert!(!plain.altered && !plain.cut);

        let hidden = shown("{\"user\": \"ali\u{200d}ce\u{202e}\r\u{a0}\u{1b}[2K\"}");
        assert_eq!(
            hidden.text,
            r#"{"user": "ali\u{200d}ce\u{202e}\u{d}\u{a0}\u{1b}[2K"}"#
        );
        assert!(hidden.altered && !hidden.cut);
    }

    #[test]
    fn a_redacted_value_alters_the_text_and_a_long_one_is_cut() {
        let token = shown(r#"{"auth": "Bearer abcdefghijklmnopqrstuvwxyz0123456789"}"#);
        assert!(token.text.contains("[REDACTED]"), "{}", token.text);
        assert!(token.altered);

        let long = shown(&"é".repeat(MAX_SHOWN_CHARS + 1));
        assert_eq!(long.text.chars().count(), MAX_SHOWN_CHARS);
        assert!(long.cut && !long.altered);
    }
}
