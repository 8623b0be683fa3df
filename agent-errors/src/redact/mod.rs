//! Redaction: secrets taken out of text before it reaches a model, an event or a log.
//!
//! Error text carries whatever its author put in it: request URLs with keys in their query,
//! headers, connection strings. [`redact`] replaces every secret it recognises with
//! [`REDACTED`], keeping the name it was given under so the text still says what went wrong
//! (`api_key=[REDACTED]`, `Authorization: Bearer [REDACTED]`).
//! [`sanitize::scrub`](crate::sanitize::scrub) redacts and then sanitizes, in that order, so a
//! cut never leaves half a secret behind.
//!
//! # Built-in rules
//!
//! Always applied:
//!
//! | what | example | becomes |
//! | --- | --- | --- |
//! | bearer and basic credentials | `Bearer eyJhbGci...`, `Basic dXNlcjpwYXNz` | `Bearer [REDACTED]` |
//! | a password in a URL, to the userinfo's `@` | `https://me:hunter22@db.example/` | `https://me:[REDACTED]@db.example/` |
//! | a token as a URL's user (16 characters or more, letters and digits) | `https://ghx7Ab9cD3eF5gH7iJ9@host/` | `https://[REDACTED]@host/` |
//! | key-like parameters, with `=` | `?api_key=...`, `&sig=...`, `token=...`, `key=...` | `api_key=[REDACTED]` |
//! | the unambiguous ones also with `:` | `password: ...`, `"client_secret": "..."` | `password: [REDACTED]` |
//! | sensitive headers, as `name: value` | `Authorization:`, `Proxy-Authorization:`, `X-Api-Key:`, `Api-Key:`, `X-Auth-Token:`, `Cookie:`, `Set-Cookie:` | `X-Api-Key: [REDACTED]` |
//! | key shapes | OpenAI `sk-...` and `sk-proj-...`, Anthropic `sk-ant-...`, AWS `AKIA...`/`ASIA...`, GitHub `ghp_`/`gho_`/`ghu_`/`ghs_`/`ghr_`/`github_pat_`, Slack `xoxb-...`, Google `AIza...`, Stripe `sk_live_...`, JWTs `eyJ...`, PEM private keys | `[REDACTED]` |
//!
//! The parameter names are `api_key` (also `apikey`, `api-key`), `access_token`,
//! `refresh_token`, `id_token`, `auth_token`, `session_token`, `client_secret`,
//! `aws_secret_access_key`, `private_key`, `secret`, `password`, `passwd`,
//! `x-amz-signature`, `x-amz-credential`, `x-amz-security-token` (with `=` or `:`), and
//! `token`, `key`, `sig`, `signature`, `auth`, `pwd` (with `=` only, or as a quoted JSON key
//! except `key`), so "the key was not found" is left alone. Names are matched case-insensitively
//! and as whole words: `monkey=3` is not a key.
//!
//! Key shapes need enough length to be keys (`sk-` and 20 more characters, with a digit or a
//! capital among them; a bearer or basic credential of 8 characters with a digit, a symbol or
//! an inner capital, or a bearer credential of 16 letters or more, lower-case ones included):
//! `sk-abc`, "bearer token missing" and "Basic authentication" stay as they are. A name that
//! is a URL's user (`https://api-key:VALUE@host/`) takes its value up to the userinfo's end,
//! not the rest of the line.
//!
//! # Your own secrets and patterns
//!
//! ```
//! use agent_errors::redact::{self, Redactor};
//!
//! // For the whole process, and every text the library redacts:
//! redact::register_secret("correct-horse-battery").unwrap();
//! redact::register_pattern(r"acct-\d{6}").unwrap();
//! assert_eq!(
//!     redact::redact("login correct-horse-battery for acct-123456 failed"),
//!     "login [REDACTED] for [REDACTED] failed"
//! );
//!
//! // Or scoped to one redactor (built-in rules included, process-wide registrations not):
//! let redactor = Redactor::new()
//!     .with_secret("tenant-0f3c9a")
//!     .unwrap()
//!     .with_pattern(r"pin=(\d+)")
//!     .unwrap();
//! assert_eq!(redactor.redact("tenant-0f3c9a pin=1234"), "[REDACTED] pin=[REDACTED]");
//! ```
//!
//! A pattern with capture groups replaces the first group that took part in the match, so
//! `pin=(\d+)` keeps `pin=`; without groups the whole match is replaced.
//!
//! Registered secrets are matched **exactly**: a secret of at least [`MIN_SECRET_CHARS`]
//! characters is removed wherever it appears verbatim or percent-encoded (as a URL or a form
//! body carries it: `%XX` in either case, a space as `%20` or `+`), inside a word too, but not
//! when it was otherwise changed on the way (split by a space or a line break, in another
//! case). Escape sequences are removed before any rule runs (so `ESC[0mBearer x` is a bearer
//! credential, and a sequence inside a secret does not hide it), and invisible characters by
//! [`scrub`](crate::sanitize::scrub) before the search. Each registered secret costs up to
//! five substring searches per redaction: register a handful, not thousands.
//!
//! # Errors that leave the library
//!
//! The library's own errors do not hand out a tool's error through `source()`: an
//! application that logs an error with its causes would print whatever the tool's error said.
//! [`Terminated`](crate::run::Terminated)'s chain is a redacted copy instead ([`RedactedError`](crate::classify::RedactedError)
//! levels, and redacted [`HttpError`](crate::HttpError)s so a lookup by type still finds the
//! status); the original is reachable through
//! [`Terminated::unredacted_error`](crate::run::Terminated::unredacted_error).
//!
//! # Cost and bound
//!
//! Every rule runs in time linear in the text (the `regex` crate has no backtracking), and at
//! most [`MAX_SCANNED_BYTES`] of a text are read. A longer text is cut there, together with
//! the word the cut falls in (and any beginning of a registered secret it ends with), and
//! [`TRUNCATION_MARKER`] is appended: what is past the cut
//! is dropped, not passed through unread. Every redacted span is replaced by the 10 bytes of
//! [`REDACTED`], so the output is at most 10 times as long as the part read, plus the marker.

use std::borrow::Cow;
use std::fmt;
use std::sync::{PoisonError, RwLock};

use regex::Regex;

use crate::escapes::{has_escape_sequences, strip_escape_sequences};

mod builtin;

use builtin::BUILTIN;

/// Appended to a text that was cut (here, and by [`sanitize`](crate::sanitize) for what a model
/// sees). One character, counted within the bound.
pub const TRUNCATION_MARKER: char = '…';

/// What a secret is replaced with.
pub const REDACTED: &str = "[REDACTED]";

/// The shortest exact secret that can be registered, in characters: shorter values would
/// shred ordinary words.
pub const MIN_SECRET_CHARS: usize = 8;

/// How much of a text redaction reads, in bytes; the rest is dropped. Far above what a model
/// is shown of an error (a few hundred characters), so only dumps and attacks reach it.
pub const MAX_SCANNED_BYTES: usize = 256 << 10;

/// Why a secret or a pattern was refused.
///
/// # Examples
///
/// ```
/// use agent_errors::redact::{RedactError, Redactor};
///
/// let refused = Redactor::new().with_secret("abc").unwrap_err();
/// let why = match refused {
///     RedactError::SecretTooShort { min_chars } => format!("secrets have {min_chars}+ characters"),
///     RedactError::InvalidPattern { problem } => format!("bad pattern: {problem}"),
///     _ => refused.to_string(), // the enum is non-exhaustive
/// };
/// assert_eq!(why, "secrets have 8+ characters");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RedactError {
    /// The pattern is not a valid regular expression for the `regex` crate, or compiles too
    /// big. The pattern is not repeated here, since it may spell out a secret.
    #[error("invalid redaction pattern: {problem}")]
    InvalidPattern {
        /// What the regex engine objected to, without the pattern's text.
        problem: &'static str,
    },
    /// The secret is shorter than [`MIN_SECRET_CHARS`]. The secret is not repeated here.
    #[error("a secret to redact must have at least {min_chars} characters")]
    SecretTooShort {
        /// The minimum, [`MIN_SECRET_CHARS`].
        min_chars: usize,
    },
}

/// Built-in rules plus secrets and patterns of its own. See the [module docs](self).
///
/// Its `Debug` shows how many secrets and patterns it holds, never the secrets.
///
/// # Examples
///
/// A redactor for one component, with its own secret and pattern, leaving the process-wide rules
/// alone:
///
/// ```
/// use agent_errors::redact::Redactor;
///
/// let redactor = Redactor::new()
///     .with_secret("tenant-7f3a9c21")?
///     .with_pattern(r"session=(\w+)")?; // the group is replaced, the name kept
/// assert_eq!(
///     redactor.redact("tenant-7f3a9c21 failed with session=XYZ123"),
///     "[REDACTED] failed with session=[REDACTED]"
/// );
/// # Ok::<(), agent_errors::redact::RedactError>(())
/// ```
#[derive(Clone, Default)]
pub struct Redactor {
    patterns: Vec<Regex>,
    secrets: Vec<Box<str>>,
    /// Every form a secret is searched in: as given, and percent-encoded.
    forms: Vec<Box<str>>,
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redactor")
            .field("patterns", &self.patterns.len())
            .field("secrets", &self.secrets.len())
            .finish()
    }
}

impl Redactor {
    /// A redactor with the built-in rules only.
    pub const fn new() -> Self {
        Redactor {
            patterns: Vec::new(),
            secrets: Vec::new(),
            forms: Vec::new(),
        }
    }

    /// Adds an exact secret, removed wherever it appears verbatim.
    ///
    /// # Errors
    ///
    /// [`RedactError::SecretTooShort`] under [`MIN_SECRET_CHARS`] characters.
    pub fn with_secret(mut self, secret: impl Into<String>) -> Result<Self, RedactError> {
        self.add_secret(secret.into())?;
        Ok(self)
    }

    /// Adds a regular expression (`regex` crate syntax). The first capture group that took
    /// part in a match is replaced, or the whole match when the pattern has no groups; empty
    /// matches are ignored.
    ///
    /// # Errors
    ///
    /// [`RedactError::InvalidPattern`] when the pattern does not compile.
    pub fn with_pattern(mut self, pattern: &str) -> Result<Self, RedactError> {
        self.patterns.push(compile(pattern)?);
        Ok(self)
    }

    /// `text` with every secret replaced by [`REDACTED`]; borrowed when nothing was found and
    /// nothing cut.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        if has_escape_sequences(text) {
            // A sequence can glue a name to the word before it (`ESC[0mBearer x`) or split a
            // secret in two: the rules read the text as a terminal shows it.
            let plain = strip_escape_sequences(text);
            return Cow::Owned(self.redact_plain(&plain).into_owned());
        }
        self.redact_plain(text)
    }

    /// [`Redactor::redact`] of a text without escape sequences.
    fn redact_plain<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let (scanned, cut) = bounded(text, &self.forms);
        let mut spans = Vec::new();
        for rule in BUILTIN.iter() {
            rule.spans(scanned, &mut spans);
        }
        for pattern in &self.patterns {
            pattern_spans(pattern, scanned, &mut spans);
        }
        for secret in &self.forms {
            spans.extend(
                scanned
                    .match_indices(&**secret)
                    .map(|(at, _)| (at, at + secret.len())),
            );
        }
        if spans.is_empty() && !cut {
            return Cow::Borrowed(text);
        }
        let mut out = replace(scanned, spans);
        if cut {
            out.push(TRUNCATION_MARKER);
        }
        Cow::Owned(out)
    }

    fn add_secret(&mut self, secret: String) -> Result<(), RedactError> {
        if secret.chars().count() < MIN_SECRET_CHARS {
            return Err(RedactError::SecretTooShort {
                min_chars: MIN_SECRET_CHARS,
            });
        }
        if self.secrets.iter().any(|known| **known == *secret) {
            return Ok(());
        }
        for form in percent_encoded_forms(&secret) {
            if !self.forms.iter().any(|known| **known == *form) {
                self.forms.push(form.into_boxed_str());
            }
        }
        self.forms.push(secret.clone().into_boxed_str());
        self.secrets.push(secret.into_boxed_str());
        Ok(())
    }
}

/// The secrets and patterns registered for the whole process.
static REGISTERED: RwLock<Redactor> = RwLock::new(Redactor::new());

/// `text` with every secret replaced by [`REDACTED`], by the built-in rules and everything
/// registered with [`register_secret`] and [`register_pattern`].
///
/// # Examples
///
/// ```
/// use agent_errors::redact::redact;
///
/// assert_eq!(
///     redact("GET https://api.example.com/v1?q=cats&api_key=abc123 failed: 401"),
///     "GET https://api.example.com/v1?q=cats&api_key=[REDACTED] failed: 401"
/// );
/// assert_eq!(redact("nothing to hide"), "nothing to hide");
/// ```
pub fn redact(text: &str) -> Cow<'_, str> {
    REGISTERED
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .redact(text)
}

/// Registers an exact secret for the whole process, from now on: every later [`redact`] (and
/// so everything the library redacts) removes it. Registering the same value twice is a no-op.
///
/// # Errors
///
/// [`RedactError::SecretTooShort`] under [`MIN_SECRET_CHARS`] characters.
///
/// # Examples
///
/// At start-up, with the keys your program holds:
///
/// ```
/// use agent_errors::redact::{redact, register_secret};
///
/// let key = "ak_live_Q2x9Lm4Tz8Vb"; // std::env::var("PAYMENTS_KEY")? in a real program
/// register_secret(key)?;
/// assert_eq!(redact("payments refused ak_live_Q2x9Lm4Tz8Vb"), "payments refused [REDACTED]");
/// # Ok::<(), agent_errors::redact::RedactError>(())
/// ```
pub fn register_secret(secret: impl Into<String>) -> Result<(), RedactError> {
    REGISTERED
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .add_secret(secret.into())
}

/// Registers a regular expression for the whole process, from now on; see
/// [`Redactor::with_pattern`] for what is replaced.
///
/// # Errors
///
/// [`RedactError::InvalidPattern`] when the pattern does not compile.
///
/// # Examples
///
/// ```
/// use agent_errors::redact::{redact, register_pattern};
///
/// register_pattern(r"acct-\d{6}")?; // your account numbers
/// assert_eq!(redact("acct-123456 is locked"), "[REDACTED] is locked");
/// # Ok::<(), agent_errors::redact::RedactError>(())
/// ```
pub fn register_pattern(pattern: &str) -> Result<(), RedactError> {
    let regex = compile(pattern)?;
    REGISTERED
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .patterns
        .push(regex);
    Ok(())
}

/// The part of `text` that redaction with the process-wide secrets reads, and whether it was
/// cut: what [`scrub`](crate::sanitize::scrub) cleans, so that it does not clean megabytes
/// that redaction then drops.
pub(crate) fn scan_bound(text: &str) -> (&str, bool) {
    let registered = REGISTERED.read().unwrap_or_else(PoisonError::into_inner);
    bounded(text, &registered.forms)
}

/// The forms `secret` takes in a URL or a form body, other than itself: every byte outside the
/// unreserved set (`A-Z a-z 0-9 - . _ ~`) as `%XX`, with upper- and lower-case hex digits, and
/// with a space as `+`.
fn percent_encoded_forms(secret: &str) -> Vec<String> {
    let encode = |hex: &[u8; 16], space_as_plus: bool| {
        let mut out = String::with_capacity(secret.len() * 3);
        for &b in secret.as_bytes() {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                out.push(char::from(b));
            } else if b == b' ' && space_as_plus {
                out.push('+');
            } else {
                out.push('%');
                out.push(char::from(hex[usize::from(b >> 4)]));
                out.push(char::from(hex[usize::from(b & 0xf)]));
            }
        }
        out
    };
    let mut forms = Vec::new();
    for hex in [b"0123456789ABCDEF", b"0123456789abcdef"] {
        for space_as_plus in [false, true] {
            let form = encode(hex, space_as_plus);
            if form != secret && !forms.contains(&form) {
                forms.push(form);
            }
        }
    }
    forms
}

fn compile(pattern: &str) -> Result<Regex, RedactError> {
    Regex::new(pattern).map_err(|error| RedactError::InvalidPattern {
        problem: match error {
            regex::Error::Syntax(_) => "syntax error",
            regex::Error::CompiledTooBig(_) => "compiled size over the limit",
            _ => "rejected by the regex engine",
        },
    })
}

/// The part of `text` redaction reads, and whether it was cut.
///
/// A cut drops the word it falls in, so a key shape cannot be left half matched, and then
/// any beginning of a registered secret at the end, for secrets with spaces in them.
fn bounded<'a>(text: &'a str, secrets: &[Box<str>]) -> (&'a str, bool) {
    if text.len() <= MAX_SCANNED_BYTES {
        return (text, false);
    }
    let mut end = MAX_SCANNED_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    end = text[..end].rfind(char::is_whitespace).unwrap_or(0);
    // Each pass shortens the text or stops; a few passes cover secrets that share words.
    for _ in 0..=secrets.len() {
        let kept = &text[..end];
        let partial = secrets.iter().find_map(|secret| {
            (1..secret.len())
                .rev()
                .filter(|&k| secret.is_char_boundary(k))
                .find(|&k| kept.ends_with(&secret[..k]))
        });
        match partial {
            Some(k) => end -= k,
            None => break,
        }
    }
    (&text[..end], true)
}

/// Adds the spans a user's `regex` finds in `text`: the first participating capture group of
/// each match, or the whole match. Empty spans and spans that are already [`REDACTED`] are
/// skipped.
fn pattern_spans(regex: &Regex, text: &str, spans: &mut Vec<(usize, usize)>) {
    let keep = |m: &regex::Match<'_>| !m.is_empty() && m.as_str() != REDACTED;
    if regex.captures_len() == 1 {
        spans.extend(
            regex
                .find_iter(text)
                .filter(keep)
                .map(|m| (m.start(), m.end())),
        );
        return;
    }
    for captures in regex.captures_iter(text) {
        if let Some(m) = captures.iter().skip(1).flatten().next().filter(keep) {
            spans.push((m.start(), m.end()));
        }
    }
}

/// `text` with each span, after merging those that overlap or touch, replaced by
/// [`REDACTED`].
fn replace(text: &str, mut spans: Vec<(usize, usize)>) -> String {
    spans.sort_unstable();
    let mut out = String::with_capacity(text.len() + spans.len() * REDACTED.len());
    let mut copied = 0;
    let mut spans = spans.into_iter().peekable();
    while let Some((start, mut end)) = spans.next() {
        while let Some(&(next_start, next_end)) = spans.peek() {
            if next_start > end {
                break;
            }
            end = end.max(next_end);
            spans.next();
        }
        // A span that starts inside an earlier one was merged into it above.
        let start = start.max(copied);
        out.push_str(&text[copied..start]);
        out.push_str(REDACTED);
        copied = end;
    }
    out.push_str(&text[copied..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_compiles() {
        assert_eq!(BUILTIN.len(), 16);
    }

    #[test]
    fn overlapping_and_touching_spans_merge() {
        assert_eq!(replace("abcdef", vec![(1, 3), (2, 4)]), "a[REDACTED]ef");
        assert_eq!(replace("abcdef", vec![(0, 2), (2, 3)]), "[REDACTED]def");
        assert_eq!(
            replace("abcdef", vec![(4, 6), (0, 1), (1, 5)]),
            "[REDACTED]"
        );
        assert_eq!(replace("abc", vec![]), "abc");
    }

    #[test]
    fn a_long_text_is_cut_before_the_word_the_cut_falls_in() {
        let text = format!(
            "{} sk-proj-{}",
            "a".repeat(MAX_SCANNED_BYTES - 20),
            "Z9".repeat(40)
        );
        let (scanned, cut) = bounded(&text, &[]);
        assert!(cut);
        assert_eq!(scanned, "a".repeat(MAX_SCANNED_BYTES - 20));
    }

    #[test]
    fn a_cut_drops_the_beginning_of_a_registered_secret() {
        let secret: Box<str> = "open sesame now".into();
        let text = format!("{} open sesame now", "a ".repeat(MAX_SCANNED_BYTES / 2 - 7));
        let (scanned, cut) = bounded(&text, std::slice::from_ref(&secret));
        assert!(cut);
        assert!(
            !scanned.contains("open"),
            "{:?}",
            &scanned[scanned.len() - 20..]
        );
    }
}
