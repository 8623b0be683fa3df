//! One rung of a ladder as the configuration file writes it, in the DSL's own words:
//! `retry(3)`, `retry(3, when_safe)`, `retry(max_attempts = 3, initial = "250ms", max = "10s")`,
//! `fix(builtin)`,
//! `fallback(tool = "cached_search")`, `escalate`, `throw`, `degrade`, `ask_person`.
//!
//! A rung is a short string: it is read in one pass over its characters, and it is refused
//! past [`MAX_RUNG_CHARS`] before anything else is done with it.

use std::ops::Range;
use std::time::Duration;

use agent_errors::policy::{Action, RetryAction};

use crate::suggest::did_you_mean;

/// The longest rung read: `retry(max_attempts = 10, initial = "250ms", max = "10s")` is 52.
pub(crate) const MAX_RUNG_CHARS: usize = 200;

/// The actions a rung may name, as the file writes them.
pub(crate) const ACTIONS: [&str; 8] = [
    "retry",
    "fix",
    "fallback",
    "escalate",
    "throw",
    "degrade",
    "ask_person",
    "recommended",
];

/// A mistake in one rung: what is wrong, and where in the rung's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RungProblem {
    pub(crate) at: Range<usize>,
    pub(crate) message: String,
}

fn problem(at: Range<usize>, message: impl Into<String>) -> RungProblem {
    RungProblem {
        at,
        message: message.into(),
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token<'a> {
    /// A name, a number or a duration: `retry`, `3`, `250ms`.
    Word(&'a str),
    /// A quoted string, without its quotes.
    Quoted(&'a str),
    Punct(char),
}

/// The rung's tokens with their places, or the place of a character no token starts with.
fn tokens(text: &str) -> Result<Vec<(Token<'_>, Range<usize>)>, RungProblem> {
    let mut out = Vec::new();
    let mut chars = text.char_indices().peekable();
    while let Some((start, c)) = chars.next() {
        if c.is_whitespace() {
            continue;
        }
        if matches!(c, '(' | ')' | '=' | ',') {
            out.push((Token::Punct(c), start..start + 1));
        } else if c == '"' || c == '\'' {
            let close = text[start + 1..].find(c).map(|i| start + 1 + i);
            let Some(close) = close else {
                return Err(problem(start..text.len(), "a quoted value is not closed"));
            };
            out.push((Token::Quoted(&text[start + 1..close]), start..close + 1));
            while chars.peek().is_some_and(|&(i, _)| i <= close) {
                chars.next();
            }
        } else if c.is_ascii_alphanumeric() || c == '_' || c == '.' {
            let mut end = start + c.len_utf8();
            while let Some(&(i, next)) = chars.peek() {
                if !(next.is_ascii_alphanumeric() || next == '_' || next == '.') {
                    break;
                }
                end = i + next.len_utf8();
                chars.next();
            }
            out.push((Token::Word(&text[start..end]), start..end));
        } else {
            let end = start + c.len_utf8();
            return Err(problem(start..end, format!("unexpected `{c}`")));
        }
    }
    Ok(out)
}

/// One argument inside the parentheses: `3`, `"cache"`, `initial = "250ms"`.
struct Arg<'a> {
    name: Option<(&'a str, Range<usize>)>,
    value: &'a str,
    at: Range<usize>,
}

/// The arguments between `(` and `)`, which must close the rung.
fn arguments<'a>(
    rest: &[(Token<'a>, Range<usize>)],
    open: Range<usize>,
) -> Result<Vec<Arg<'a>>, RungProblem> {
    let mut args = Vec::new();
    let mut i = 0;
    loop {
        match rest.get(i) {
            None => return Err(problem(open, "`(` is not closed")),
            Some((Token::Punct(')'), _)) if i + 1 == rest.len() => return Ok(args),
            Some((Token::Punct(')'), at)) => {
                return Err(problem(
                    at.end..rest[rest.len() - 1].1.end,
                    "nothing may follow `)`",
                ));
            }
            Some(_) => {}
        }
        let (arg, used) = argument(&rest[i..])?;
        args.push(arg);
        i += used;
        match rest.get(i) {
            Some((Token::Punct(','), _)) => i += 1,
            Some((Token::Punct(')'), _)) => {}
            Some((_, at)) => return Err(problem(at.clone(), "expected `,` or `)`")),
            None => return Err(problem(open, "`(` is not closed")),
        }
    }
}

fn argument<'a>(rest: &[(Token<'a>, Range<usize>)]) -> Result<(Arg<'a>, usize), RungProblem> {
    let value_of = |token: &(Token<'a>, Range<usize>)| match &token.0 {
        Token::Word(word) | Token::Quoted(word) => Ok(*word),
        Token::Punct(c) => Err(problem(
            token.1.clone(),
            format!("expected a value, found `{c}`"),
        )),
    };
    match rest {
        [
            (Token::Word(name), name_at),
            (Token::Punct('='), _),
            value,
            ..,
        ] => {
            let at = name_at.start..value.1.end;
            let arg = Arg {
                name: Some((name, name_at.clone())),
                value: value_of(value)?,
                at,
            };
            Ok((arg, 3))
        }
        [first, ..] => {
            let arg = Arg {
                name: None,
                value: value_of(first)?,
                at: first.1.clone(),
            };
            Ok((arg, 1))
        }
        [] => unreachable!("arguments() checks for the end first"),
    }
}

/// Reads one rung.
pub(crate) fn parse_rung(text: &str) -> Result<Action, RungProblem> {
    if text.chars().count() > MAX_RUNG_CHARS {
        return Err(problem(
            0..text.len(),
            format!("a rung is at most {MAX_RUNG_CHARS} characters"),
        ));
    }
    let tokens = tokens(text)?;
    let Some(((Token::Word(name), name_at), rest)) = tokens.split_first() else {
        let at = tokens.first().map_or(0..text.len(), |t| t.1.clone());
        return Err(problem(
            at,
            format!("expected an action: one of {}", ACTIONS.join(", ")),
        ));
    };
    let args = match rest.split_first() {
        None => None,
        Some(((Token::Punct('('), open), inside)) => Some(arguments(inside, open.clone())?),
        Some(((_, at), _)) => {
            return Err(problem(at.clone(), "expected `(` or the end of the rung"));
        }
    };
    action(name, name_at.clone(), args.as_deref())
}

fn action(name: &str, at: Range<usize>, args: Option<&[Arg<'_>]>) -> Result<Action, RungProblem> {
    let bare = |action: Action| match args {
        None => Ok(action),
        Some(_) => Err(problem(at.clone(), format!("`{name}` takes no arguments"))),
    };
    match name {
        "escalate" => bare(Action::Escalate),
        "throw" => bare(Action::Throw),
        "degrade" => bare(Action::Degrade),
        "ask_person" => bare(Action::AskPerson),
        "retry" => retry(args.unwrap_or_default(), at),
        "fallback" => fallback(args.unwrap_or_default(), at),
        "fix" => fix(args.unwrap_or_default(), at),
        "recommended" => Err(problem(
            at,
            "`recommended` is a preset, not a rung: write `preset = \"recommended\"` at the top of the file",
        )),
        other => {
            let hint = did_you_mean(other, ACTIONS.iter().copied())
                .map_or_else(String::new, |s| format!("; did you mean `{s}`?"));
            Err(problem(at, format!("unknown action `{other}`{hint}")))
        }
    }
}

/// The flag of `retry(3, when_safe)`: retried only where a second call cannot apply the
/// call's effect twice (the tool is idempotent, its server `keyed`, or the request never
/// reached the server); another timeout or 5xx is answered as an unknown outcome.
const WHEN_SAFE: &str = "when_safe";

fn retry(args: &[Arg<'_>], at: Range<usize>) -> Result<Action, RungProblem> {
    let mut attempts = None;
    let (mut initial, mut max) = (None, None);
    let mut when_safe = false;
    for arg in args {
        match arg.name.as_ref().map(|(n, at)| (*n, at.clone())) {
            None if arg.value == WHEN_SAFE => when_safe = true,
            Some((WHEN_SAFE, name_at)) => {
                return Err(problem(
                    name_at,
                    "`when_safe` takes no value: write `retry(3, when_safe)`",
                ));
            }
            None | Some(("max_attempts", _)) => attempts = Some(count(arg)?),
            Some(("initial", _)) => initial = duration(arg)?,
            Some(("max", _)) => max = duration(arg)?,
            Some((other, name_at)) => {
                let hint = did_you_mean(other, ["max_attempts", "initial", "max", WHEN_SAFE])
                    .map_or_else(String::new, |s| format!("; did you mean `{s}`?"));
                return Err(problem(
                    name_at,
                    format!("`retry` takes no `{other}`{hint}"),
                ));
            }
        }
    }
    let Some(attempts) = attempts else {
        return Err(problem(
            at,
            "`retry` needs a number of attempts: `retry(3)`",
        ));
    };
    let Action::Retry(retry) = Action::retry(attempts).map_err(|_| {
        problem(
            at.clone(),
            "`retry(0)` makes no call: the count includes the first, so 1 or more",
        )
    })?
    else {
        unreachable!("Action::retry builds a retry")
    };
    Ok(Action::Retry(RetryAction {
        initial,
        max,
        when_safe,
        ..retry
    }))
}

fn fallback(args: &[Arg<'_>], at: Range<usize>) -> Result<Action, RungProblem> {
    match args {
        [
            Arg {
                name: None | Some(("tool", _)),
                value,
                ..
            },
        ] if !value.is_empty() => Ok(Action::fallback(value.to_string())),
        _ => Err(problem(
            at,
            "`fallback` names the tool to call instead: `fallback(tool = \"name\")`",
        )),
    }
}

fn fix(args: &[Arg<'_>], at: Range<usize>) -> Result<Action, RungProblem> {
    match args {
        [
            Arg {
                name: Some(("agent", name_at)),
                ..
            },
            ..,
        ] => Err(problem(
            name_at.clone(),
            "a proxy has no fixer agents of its own: use `fix(builtin)`, the repair that needs no model",
        )),
        _ => Err(problem(at, "`fix` takes `builtin`: `fix(builtin)`")),
    }
}

fn count(arg: &Arg<'_>) -> Result<u32, RungProblem> {
    arg.value.parse().map_err(|_| {
        problem(
            arg.at.clone(),
            format!("expected a whole number, found `{}`", arg.value),
        )
    })
}

fn duration(arg: &Arg<'_>) -> Result<Option<Duration>, RungProblem> {
    parse_duration(arg.value).map(Some).ok_or_else(|| {
        problem(
            arg.at.clone(),
            format!("bad duration `{}`: {DURATION_FORMAT}", arg.value),
        )
    })
}

/// How a duration is written, for the messages that refuse one.
pub(crate) const DURATION_FORMAT: &str =
    "a number and a unit, such as \"250ms\", \"10s\", \"2m\" or \"1h\"";

/// A duration as the DSL writes it: whole digits and a unit (`ms`, `s`, `m`, `h`).
pub(crate) fn parse_duration(text: &str) -> Option<Duration> {
    let unit_at = text.find(|c: char| !c.is_ascii_digit())?;
    let (number, unit) = text.split_at(unit_at);
    let number: u64 = number.parse().ok()?;
    let millis = match unit {
        "ms" => number,
        "s" => number.checked_mul(1_000)?,
        "m" => number.checked_mul(60_000)?,
        "h" => number.checked_mul(3_600_000)?,
        _ => return None,
    };
    Some(Duration::from_millis(millis))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_action_the_file_may_name() {
        let read = |text| parse_rung(text).map(|a| a.to_string());
        assert_eq!(read("retry(3)").as_deref(), Ok("retry(3)"));
        assert_eq!(
            read("retry(3, when_safe)").as_deref(),
            Ok("retry(3, when_safe)")
        );
        assert_eq!(
            read("retry(when_safe, max_attempts = 2, initial = '1s')").as_deref(),
            Ok("retry(max_attempts = 2, initial = \"1s\", when_safe)")
        );
        assert_eq!(
            read("retry(max_attempts = 4, initial = \"250ms\", max = '10s')").as_deref(),
            Ok("retry(max_attempts = 4, initial = \"250ms\", max = \"10s\")")
        );
        assert_eq!(
            read(" fallback(tool = \"cache\") ").as_deref(),
            Ok("fallback(tool = \"cache\")")
        );
        for bare in ["escalate", "throw", "degrade", "ask_person"] {
            assert_eq!(read(bare).as_deref(), Ok(bare));
        }
    }

    #[test]
    fn says_where_a_rung_is_wrong_and_what_was_meant() {
        let wrong = parse_rung("rerty(3)").unwrap_err();
        assert_eq!(
            (wrong.at, wrong.message.as_str()),
            (0..5, "unknown action `rerty`; did you mean `retry`?")
        );
        assert_eq!(parse_rung("retry(0)").unwrap_err().at, 0..5);
        let bad = parse_rung("retry(3, initial = \"soon\")").unwrap_err();
        assert_eq!(bad.at, 9..25);
        assert!(bad.message.starts_with("bad duration `soon`"));
        assert_eq!(
            parse_rung("retry(3").unwrap_err().message,
            "`(` is not closed"
        );
        assert_eq!(
            parse_rung("escalate(1)").unwrap_err().message,
            "`escalate` takes no arguments"
        );
        assert_eq!(
            parse_rung("retry(3) x").unwrap_err().message,
            "nothing may follow `)`"
        );
        assert!(
            parse_rung("fix(agent = \"x\")")
                .unwrap_err()
                .message
                .contains("fix(builtin)")
        );
        assert!(parse_rung(&"x".repeat(MAX_RUNG_CHARS + 1)).is_err());
        let valued = parse_rung("retry(3, when_safe = true)").unwrap_err();
        assert_eq!(
            (valued.at, valued.message.as_str()),
            (
                9..18,
                "`when_safe` takes no value: write `retry(3, when_safe)`"
            )
        );
        assert_eq!(
            parse_rung("retry(when_safe)").unwrap_err().message,
            "`retry` needs a number of attempts: `retry(3)`"
        );
        assert_eq!(
            parse_rung("retry(3) ; drop").unwrap_err().message,
            "unexpected `;`"
        );
    }

    #[test]
    fn durations_are_whole_numbers_with_a_unit() {
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("10"), None);
        assert_eq!(parse_duration("ms"), None);
        assert_eq!(parse_duration("99999999999999999999h"), None);
    }
}
