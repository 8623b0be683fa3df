//! Surfacing: turning untrusted error text into what a model may see.
//!
//! An error message comes from whatever raised it (a remote service, a library, a shell
//! command) and nobody vouched for it. Before a model reads it, [`sanitize`]:
//!
//! 1. removes terminal escape sequences the way a terminal parses them: CSI (`ESC [ ... final`,
//!    colours and cursor moves), OSC (`ESC ] ... BEL` or ST, hyperlinks and window titles), the
//!    other string sequences (DCS, SOS, PM, APC, ended by ST, `ESC \` or U+009C), two-character
//!    escapes, and the 8-bit C1 forms of all of them. In any state, ESC or a C1 introducer
//!    starts a new sequence and ST, CAN, SUB or another C1 control ends the current one, so a
//!    sequence's payload never comes out as text (`"\x1b[\u{9d}HIDDEN\u{9c}"` gives
//!    nothing). An unterminated string sequence ends at the line break;
//! 2. drops backtrace and stack-trace lines: Rust (`stack backtrace:`, frames such as
//!    `   0: std::panicking::begin_panic`, `      at src/main.rs:10:5`, the
//!    `RUST_BACKTRACE` note), Python (`Traceback (most recent call last):` and the indented
//!    `File "x.py", line 3` frames with their source lines), Java and JavaScript
//!    (`    at Foo.bar(Foo.java:10)`, `... 12 more`) and Go (`goroutine 1 [running]:`, `.go:12`
//!    frames), keeping the lines that carry the error itself. A text made of nothing but such
//!    lines is kept whole rather than shown as nothing;
//! 3. removes control characters and invisible characters, decided by Unicode property, not
//!    by a list: format characters (general category `Cf`: zero-width characters and joiners,
//!    bidirectional marks, embeddings, overrides and isolates, the invisible operators, the
//!    soft hyphen, Unicode tag characters, which can spell hidden text, Egyptian hieroglyph
//!    format controls), private-use characters (`Co`), unassigned code points (`Cn`), default
//!    ignorable code points (variation selectors, which can smuggle bytes after any visible
//!    character, the combining grapheme joiner, Hangul and Khmer fillers) and the braille
//!    blank U+2800. The tables are the `regex` crate's (Unicode 16.0): a character a later
//!    version assigns is removed as unassigned until they are updated;
//! 4. collapses every run of whitespace, line breaks included, into one space and trims the ends;
//! 5. bounds the length.
//!
//! `sanitize` is idempotent: `sanitize(&sanitize(x, n), n) == sanitize(x, n)` for every text.
//! It does not redact secrets; [`scrub`] does both, and is what text leaving the library
//! should go through.
//!
//! # The bound
//!
//! The result has at most `max_chars` characters (Unicode scalar values, as `str::chars`
//! counts them), [`TRUNCATION_MARKER`] included: a longer text is cut on a character boundary to
//! `max_chars - 1` characters, trailing space removed, and the marker appended. `max_chars == 0`
//! gives the empty string. [`DEFAULT_MAX_CHARS`] is 300.
//!
//! ```
//! use agent_errors::sanitize::sanitize;
//!
//! let raw = "\x1b[31merror:\x1b[0m  file\tmissing\nstack backtrace:\n   0: std::rt::lang_start";
//! assert_eq!(sanitize(raw, 300), "error: file missing");
//! assert_eq!(sanitize("abcdef", 4), "abc…");
//! ```

use std::borrow::Cow;
use std::sync::LazyLock;

use regex::{Regex, RegexSet};
use serde::Serialize;

use crate::classify::ErrorKind;
use crate::error::Severity;
use crate::escapes::strip_escape_sequences;
use crate::redact::TRUNCATION_MARKER;

/// The bound on a suggestion, in characters.
pub const MAX_SUGGESTION_CHARS: usize = 2000;

/// The default bound on an error message shown to a model, in characters.
pub const DEFAULT_MAX_CHARS: usize = 300;

/// The bound on a message a provider's server wrote, as an error shows it: enough to act on,
/// too little to flood a log.
#[cfg(feature = "_provider")]
const MAX_SERVER_MESSAGE_CHARS: usize = 1000;

/// A server's message as an error may show it: scrubbed (escape sequences and control
/// characters removed, secrets redacted) and cut to 1000 characters.
#[cfg(feature = "_provider")]
pub(crate) fn server_message(text: &str) -> String {
    scrub(text, MAX_SERVER_MESSAGE_CHARS)
}

/// The bound on a tool name shown in a [`SurfacedError`].
pub const MAX_TOOL_NAME_CHARS: usize = 128;

/// Cleans untrusted error text for a model: escape sequences, backtraces, control characters
/// and whitespace runs removed, cut to at most `max_chars` characters including the marker.
/// See the [module docs](self).
///
/// This does not redact secrets: text that leaves the library goes through [`scrub`], which
/// redacts first and then calls this.
///
/// # Examples
///
/// ```
/// use agent_errors::sanitize::sanitize;
///
/// let raw = "\x1b[31mboom\x1b[0m\n   at handler (server.js:10:5)\n\n\n   retry later";
/// let clean = sanitize(raw, 300);
/// assert!(clean.starts_with("boom") && !clean.contains('\x1b') && !clean.contains("server.js"));
/// assert!(sanitize(&"x".repeat(1000), 50).chars().count() <= 50);
/// ```
pub fn sanitize(text: &str, max_chars: usize) -> String {
    if max_chars == 0 {
        return String::new();
    }
    let plain = strip_escape_sequences(text);
    let plain = without_invisibles(&plain);
    let shaped = shape(&plain, max_chars, true);
    if shaped.is_empty() {
        // Nothing but stack frames: a model is better served by the frames than by nothing.
        // This is also what makes a second pass a no-op: the result is one line, and if that
        // line looks like a frame, it is the only line and so it is kept again.
        shape(&plain, max_chars, false)
    } else {
        shaped
    }
}

/// Redacts secrets, then sanitizes: what text leaving the library for a model, an event or a
/// log should go through.
///
/// In order:
///
/// 1. escape sequences, control characters (line breaks and other whitespace kept) and
///    invisible characters are removed, so that none of them can split a secret in two and
///    hide it from the redaction rules;
/// 2. secrets are replaced by [`REDACTED`](crate::redact::REDACTED) with the process-wide
///    rules of [`redact::redact`](crate::redact::redact);
/// 3. the result is [`sanitize`]d: stack frames dropped, whitespace collapsed, cut to at most
///    `max_chars` characters.
///
/// Redaction comes before the cut, so the cut can only shorten a `[REDACTED]`, never leave a
/// secret's first half in place. Only the first
/// [`MAX_SCANNED_BYTES`](crate::redact::MAX_SCANNED_BYTES) of `text` are read (cut as
/// redaction cuts), so the cost is bounded whatever the length.
///
/// # Examples
///
/// ```
/// use agent_errors::sanitize::scrub;
///
/// let raw = "upstream said 401 for https://api.example.com/v1?api_key=abc123&q=1";
/// assert_eq!(
///     scrub(raw, 300),
///     "upstream said 401 for https://api.example.com/v1?api_key=[REDACTED]&q=1"
/// );
/// ```
///
/// Unlike [`sanitize`], `scrub` is not guaranteed idempotent: a user pattern may match text
/// that an earlier pass produced.
pub fn scrub(text: &str, max_chars: usize) -> String {
    if max_chars == 0 {
        return String::new();
    }
    // Only what redaction reads is cleaned: the rest would be dropped anyway.
    let (head, cut) = crate::redact::scan_bound(text);
    let mut plain = clean_characters(head);
    if cut {
        plain.push(' ');
        plain.push(TRUNCATION_MARKER);
    }
    let redacted = crate::redact::redact(&plain);
    sanitize(&redacted, max_chars)
}

/// `text` without escape sequences, invisible characters and control characters other than
/// whitespace; line breaks and whitespace runs are kept.
pub(crate) fn clean_characters(text: &str) -> String {
    let plain = strip_escape_sequences(text);
    let mut plain = without_invisibles(&plain).into_owned();
    plain.retain(|c| c.is_whitespace() || !c.is_control());
    plain
}

/// Lines with stack frames dropped (when `drop_frames`), control characters removed, whitespace runs collapsed, and the bound applied.
fn shape(plain: &str, max_chars: usize, drop_frames: bool) -> String {
    let mut out = String::with_capacity(plain.len().min(max_chars.saturating_mul(4)) + 4);
    let mut chars = 0usize;
    let mut in_python_trace = false;

    'lines: for line in plain.split('\n') {
        if drop_frames {
            if in_python_trace {
                // Frames and source lines are indented; the first line that is not ends the
                // trace.
                if line.starts_with(char::is_whitespace) || line.trim().is_empty() {
                    continue;
                }
                in_python_trace = false;
            }
            if PYTHON_TRACE_START.is_match(line) {
                in_python_trace = true;
                continue;
            }
            if TRACE_LINES.is_match(line) {
                continue;
            }
        }
        // A line break is whitespace too.
        let mut space_pending = true;
        for c in line.chars() {
            if c.is_whitespace() {
                space_pending = true;
            } else if c.is_control() {
                continue;
            } else {
                if space_pending && chars > 0 {
                    out.push(' ');
                    chars += 1;
                }
                space_pending = false;
                out.push(c);
                chars += 1;
            }
            if chars > max_chars {
                break 'lines;
            }
        }
    }

    if chars > max_chars {
        let keep = out
            .char_indices()
            .nth(max_chars - 1)
            .map_or(out.len(), |(at, _)| at);
        out.truncate(keep);
        out.truncate(out.trim_end().len());
        out.push(TRUNCATION_MARKER);
    }
    out
}

/// Characters that render as nothing yet can carry, join or reorder text, decided by Unicode
/// property rather than listed, so a character the next Unicode version adds to these
/// categories is removed with no change here:
///
/// - general category `Cf`, format: zero-width characters and joiners, bidirectional marks,
///   embeddings, overrides and isolates, invisible operators, the soft hyphen, tag characters,
///   interlinear annotation, Egyptian hieroglyph format controls;
/// - `Co`, private use: no agreed glyph, so a font may draw anything or nothing;
/// - `Cn`, unassigned (noncharacters included): nothing a reader can see today;
/// - `Default_Ignorable_Code_Point`: what renderers draw as nothing, which adds the variation
///   selectors (they can smuggle bytes after any visible character), the combining grapheme
///   joiner, and the Hangul and Khmer fillers;
/// - U+2800 braille pattern blank, a symbol that displays as a blank without being whitespace.
///
/// The tables are the `regex` crate's (Unicode 16.0 in regex-syntax 0.8): a character assigned
/// by a later version counts as unassigned, and is removed, until they are updated.
static INVISIBLE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"[\p{Cf}\p{Co}\p{Cn}\p{Default_Ignorable_Code_Point}\u{2800}]+")
        .expect("a constant pattern, covered by the tests")
});

/// `text` without [`INVISIBLE`] characters; borrowed when it has none. Linear: one pass of the
/// regex engine, none at all for ASCII text.
fn without_invisibles(text: &str) -> Cow<'_, str> {
    if text.is_ascii() {
        return Cow::Borrowed(text);
    }
    INVISIBLE.replace_all(text, "")
}

/// Lines that start a Python traceback; the indented lines after them belong to it.
static PYTHON_TRACE_START: LazyLock<RegexSet> = LazyLock::new(|| {
    RegexSet::new([
        r"^\s*Traceback \(most recent call last\):\s*$",
        r#"^\s+File "[^"]*", line \d+"#,
    ])
    .expect("constant patterns, covered by the tests")
});

/// Single lines that are stack frames or backtrace furniture.
static TRACE_LINES: LazyLock<RegexSet> = LazyLock::new(|| {
    RegexSet::new([
        // Rust
        r"(?i)^\s*stack backtrace:\s*$",
        r"^\s*\d+:\s+(?:0x[0-9a-fA-F]+(?:\s+-\s+.*)?|<.*|\S*::\S.*|_[\w$.]*|rust_begin_unwind)\s*$",
        r"^\s+at\s+\S+:\d+(?::\d+)?\s*$",
        r"^\s*note: run with `RUST_BACKTRACE=",
        r"^\s*note: Some details are omitted",
        // Java, JavaScript
        r"^\s+at\s+\S.*\(.*\)\s*$",
        r"^\s*\.\.\.\s*\d+\s+(?:more|common frames omitted)\s*$",
        // Go
        r"^goroutine \d+ \[[^\]]*\]:\s*$",
        r"^\s+\S+\.go:\d+(?:\s+\+0x[0-9a-fA-F]+)?\s*$",
    ])
    .expect("constant patterns, covered by the tests")
});

/// What the model should do about a failure of this kind.
///
/// # Examples
///
/// ```
/// use agent_errors::{ErrorKind, sanitize::suggestion};
///
/// // The advice an error result for the model ends with, in a tool result of your own:
/// let advice = suggestion(ErrorKind::Validation);
/// assert!(!advice.is_empty());
/// ```
pub fn suggestion(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::NotFound => {
            "The resource does not exist. Do not retry with the same arguments; check the identifier or search for the right one."
        }
        ErrorKind::Validation | ErrorKind::Bug => {
            "The tool failed on these arguments. Check them against the tool's schema and try once with corrected arguments."
        }
        ErrorKind::Auth => {
            "Access was refused: credentials or permissions need attention. Do not retry; tell the user."
        }
        ErrorKind::Quota => {
            "A rate limit or quota was reached. Do not call this tool again right away; use another tool or tell the user."
        }
        ErrorKind::Timeout => {
            "The call took too long. Try a smaller request, a different approach, or tell the user."
        }
        ErrorKind::Transient | ErrorKind::ServerError => {
            "The service is failing. Use another tool or approach, or tell the user."
        }
        ErrorKind::Unknown => {
            "Unexpected error. Do not retry with identical arguments; try a different approach or tool, or tell the user."
        }
        ErrorKind::OutcomeUnknown => {
            "The call may or may not have taken effect. Do not call it again with the same arguments (a repeat is not run): check whether it happened with a tool that only reads, or ask the user."
        }
    }
}

/// An error as a model sees it in an `is_error` tool result.
///
/// # Examples
///
/// An error result of your own, in the shape the executor gives the model:
///
/// ```
/// use agent_errors::{ErrorKind, Severity, ToolCall, ToolResult};
/// use agent_errors::sanitize::SurfacedError;
///
/// let call = ToolCall::new("c1", "transfer", r#"{"amount": -5}"#);
/// let surfaced = SurfacedError::new("transfer", ErrorKind::Validation, "amount must be positive")
///     .with_severity(Severity::Medium)
///     .with_suggestion("Send a positive `amount`.");
/// let result = ToolResult::error(&call, surfaced.to_content());
/// assert!(result.content.contains(r#""severity":"medium""#));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct SurfacedError {
    /// The tool that failed.
    pub tool: String,
    /// The kind of failure.
    pub kind: ErrorKind,
    /// How serious, for escalations.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub severity: Option<Severity>,
    /// The message, secrets redacted and sanitized.
    pub message: String,
    /// What to do next.
    pub suggestion: String,
}

impl SurfacedError {
    /// Builds the surfaced form of a failure, [`scrub`]bing `message` (secrets redacted, then
    /// sanitized) to [`DEFAULT_MAX_CHARS`].
    pub fn new(tool: &str, kind: ErrorKind, message: &str) -> Self {
        SurfacedError::bounded(tool, kind, message, DEFAULT_MAX_CHARS)
    }

    /// Like [`SurfacedError::new`] with another bound on the message.
    ///
    /// The tool name is scrubbed too (to [`MAX_TOOL_NAME_CHARS`]): for an unknown tool it is
    /// whatever the model asked for.
    pub fn bounded(tool: &str, kind: ErrorKind, message: &str, max_chars: usize) -> Self {
        SurfacedError {
            tool: scrub(tool, MAX_TOOL_NAME_CHARS),
            kind,
            severity: None,
            message: scrub(message, max_chars),
            suggestion: suggestion(kind).to_owned(),
        }
    }

    /// Adds a severity.
    #[must_use]
    pub fn with_severity(mut self, severity: Severity) -> Self {
        self.severity = Some(severity);
        self
    }

    /// Replaces the suggestion.
    #[must_use]
    ///
    /// Suggestions are the library's own words (plus registered tool names), so their bound is
    /// [`MAX_SUGGESTION_CHARS`], longer than a message's: a list of tools must not be cut short.
    pub fn with_suggestion(mut self, suggestion: impl Into<String>) -> Self {
        self.suggestion = sanitize(&suggestion.into(), MAX_SUGGESTION_CHARS);
        self
    }

    /// The JSON text of the tool result, which is what the model sees:
    /// `{"tool":..,"kind":..,"severity":..,"message":..,"suggestion":..}`, `severity` only when
    /// set.
    ///
    /// ```
    /// use agent_errors::ErrorKind;
    /// use agent_errors::sanitize::SurfacedError;
    ///
    /// let surfaced = SurfacedError::new("lookup", ErrorKind::NotFound, "no user 42\n  at x (y.js:1:2)");
    /// let json: serde_json::Value = serde_json::from_str(&surfaced.to_content()).unwrap();
    /// assert_eq!(json["kind"], "not_found");
    /// assert_eq!(json["message"], "no user 42");
    /// ```
    pub fn to_content(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| self.message.clone())
    }
}
