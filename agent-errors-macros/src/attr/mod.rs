//! The DSL as a typed model: one type per node, each keeping the tokens it came from so errors
//! can point at them. Grammar and single-value problems are found here; rules that span several
//! nodes live in `valid.rs`.

use proc_macro2::Span;
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::{
    Expr, ExprLit, ExprUnary, Ident, Lit, LitInt, LitStr, Path, Token, UnOp, bracketed, token,
};

use crate::ctxt::{Ctxt, SetOnce, parse_list};

/// Declares [`Key`] from one table, so its variants, `ALL` and the names cannot disagree. The
/// runtime's `PolicyKey` mirrors this list; a test in the `tests` package fails when they drift.
macro_rules! keys {
    (
        classes { $($class:ident => $class_name:literal,)* }
        kinds { $($kind:ident => $kind_name:literal,)* }
    ) => {
        /// A policy key: a failure class, or an error kind named after the runtime's `ErrorKind`
        /// variant of the same name.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub(crate) enum Key {
            $($class,)*
            $($kind,)*
        }

        impl Key {
            /// Every key, in the order `PolicyKey::all` lists them.
            pub(crate) const ALL: &'static [Key] = &[$(Key::$class,)* $(Key::$kind,)*];

            /// The key as written in a policy.
            pub(crate) fn name(self) -> &'static str {
                match self {
                    $(Key::$class => $class_name,)*
                    $(Key::$kind => $kind_name,)*
                }
            }

            /// The `ErrorKind` variant this key refines `execution` with; `None` for a class.
            pub(crate) fn error_kind(self) -> Option<&'static str> {
                match self {
                    $(Key::$class => None,)*
                    $(Key::$kind => Some(stringify!($kind)),)*
                }
            }
        }
    };
}

keys! {
    classes {
        InvalidArgs => "invalid_args",
        Execution => "execution",
    }
    kinds {
        Transient => "transient",
        Timeout => "timeout",
        Quota => "quota",
        ServerError => "server_error",
        Auth => "auth",
        NotFound => "not_found",
        Validation => "validation",
        Bug => "bug",
        Unknown => "unknown",
        OutcomeUnknown => "outcome_unknown",
    }
}

impl Key {
    /// Whether `retry` can ever act on failures under this key: the runtime retries only
    /// transient, timeout, quota and server errors, and `execution` may hold any of them.
    pub(crate) fn can_retry(self) -> bool {
        matches!(
            self,
            Key::Execution | Key::Transient | Key::Timeout | Key::Quota | Key::ServerError
        )
    }
}

/// Names as "`a`, `b`, `c`", for "expected one of" messages.
fn quoted_list(names: impl IntoIterator<Item = &'static str>) -> String {
    names
        .into_iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// An identifier, including keywords, so `fn = ...` gets "unknown key `fn`", not a syntax error.
fn any_ident(input: ParseStream<'_>, expected: &str) -> syn::Result<Ident> {
    if input.peek(Ident::peek_any) {
        Ident::parse_any(input)
    } else {
        Err(input.error(format_args!("expected {expected}")))
    }
}

/// The name that opens one argument of a list, when it is one of `allowed`; else "unknown
/// argument `name` for `context`, expected one of: ...".
fn arg_name(
    input: ParseStream<'_>,
    allowed: &[&'static str],
    context: &str,
) -> syn::Result<(Ident, &'static str)> {
    let expected = match allowed {
        [one] => format!("`{one}`"),
        many => format!("one of: {}", quoted_list(many.iter().copied())),
    };
    let ident = any_ident(input, &expected)?;
    let name = ident.unraw().to_string();
    match allowed.iter().find(|a| **a == name) {
        Some(found) => Ok((ident, found)),
        None => Err(syn::Error::new(
            ident.span(),
            format_args!("unknown argument `{name}` for {context}, expected {expected}"),
        )),
    }
}

/// `name = value`. Every named argument of the DSL reads its `= value` here; the value's type
/// says what may follow.
#[derive(Debug, Clone)]
pub(crate) struct Named<V> {
    pub(crate) name: Ident,
    pub(crate) value: V,
}

/// What may follow `name =`. `name` is the argument as written, for the messages.
pub(crate) trait ArgValue: Sized {
    fn parse_value(input: ParseStream<'_>, name: &Ident) -> syn::Result<Self>;
}

impl<V: ArgValue> Named<V> {
    /// Reads `= value` after `name`.
    fn parse_after(name: Ident, input: ParseStream<'_>) -> syn::Result<Self> {
        input.parse::<Token![=]>()?;
        let value = V::parse_value(input, &name)?;
        Ok(Named { name, value })
    }

    /// Records the argument in `slot`; a second one is reported on its name.
    fn set_in(self, slot: &mut SetOnce<V>, cx: &Ctxt) {
        let name = self.name.unraw().to_string();
        slot.set(cx, &self.name, &name, self.value);
    }
}

/// A string that names something (a tool, a fixer): non-empty.
#[derive(Debug, Clone)]
pub(crate) struct NameStr(pub(crate) LitStr);

impl ArgValue for NameStr {
    fn parse_value(input: ParseStream<'_>, name: &Ident) -> syn::Result<Self> {
        if !input.peek(LitStr) {
            let example = match name.unraw().to_string().as_str() {
                "agent" => "json_fixer",
                "tool" => "cached_fetch",
                _ => "search",
            };
            return Err(input.error(format_args!(
                "expected a string, e.g. `{} = \"{example}\"`",
                name.unraw()
            )));
        }
        let lit: LitStr = input.parse()?;
        if lit.value().trim().is_empty() {
            return Err(syn::Error::new(lit.span(), "expected a non-empty name"));
        }
        Ok(NameStr(lit))
    }
}

/// Any string, such as a description.
impl ArgValue for LitStr {
    fn parse_value(input: ParseStream<'_>, name: &Ident) -> syn::Result<Self> {
        if !input.peek(LitStr) {
            return Err(input.error(format_args!(
                "expected a string, e.g. `{} = \"...\"`",
                name.unraw()
            )));
        }
        input.parse()
    }
}

impl ArgValue for Count {
    fn parse_value(input: ParseStream<'_>, _: &Ident) -> syn::Result<Self> {
        input.parse()
    }
}

impl ArgValue for DurationLit {
    fn parse_value(input: ParseStream<'_>, _: &Ident) -> syn::Result<Self> {
        input.parse()
    }
}

/// `crate = "path"`: where the generated code finds the agent-errors crate, for a crate that
/// renamed it or reaches it through a re-export.
#[derive(Debug, Clone)]
pub(crate) struct CratePath(pub(crate) Path);

impl CratePath {
    /// `::agent_errors`.
    pub(crate) fn default_path() -> Path {
        syn::parse_quote!(::agent_errors)
    }
}

const CRATE_PATH_EXAMPLE: &str =
    "such as `crate = \"::agent_errors\"` or `crate = \"my_crate::agent_errors\"`";

impl ArgValue for CratePath {
    fn parse_value(input: ParseStream<'_>, _: &Ident) -> syn::Result<Self> {
        if !input.peek(LitStr) {
            return Err(input.error(format_args!(
                "expected the path to agent-errors as a string, {CRATE_PATH_EXAMPLE}"
            )));
        }
        let lit: LitStr = input.parse()?;
        // The path's tokens take the literal's span, so a path that does not resolve is
        // reported on the literal.
        match lit.parse_with(Path::parse_mod_style) {
            Ok(path) => Ok(CratePath(path)),
            Err(_) => Err(syn::Error::new(
                lit.span(),
                format_args!(
                    "{:?} is not a path: expected the path to agent-errors, {CRATE_PATH_EXAMPLE}",
                    lit.value()
                ),
            )),
        }
    }
}

/// A key as written, with its identifier to point at.
#[derive(Debug, Clone)]
pub(crate) struct KeyNode {
    pub(crate) key: Key,
    pub(crate) ident: Ident,
}

impl KeyNode {
    fn from_ident(ident: Ident) -> syn::Result<Self> {
        let name = ident.unraw().to_string();
        match Key::ALL.iter().find(|k| k.name() == name) {
            Some(&key) => Ok(KeyNode { key, ident }),
            None => Err(syn::Error::new(
                ident.span(),
                format_args!(
                    "unknown key `{name}`, expected one of: {}, or `run_breaker`",
                    quoted_list(Key::ALL.iter().map(|k| k.name()))
                ),
            )),
        }
    }
}

/// A count of calls: a positive integer literal.
#[derive(Debug, Clone)]
pub(crate) struct Count {
    pub(crate) value: u32,
    pub(crate) lit: LitInt,
}

impl Parse for Count {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let expr: Expr = input.parse()?;
        match &expr {
            Expr::Lit(ExprLit {
                lit: Lit::Int(lit), ..
            }) => match lit.base10_parse::<u32>() {
                Ok(value) => Ok(Count {
                    value,
                    lit: lit.clone(),
                }),
                Err(_) => Err(syn::Error::new(
                    lit.span(),
                    format_args!("count `{lit}` is too large: expected at most {}", u32::MAX),
                )),
            },
            Expr::Unary(ExprUnary {
                op: UnOp::Neg(_), ..
            }) => Err(syn::Error::new_spanned(
                &expr,
                "expected a positive integer count, found a negative number",
            )),
            Expr::Lit(ExprLit {
                lit: Lit::Str(s), ..
            }) => Err(syn::Error::new(
                s.span(),
                format_args!(
                    "expected an integer count, found a string: write `{}` without quotes",
                    s.value().trim()
                ),
            )),
            Expr::Lit(ExprLit {
                lit: Lit::Float(f), ..
            }) => Err(syn::Error::new(
                f.span(),
                format_args!("expected a whole number, found `{f}`"),
            )),
            _ => Err(syn::Error::new_spanned(
                &expr,
                "expected an integer literal count such as `3`",
            )),
        }
    }
}

/// A duration written as a string: "250ms", "1.5s", "10s", "2m", "1h".
#[derive(Debug, Clone)]
pub(crate) struct DurationLit {
    pub(crate) nanos: u64,
    pub(crate) lit: LitStr,
}

const DURATION_FORMAT: &str = "expected a number and a unit (`ms`, `s`, `m` or `h`), such as \
                               \"250ms\", \"1.5s\", \"10s\" or \"2m\"";

impl Parse for DurationLit {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        if input.peek(LitInt) || input.peek(syn::LitFloat) {
            return Err(
                input.error("expected a duration string with a unit, such as \"250ms\" or \"10s\"")
            );
        }
        if !input.peek(LitStr) {
            return Err(input.error("expected a duration string such as \"250ms\" or \"10s\""));
        }
        let lit: LitStr = input.parse()?;
        match parse_duration(&lit.value()) {
            Ok(0) => Err(syn::Error::new(
                lit.span(),
                "a duration must be greater than zero",
            )),
            Ok(nanos) => Ok(DurationLit { nanos, lit }),
            Err(DurationError::Format) => Err(syn::Error::new(
                lit.span(),
                format_args!("bad duration {:?}: {DURATION_FORMAT}", lit.value()),
            )),
            Err(DurationError::TooLong) => Err(syn::Error::new(
                lit.span(),
                format_args!("duration {:?} is too long", lit.value()),
            )),
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum DurationError {
    Format,
    TooLong,
}

/// Nanoseconds in `text` (`<digits>[.<digits>]<unit>`); digits past nanosecond precision are
/// dropped.
fn parse_duration(text: &str) -> Result<u64, DurationError> {
    let unit_at = text
        .find(|c: char| c.is_ascii_alphabetic())
        .ok_or(DurationError::Format)?;
    let (number, unit) = text.split_at(unit_at);
    let unit_nanos: u128 = match unit {
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60 * 1_000_000_000,
        "h" => 3600 * 1_000_000_000,
        _ => return Err(DurationError::Format),
    };
    let (whole, fraction) = match number.split_once('.') {
        Some((whole, fraction)) => (whole, fraction),
        None => (number, ""),
    };
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty()
        || !all_digits(whole)
        || !all_digits(fraction)
        || (number.contains('.') && fraction.is_empty())
    {
        return Err(DurationError::Format);
    }
    let whole: u128 = whole.parse().map_err(|_| DurationError::TooLong)?;
    let mut nanos = whole
        .checked_mul(unit_nanos)
        .ok_or(DurationError::TooLong)?;
    let mut scale = unit_nanos;
    for digit in fraction.bytes() {
        scale /= 10;
        nanos += u128::from(digit - b'0') * scale;
    }
    u64::try_from(nanos).map_err(|_| DurationError::TooLong)
}

mod args;
mod policy;

pub(crate) use args::*;
pub(crate) use policy::*;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_in_every_unit() {
        assert_eq!(parse_duration("250ms"), Ok(250_000_000));
        assert_eq!(parse_duration("1.5s"), Ok(1_500_000_000));
        assert_eq!(parse_duration("10s"), Ok(10_000_000_000));
        assert_eq!(parse_duration("2m"), Ok(120_000_000_000));
        assert_eq!(parse_duration("1h"), Ok(3_600_000_000_000));
        assert_eq!(parse_duration("0.25ms"), Ok(250_000));
        assert_eq!(parse_duration("0s"), Ok(0));
    }

    #[test]
    fn malformed_durations_are_rejected() {
        for bad in [
            "", "ms", "10", "1.s", ".5s", "1..5s", "-1s", "1 s", "1sec", "1d", "1e3ms",
        ] {
            assert_eq!(parse_duration(bad), Err(DurationError::Format), "{bad:?}");
        }
        assert_eq!(parse_duration("99999999999h"), Err(DurationError::TooLong));
    }

    #[test]
    fn an_unknown_key_lists_the_valid_ones() {
        let err = syn::parse_str::<PolicyNode>("exec = retry(3)").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("unknown key `exec`, expected one of: `invalid_args`, `execution`,")
        );
    }

    #[test]
    fn every_error_in_a_policy_is_reported() {
        let err = syn::parse_str::<PolicyNode>(
            "execution = retry(0), auth = explode, execution = escalate",
        )
        .unwrap_err();
        let messages: Vec<String> = err.into_iter().map(|e| e.to_string()).collect();
        assert_eq!(messages.len(), 3, "{messages:?}");
        assert!(messages[0].contains("at least 1 attempt"));
        assert!(messages[1].starts_with("unknown action `explode`"));
        assert!(messages[2].starts_with("`execution` is set twice"));
    }
}
