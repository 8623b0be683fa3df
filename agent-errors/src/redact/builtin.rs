//! The built-in rules: a regex that finds where a credential starts, and a hand-written scan
//! for where its value ends.

use std::sync::LazyLock;

use regex::Regex;

use super::REDACTED;

/// A check on what a rule would replace: `false` leaves it in place.
type Accept = fn(&str) -> bool;

/// Where a value ends: at the first character for which this is true.
type Stop = fn(char) -> bool;

/// What a built-in rule replaces once its regex matched.
///
/// The regexes have no capture groups: a value is scanned by hand from where the match ends,
/// and the next search starts after it. Capture groups over a long value (a header that runs
/// to the end of a megabyte-long line) would cost a slow engine's time over all of it.
#[derive(Clone, Copy)]
enum Take {
    /// The whole match, when the check accepts it.
    Whole(Accept),
    /// The value after the match: up to the first `stop`, trailing blanks trimmed, when it is
    /// not empty and the check accepts it.
    Value(Stop, Accept),
    /// The password of the URL userinfo the match ends with: from the `:` after the user to
    /// the final `@`.
    UrlPassword,
    /// The user of a URL userinfo without a password (`https://TOKEN@host/`), when the check
    /// accepts it: a token used as the user, not a name like `git`.
    UrlUser(Accept),
}

/// A built-in rule: its regex, and what it replaces.
pub(super) struct Builtin {
    regex: Regex,
    take: Take,
}

impl Builtin {
    pub(super) fn spans(&self, text: &str, spans: &mut Vec<(usize, usize)>) {
        let mut at = 0;
        while let Some(m) = self.regex.find_at(text, at) {
            let (span, resume) = match self.take {
                Take::Whole(accept) => {
                    (accept(m.as_str()).then_some((m.start(), m.end())), m.end())
                }
                Take::Value(stop, accept) => {
                    let rest = &text[m.end()..];
                    let mut len = rest.find(stop).unwrap_or(rest.len());
                    if in_url_authority(text, m.start()) {
                        // `https://api-key:VALUE@host/`: the value is a URL's password, and ends
                        // where the userinfo does, not at the next comma.
                        len = rest[..len].find(userinfo_stop).unwrap_or(len);
                    }
                    let value = rest[..len].trim_end_matches([' ', '\t']);
                    if !value.is_empty() && accept(value) {
                        (Some((m.end(), m.end() + value.len())), m.end() + len)
                    } else {
                        (None, m.end())
                    }
                }
                Take::UrlUser(accept) => {
                    let matched = m.as_str();
                    let user = matched.find("://").map_or(0, |at| at + 3);
                    let name = &matched[user..matched.len() - 1];
                    (
                        accept(name).then_some((m.start() + user, m.end() - 1)),
                        m.end(),
                    )
                }
                Take::UrlPassword => {
                    let matched = m.as_str();
                    let user = matched.find("://").map_or(0, |at| at + 3);
                    let span = matched[user..]
                        .find(':')
                        .map(|colon| (m.start() + user + colon + 1, m.end() - 1));
                    (span, m.end())
                }
            };
            if let Some((start, end)) =
                span.filter(|&(start, end)| start < end && &text[start..end] != REDACTED)
            {
                spans.push((start, end));
            }
            // Built-in matches are never empty, so this always moves on.
            at = resume.max(m.end());
            if m.is_empty() {
                at += text[at..].chars().next().map_or(1, char::len_utf8);
            }
            if at > text.len() {
                break;
            }
        }
    }
}

/// How far back [`in_url_authority`] looks for a `://`: a userinfo longer than this is not
/// recognised, and the look back costs a constant per match.
const MAX_USERINFO_LOOKBACK: usize = 256;

/// Whether `at` is in the userinfo of a URL: after a `://` with no whitespace, `/`, `?`, `#` or
/// `@` between.
fn in_url_authority(text: &str, at: usize) -> bool {
    let from = at.saturating_sub(MAX_USERINFO_LOOKBACK);
    let before = &text.as_bytes()[from..at];
    let boundary = before
        .iter()
        .rposition(|&b| b.is_ascii_whitespace() || matches!(b, b'/' | b'?' | b'#' | b'@'));
    boundary.is_some_and(|end| before[..=end].ends_with(b"://"))
}

/// A URL's userinfo ends at its `@`, or where the authority does.
fn userinfo_stop(c: char) -> bool {
    c.is_whitespace() || matches!(c, '@' | '/' | '?' | '#')
}

fn any(_: &str) -> bool {
    true
}

/// A bearer or basic credential rather than a word: 8 characters or more, with a digit, a
/// symbol, or a capital after the first letter.
fn looks_like_credential(value: &str) -> bool {
    value.len() >= 8
        && value
            .char_indices()
            .any(|(at, c)| !c.is_ascii_alphabetic() || (at > 0 && c.is_ascii_uppercase()))
}

/// A bearer credential: [`looks_like_credential`], or a run of letters longer than the words
/// that follow "bearer" in prose ("bearer token missing"), which a lowercase token can be.
fn looks_like_bearer_credential(value: &str) -> bool {
    looks_like_credential(value) || value.len() >= MIN_LETTER_TOKEN_CHARS
}

/// The shortest run of letters alone taken for a token after `bearer`.
const MIN_LETTER_TOKEN_CHARS: usize = 16;

/// A token used as a URL's user: long, with letters and digits, which user names like `git`,
/// `app` or `firstname.lastname` are not.
fn looks_like_user_token(user: &str) -> bool {
    user.len() >= MIN_USER_TOKEN_CHARS
        && user.bytes().any(|b| b.is_ascii_digit())
        && user.bytes().any(|b| b.is_ascii_alphabetic())
}

/// The shortest URL user taken for a token.
const MIN_USER_TOKEN_CHARS: usize = 16;

/// A key after its prefix: at least one digit or capital.
fn has_digit_or_capital(value: &str) -> bool {
    value
        .bytes()
        .any(|b| b.is_ascii_digit() || b.is_ascii_uppercase())
}

/// A parameter's value stops at whitespace, quotes and separators.
fn param_stop(c: char) -> bool {
    c.is_whitespace()
        || matches!(
            c,
            '&' | '"' | '\'' | '`' | ',' | ';' | '<' | '>' | ')' | '}'
        )
}

/// A header's value runs to the end of the line, a quote or a separator.
fn header_stop(c: char) -> bool {
    matches!(c, '\r' | '\n' | '"' | '\'' | '`' | ',' | ';' | ')' | '}')
}

/// A cookie runs past `;` and `,`, to the end of the line or a quote.
fn cookie_stop(c: char) -> bool {
    matches!(c, '\r' | '\n' | '"' | '\'' | '`')
}

/// A bearer or basic credential: token68 characters.
fn credential_stop(c: char) -> bool {
    !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '~' | '+' | '/' | '=' | ':' | '-'))
}

/// A JSON string's value ends at its closing quote.
fn json_string_stop(c: char) -> bool {
    matches!(c, '"' | '\r' | '\n')
}

/// Names whose value is a secret whether written `name=value` or `name: value`.
const STRONG_NAMES: &str = r"api[_-]?key|access[_-]?token|refresh[_-]?token|id[_-]?token|auth[_-]?token|session[_-]?token|client[_-]?secret|aws[_-]?secret[_-]?access[_-]?key|private[_-]?key|x-amz-signature|x-amz-credential|x-amz-security-token|secret|password|passwd";

/// Names that are also ordinary words: a secret only as `name=value` or a quoted JSON key.
const WEAK_NAMES: &str = r"token|key|sig|signature|auth|pwd";

/// The header names whose value is a credential.
const HEADERS: &str =
    r"proxy-authorization|authorization|x-api-key|api-key|x-auth-token|set-cookie|cookie";

pub(super) static BUILTIN: LazyLock<Vec<Builtin>> = LazyLock::new(|| {
    let rules: [(String, Take); 16] = [
        // PEM private keys, to their END line or the end of the text.
        (
            r"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY-----(?s:.*?)(?:-----END[A-Z0-9 ]{0,40}PRIVATE KEY-----|\z)".into(),
            Take::Whole(any),
        ),
        // The password of a URL's userinfo.
        (
            r"(?i)(?-u:\b)[a-z][a-z0-9+.-]{0,30}://[^\x00-\x20/?#@:]*:[^\x00-\x20/?#]+@".into(),
            Take::UrlPassword,
        ),
        // A token as a URL's user, with no password.
        (
            r"(?i)(?-u:\b)[a-z][a-z0-9+.-]{0,30}://[^\x00-\x20/?#@:]+@".into(),
            Take::UrlUser(looks_like_user_token),
        ),
        // Header pairs, `name: value`, the scheme kept: `Authorization: Bearer [REDACTED]`.
        // (`api-key=...` is a parameter, below.)
        (
            format!(
                r#"(?i)(?-u:\b)(?:{HEADERS})["']?[ \t]*:[ \t]*["']?(?:(?:bearer|basic|digest|token)[ \t]+)?"#
            ),
            Take::Value(header_stop, any),
        ),
        (
            r#"(?i)(?-u:\b)(?:set-cookie|cookie)["']?[ \t]*:[ \t]*["']?"#.into(),
            Take::Value(cookie_stop, any),
        ),
        // Bearer and basic credentials wherever they appear.
        // No word boundary before the scheme: text glued to it (`errorBearer x`, where an
        // escape sequence was between them) does not make the credential a word's tail.
        (
            r"(?i)bearer[ \t]+".into(),
            Take::Value(credential_stop, looks_like_bearer_credential),
        ),
        (
            r"(?i)basic[ \t]+".into(),
            Take::Value(credential_stop, looks_like_credential),
        ),
        // Parameters.
        (
            format!(r#"(?i)(?-u:\b)(?:{STRONG_NAMES})["']?[ \t]*[=:][ \t]*["']?"#),
            Take::Value(param_stop, any),
        ),
        (
            format!(r#"(?i)(?-u:\b)(?:{WEAK_NAMES})["']?[ \t]*=[ \t]*["']?"#),
            Take::Value(param_stop, any),
        ),
        (
            r#"(?i)"(?:token|sig|signature|auth|pwd)"[ \t]*:[ \t]*""#.into(),
            Take::Value(json_string_stop, any),
        ),
        // Key shapes.
        (
            r"(?-u:\b)sk-(?:proj-|ant-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}".into(),
            Take::Whole(has_digit_or_capital),
        ),
        (
            r"(?-u:\b)(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}".into(),
            Take::Whole(any),
        ),
        (
            r"(?-u:\b)(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}(?-u:\b)".into(),
            Take::Whole(any),
        ),
        (
            r"(?-u:\b)(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})".into(),
            Take::Whole(any),
        ),
        (
            r"(?-u:\b)(?:xox[abprse]-[A-Za-z0-9-]{10,}|AIza[0-9A-Za-z_-]{35})".into(),
            Take::Whole(any),
        ),
        (
            r"(?-u:\b)eyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*".into(),
            Take::Whole(any),
        ),
    ];
    rules
        .into_iter()
        .map(|(pattern, take)| Builtin {
            regex: Regex::new(&pattern)
                .expect("built-in patterns are constants covered by the tests"),
            take,
        })
        .collect()
});
