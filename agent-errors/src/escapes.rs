//! Terminal escape sequences, removed the way a terminal parses them: the first step of both
//! sanitizing (what a model sees) and redacting (a secret right after an escape sequence must
//! not hide behind it).

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
