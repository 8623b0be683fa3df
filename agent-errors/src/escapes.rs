//! Terminal escape sequences, removed the way a terminal parses them: the first step of both
//! sanitizing (what a model sees) and redacting (a secret right after an escape sequence must
//! not hide behind it). And [`Visible`], text from outside as a log line or span field holds it.

use std::fmt::{self, Write as _};

const ESC: char = '\u{1b}';
const BEL: char = '\u{07}';
const CAN: char = '\u{18}';
const SUB: char = '\u{1a}';
const DEL: char = '\u{7f}';
const C1_DCS: char = '\u{90}';
const C1_SOS: char = '\u{98}';
const C1_CSI: char = '\u{9b}';
const C1_ST: char = '\u{9c}';
const C1_OSC: char = '\u{9d}';
const C1_PM: char = '\u{9e}';
const C1_APC: char = '\u{9f}';

/// Where the escape-sequence parser is, after the VT500 state machine that terminals follow.
#[derive(Clone, Copy)]
enum State {
    Ground,
    Escape,
    EscapeIntermediate,
    Csi,
    /// An operating system command: ends at BEL or ST.
    Osc,
    /// DCS, SOS, PM or APC: ends at ST.
    Str,
    /// ESC inside a string: `\` completes ST, anything else ends the string and starts a new
    /// escape sequence.
    StrEscape,
}

/// Removes ANSI/VT escape sequences. Text outside them is kept as is, control characters
/// included (the caller drops those).
///
/// As in a terminal, from any state ESC starts a new escape sequence, the 8-bit introducers
/// (CSI, OSC, DCS, SOS, PM, APC) start their sequences, ST, CAN, SUB and any other C1 control
/// end the current one, and C0 controls inside a sequence are executed (kept) without ending
/// it. One departure: an unterminated string sequence ends at a line break, so one stray OSC
/// does not swallow the rest of a message.
pub(crate) fn strip_escape_sequences(text: &str) -> String {
    if !has_escape_sequences(text) {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    let mut state = State::Ground;
    for c in text.chars() {
        state = next_state(state, c, &mut out);
    }
    out
}

/// One step of the parser: the state after `c`, pushing `c` to `out` when it is text (or a C0
/// control a terminal would execute).
fn next_state(state: State, c: char, out: &mut String) -> State {
    if let State::Ground = state {
        return ground(c, out);
    }
    // Transitions that apply in every other state.
    match c {
        ESC => {
            return match state {
                State::Osc | State::Str | State::StrEscape => State::StrEscape,
                _ => State::Escape,
            };
        }
        C1_CSI => return State::Csi,
        C1_OSC => return State::Osc,
        C1_DCS | C1_SOS | C1_PM | C1_APC => return State::Str,
        CAN | SUB | C1_ST => return State::Ground,
        '\u{80}'..='\u{9f}' => {
            // Any other C1 control is executed and ends the sequence.
            out.push(c);
            return State::Ground;
        }
        _ => {}
    }
    match state {
        State::Ground => ground(c, out),
        State::Escape | State::EscapeIntermediate => match c {
            '[' if matches!(state, State::Escape) => State::Csi,
            ']' if matches!(state, State::Escape) => State::Osc,
            'P' | 'X' | '^' | '_' if matches!(state, State::Escape) => State::Str,
            ' '..='/' => State::EscapeIntermediate,
            '0'..='~' => State::Ground,
            DEL => state,
            '\0'..='\u{1f}' => {
                out.push(c);
                state
            }
            // Not part of an escape sequence: the ESC is dropped, the character kept.
            _ => {
                out.push(c);
                State::Ground
            }
        },
        State::Csi => match c {
            ' '..='?' => State::Csi,
            '@'..='~' => State::Ground,
            DEL => State::Csi,
            '\0'..='\u{1f}' => {
                out.push(c);
                State::Csi
            }
            // Not a well-formed sequence: end it here and keep the character.
            _ => {
                out.push(c);
                State::Ground
            }
        },
        State::Osc | State::Str => match c {
            BEL if matches!(state, State::Osc) => State::Ground,
            '\n' => {
                out.push(c);
                State::Ground
            }
            _ => state,
        },
        State::StrEscape => match c {
            '\\' => State::Ground,
            _ => next_state(State::Escape, c, out),
        },
    }
}

/// Whether `text` may hold an escape sequence: an ESC or a C1 introducer.
pub(crate) fn has_escape_sequences(text: &str) -> bool {
    text.contains([ESC, C1_CSI, C1_DCS, C1_SOS, C1_OSC, C1_PM, C1_APC])
}

/// A step from outside any sequence.
fn ground(c: char, out: &mut String) -> State {
    match c {
        ESC => State::Escape,
        C1_CSI => State::Csi,
        C1_OSC => State::Osc,
        C1_DCS | C1_SOS | C1_PM | C1_APC => State::Str,
        _ => {
            out.push(c);
            State::Ground
        }
    }
}

/// The most characters of one outside text a log line or span field holds.
pub(crate) const MAX_LOGGED_CHARS: usize = 2048;

/// Text from outside (a model-written call id or tool name, a server's message, an error's
/// words) as a `tracing` field shows it: every control character (a line break, an ESC), every
/// whitespace but a space and every character a screen shows as nothing written as its escape
/// (`\u{1b}`), and at most a bound of characters, so the text cannot start a forged log line,
/// move a terminal's cursor or hide in a field. Formatted only when a subscriber records it.
pub(crate) struct Visible<T>(pub(crate) T, pub(crate) usize);

impl<T: fmt::Display> Visible<T> {
    /// `text`, up to [`MAX_LOGGED_CHARS`].
    pub(crate) fn of(text: T) -> Self {
        Visible(text, MAX_LOGGED_CHARS)
    }
}

impl<T: fmt::Display> fmt::Display for Visible<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = Escaping {
            out: f,
            left: self.1,
            cut: false,
        };
        write!(out, "{}", self.0)?;
        if out.cut {
            out.out.write_str("…")?;
        }
        Ok(())
    }
}

/// Writes through to a formatter, escaping what [`unseen`] names and counting characters.
struct Escaping<'a, 'b> {
    out: &'a mut fmt::Formatter<'b>,
    left: usize,
    cut: bool,
}

impl fmt::Write for Escaping<'_, '_> {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        for c in text.chars() {
            if self.left == 0 {
                self.cut = true;
                return Ok(());
            }
            self.left -= 1;
            if unseen(c) {
                write!(self.out, "\\u{{{:x}}}", u32::from(c))?;
            } else {
                self.out.write_char(c)?;
            }
        }
        Ok(())
    }
}

/// A character a log line must not hold as it is: a control, whitespace other than a space, or
/// a character drawn as nothing (format characters, the bidirectional controls, variation
/// selectors, fillers, private use and unassigned planes' tags).
fn unseen(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_control();
    }
    c.is_control()
        || c.is_whitespace()
        || matches!(
            c,
            '\u{ad}'
                | '\u{34f}'
                | '\u{61c}'
                | '\u{115f}'..='\u{1160}'
                | '\u{17b4}'..='\u{17b5}'
                | '\u{180b}'..='\u{180f}'
                | '\u{200b}'..='\u{200f}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2060}'..='\u{206f}'
                | '\u{2800}'
                | '\u{3164}'
                | '\u{e000}'..='\u{f8ff}'
                | '\u{fe00}'..='\u{fe0f}'
                | '\u{feff}'
                | '\u{ffa0}'
                | '\u{fff0}'..='\u{fffb}'
                | '\u{e0000}'..='\u{10ffff}'
        )
}
