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
                    "unknown key `{name}`, expected one of: {}",
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

/// One action of a ladder, with the identifier that named it.
#[derive(Debug, Clone)]
pub(crate) struct ActionNode {
    pub(crate) name: Ident,
    pub(crate) kind: ActionKind,
}

#[derive(Debug, Clone)]
pub(crate) enum ActionKind {
    Retry {
        max_attempts: Count,
        initial: Option<DurationLit>,
        max: Option<DurationLit>,
    },
    Fix {
        agent: LitStr,
        retries: Option<Count>,
    },
    Escalate,
    Throw,
    Fallback {
        tool: LitStr,
    },
    Degrade,
}

impl ActionKind {
    /// Whether nothing may follow this action in a ladder.
    pub(crate) fn is_terminal(&self) -> bool {
        matches!(
            self,
            ActionKind::Escalate | ActionKind::Throw | ActionKind::Degrade
        )
    }
}

const ACTIONS: [&str; 6] = ["retry", "fix", "escalate", "throw", "fallback", "degrade"];

impl Parse for ActionNode {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        if input.peek(token::Bracket) {
            return Err(
                input.error("a ladder can't hold another ladder: list the actions in one `[...]`")
            );
        }
        let name = any_ident(input, "an action such as `retry(3)` or `escalate`")?;
        let parens = if input.peek(token::Paren) {
            let content;
            let parens = syn::parenthesized!(content in input);
            Some((parens, content))
        } else {
            None
        };
        let needs_arguments = |usage: &str| {
            syn::Error::new(
                name.span(),
                format_args!("`{}` needs {usage}", name.unraw()),
            )
        };
        let kind = match name.unraw().to_string().as_str() {
            "retry" => match parens {
                Some((_, content)) => parse_retry(&name, &content)?,
                None => {
                    return Err(needs_arguments(
                        "a count: `retry(3)` or `retry(max_attempts = 3, initial = \"250ms\", max = \"10s\")`",
                    ));
                }
            },
            "fix" => match parens {
                Some((_, content)) => parse_fix(&name, &content)?,
                None => return Err(needs_arguments("a fixer: `fix(agent = \"name\")`")),
            },
            "fallback" => match parens {
                Some((_, content)) => parse_fallback(&name, &content)?,
                None => return Err(needs_arguments("a tool: `fallback(tool = \"name\")`")),
            },
            bare @ ("escalate" | "throw" | "degrade") => {
                if let Some((parens, _content)) = parens {
                    return Err(syn::Error::new(
                        parens.span.join(),
                        format_args!("`{bare}` takes no arguments: write `{bare}`"),
                    ));
                }
                match bare {
                    "escalate" => ActionKind::Escalate,
                    "throw" => ActionKind::Throw,
                    _ => ActionKind::Degrade,
                }
            }
            other => {
                return Err(syn::Error::new(
                    name.span(),
                    format_args!(
                        "unknown action `{other}`, expected one of: {}, or a ladder `[...]`",
                        quoted_list(ACTIONS)
                    ),
                ));
            }
        };
        Ok(ActionNode { name, kind })
    }
}

/// One argument inside `retry(...)`.
enum RetryArg {
    Count(Count),
    MaxAttempts(Named<Count>),
    Initial(Named<DurationLit>),
    Max(Named<DurationLit>),
}

impl Parse for RetryArg {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        if !(input.peek(Ident::peek_any) && input.peek2(Token![=])) {
            return input.parse().map(RetryArg::Count);
        }
        let (ident, name) = arg_name(input, &["max_attempts", "initial", "max"], "`retry`")?;
        Ok(match name {
            "max_attempts" => RetryArg::MaxAttempts(Named::parse_after(ident, input)?),
            "initial" => RetryArg::Initial(Named::parse_after(ident, input)?),
            _ => RetryArg::Max(Named::parse_after(ident, input)?),
        })
    }
}

fn parse_retry(name: &Ident, content: ParseStream<'_>) -> syn::Result<ActionKind> {
    let cx = Ctxt::new();
    let mut max_attempts = SetOnce::new("argument");
    let mut initial = SetOnce::new("argument");
    let mut max = SetOnce::new("argument");
    for arg in parse_list(content, &cx, RetryArg::parse) {
        match arg {
            RetryArg::Count(count) => {
                let lit = count.lit.clone();
                max_attempts.set(&cx, lit, "max_attempts", count);
            }
            RetryArg::MaxAttempts(arg) => arg.set_in(&mut max_attempts, &cx),
            RetryArg::Initial(arg) => arg.set_in(&mut initial, &cx),
            RetryArg::Max(arg) => arg.set_in(&mut max, &cx),
        }
    }
    let max_attempts = max_attempts.get();
    match &max_attempts {
        Some(count) if count.value == 0 => cx.error_spanned_by(
            &count.lit,
            "`retry` needs at least 1 attempt: the count includes the first call",
        ),
        Some(_) => {}
        None if !cx.has_errors() => cx.error_spanned_by(
            name,
            "`retry` needs a count: `retry(3)` or `max_attempts = 3`",
        ),
        None => {}
    }
    let (initial, max) = (initial.get(), max.get());
    cx.check()?;
    Ok(ActionKind::Retry {
        max_attempts: max_attempts.expect("a missing count was reported above"),
        initial,
        max,
    })
}

/// One argument inside `fix(...)`.
enum FixArg {
    Agent(Named<NameStr>),
    Retries(Named<Count>),
}

impl Parse for FixArg {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let (ident, name) = arg_name(input, &["agent", "retries"], "`fix`")?;
        Ok(match name {
            "agent" => FixArg::Agent(Named::parse_after(ident, input)?),
            _ => FixArg::Retries(Named::parse_after(ident, input)?),
        })
    }
}

fn parse_fix(name: &Ident, content: ParseStream<'_>) -> syn::Result<ActionKind> {
    let cx = Ctxt::new();
    let mut agent = SetOnce::new("argument");
    let mut retries = SetOnce::new("argument");
    for arg in parse_list(content, &cx, FixArg::parse) {
        match arg {
            FixArg::Agent(arg) => arg.set_in(&mut agent, &cx),
            FixArg::Retries(arg) => {
                if arg.value.value == 0 {
                    cx.error_spanned_by(
                        &arg.value.lit,
                        "`retries` must be at least 1: it is how many times the fixer is asked",
                    );
                }
                arg.set_in(&mut retries, &cx);
            }
        }
    }
    let agent = agent.get();
    if agent.is_none() && !cx.has_errors() {
        cx.error_spanned_by(
            name,
            "`fix` needs `agent = \"name\"`: the name of a `#[fixer]`",
        );
    }
    let retries = retries.get();
    cx.check()?;
    Ok(ActionKind::Fix {
        agent: agent.expect("a missing agent was reported above").0,
        retries,
    })
}

fn parse_fallback(name: &Ident, content: ParseStream<'_>) -> syn::Result<ActionKind> {
    let cx = Ctxt::new();
    let mut tool = SetOnce::new("argument");
    let args = parse_list(content, &cx, |input| {
        let (ident, _) = arg_name(input, &["tool"], "`fallback`")?;
        Named::<NameStr>::parse_after(ident, input)
    });
    for arg in args {
        arg.set_in(&mut tool, &cx);
    }
    let tool = tool.get();
    if tool.is_none() && !cx.has_errors() {
        cx.error_spanned_by(
            name,
            "`fallback` needs `tool = \"name\"`: the tool to call instead",
        );
    }
    cx.check()?;
    Ok(ActionKind::Fallback {
        tool: tool.expect("a missing tool was reported above").0,
    })
}

/// The value after `key =`: one action, or a ladder `[a, b, c]` tried in order.
#[derive(Debug, Clone)]
pub(crate) struct LadderNode {
    /// The brackets, when written as a list.
    pub(crate) brackets: Option<token::Bracket>,
    pub(crate) actions: Vec<ActionNode>,
}

impl Parse for LadderNode {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        if input.peek(token::Bracket) {
            let content;
            let brackets = bracketed!(content in input);
            let cx = Ctxt::new();
            let actions = parse_list(&content, &cx, ActionNode::parse);
            cx.finish(LadderNode {
                brackets: Some(brackets),
                actions,
            })
        } else {
            Ok(LadderNode {
                brackets: None,
                actions: vec![input.parse()?],
            })
        }
    }
}

impl LadderNode {
    /// Where to point at the whole ladder.
    pub(crate) fn span(&self) -> Span {
        match (&self.brackets, self.actions.first()) {
            (Some(brackets), _) => brackets.span.join(),
            (None, Some(action)) => action.name.span(),
            (None, None) => Span::call_site(),
        }
    }
}

/// `key = ladder`.
#[derive(Debug, Clone)]
pub(crate) struct EntryNode {
    pub(crate) key: KeyNode,
    pub(crate) ladder: LadderNode,
}

/// An entry whose key and ladder are checked apart, so a bad ladder still counts its key as set
/// and a bad key does not hide the ladder's problems.
struct RawEntry {
    key: syn::Result<KeyNode>,
    ladder: syn::Result<LadderNode>,
}

impl Parse for RawEntry {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let ident = any_ident(input, "a key such as `execution`")?;
        if ident == "on_error" && input.peek(token::Paren) {
            return Err(syn::Error::new(
                ident.span(),
                "write the entries without `on_error(...)` here, e.g. `execution = retry(3)`",
            ));
        }
        let key = KeyNode::from_ident(ident);
        if let Err(error) = input.parse::<Token![=]>() {
            return Err(key.err().unwrap_or(error));
        }
        let ladder = input.parse::<LadderNode>();
        Ok(RawEntry { key, ladder })
    }
}

/// `key = ladder, key = ladder, ...`: the inside of `on_error(...)` and `policy!(...)`.
#[derive(Debug, Clone, Default)]
pub(crate) struct PolicyNode {
    /// In the order written, which is the order `Policy::entries` reports.
    pub(crate) entries: Vec<EntryNode>,
}

/// Gathers a policy's entries, each key at most once.
struct PolicyBuilder {
    seen: Vec<SetOnce<()>>,
    entries: Vec<EntryNode>,
}

impl PolicyBuilder {
    fn new() -> Self {
        PolicyBuilder {
            seen: Key::ALL.iter().map(|_| SetOnce::new("key")).collect(),
            entries: Vec::new(),
        }
    }

    fn add(&mut self, raw: RawEntry, cx: &Ctxt) {
        let key = match raw.key {
            Ok(key) => {
                self.seen[key.key as usize].set(cx, &key.ident, key.key.name(), ());
                Some(key)
            }
            Err(error) => {
                cx.push(error);
                None
            }
        };
        match (key, raw.ladder) {
            (Some(key), Ok(ladder)) => self.entries.push(EntryNode { key, ladder }),
            (_, Err(error)) => cx.push(error),
            (None, Ok(_)) => {}
        }
    }

    fn finish(self) -> PolicyNode {
        PolicyNode {
            entries: self.entries,
        }
    }
}

impl Parse for PolicyNode {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let cx = Ctxt::new();
        let mut policy = PolicyBuilder::new();
        for raw in parse_list(input, &cx, RawEntry::parse) {
            policy.add(raw, &cx);
        }
        cx.finish(policy.finish())
    }
}

/// `crate = "path"` where a list allows it, or one of the list's own items.
enum OrCrate<T> {
    Crate(Named<CratePath>),
    Item(T),
}

impl<T> OrCrate<T> {
    fn parse(
        input: ParseStream<'_>,
        item: impl FnOnce(ParseStream<'_>) -> syn::Result<T>,
    ) -> syn::Result<Self> {
        if input.peek(Token![crate]) && input.peek2(Token![=]) {
            let ident = Ident::parse_any(input)?;
            return Named::parse_after(ident, input).map(OrCrate::Crate);
        }
        item(input).map(OrCrate::Item)
    }
}

/// Where the generated code finds the runtime: `crate = "..."`, else `::agent_errors`.
fn crate_path(slot: SetOnce<CratePath>) -> Path {
    slot.get()
        .map_or_else(CratePath::default_path, |CratePath(path)| path)
}

/// Everything inside `policy!(...)`: the entries, and perhaps `crate = "..."`.
pub(crate) struct PolicyArgs {
    pub(crate) krate: Path,
    pub(crate) policy: PolicyNode,
}

impl PolicyArgs {
    pub(crate) fn parse(input: ParseStream<'_>, cx: &Ctxt) -> Self {
        let mut krate = SetOnce::new("argument");
        let mut policy = PolicyBuilder::new();
        for item in parse_list(input, cx, |input| OrCrate::parse(input, RawEntry::parse)) {
            match item {
                OrCrate::Crate(arg) => arg.set_in(&mut krate, cx),
                OrCrate::Item(raw) => policy.add(raw, cx),
            }
        }
        PolicyArgs {
            krate: crate_path(krate),
            policy: policy.finish(),
        }
    }
}

/// `on_error(...)`, which `#[tool]` and `defaults!` share.
fn parse_on_error(input: ParseStream<'_>, ident: &Ident) -> syn::Result<PolicyNode> {
    if !input.peek(token::Paren) {
        return Err(syn::Error::new(
            ident.span(),
            "expected `on_error(key = action, ...)`, e.g. `on_error(execution = retry(3))`",
        ));
    }
    let content;
    syn::parenthesized!(content in input);
    content.parse()
}

/// One argument of `#[tool(...)]`.
enum ToolArg {
    Name(Named<NameStr>),
    Description(Named<LitStr>),
    Optional(Ident),
    Timeout(Named<DurationLit>),
    Breaker(Named<LitStr>),
    OnError(Ident, PolicyNode),
    Crate(Named<CratePath>),
}

impl Parse for ToolArg {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let (ident, name) = arg_name(
            input,
            &[
                "name",
                "description",
                "optional",
                "timeout",
                "breaker",
                "on_error",
                "crate",
            ],
            "`#[tool]`",
        )?;
        Ok(match name {
            "name" => ToolArg::Name(Named::parse_after(ident, input)?),
            "description" => ToolArg::Description(Named::parse_after(ident, input)?),
            "optional" => ToolArg::Optional(ident),
            "timeout" => ToolArg::Timeout(Named::parse_after(ident, input)?),
            "breaker" => {
                let key: Named<LitStr> = Named::parse_after(ident, input)?;
                if key.value.value().trim().is_empty() {
                    return Err(syn::Error::new(
                        key.value.span(),
                        "a breaker key names the upstream a tool depends on: it cannot be empty",
                    ));
                }
                ToolArg::Breaker(key)
            }
            "crate" => ToolArg::Crate(Named::parse_after(ident, input)?),
            _ => {
                let policy = parse_on_error(input, &ident)?;
                ToolArg::OnError(ident, policy)
            }
        })
    }
}

/// Everything inside `#[tool(...)]`.
pub(crate) struct ToolArgs {
    pub(crate) name: Option<LitStr>,
    pub(crate) description: Option<LitStr>,
    pub(crate) optional: bool,
    pub(crate) timeout: Option<DurationLit>,
    pub(crate) breaker: Option<LitStr>,
    pub(crate) on_error: Option<PolicyNode>,
    pub(crate) krate: Path,
}

impl ToolArgs {
    /// What was read, even when some of it was wrong (reported to `cx`).
    pub(crate) fn parse(input: ParseStream<'_>, cx: &Ctxt) -> Self {
        let mut name = SetOnce::new("argument");
        let mut description = SetOnce::new("argument");
        let mut optional = SetOnce::new("argument");
        let mut timeout = SetOnce::new("argument");
        let mut breaker = SetOnce::new("argument");
        let mut on_error = SetOnce::new("argument");
        let mut krate = SetOnce::new("argument");
        for arg in parse_list(input, cx, ToolArg::parse) {
            match arg {
                ToolArg::Name(arg) => arg.set_in(&mut name, cx),
                ToolArg::Description(arg) => arg.set_in(&mut description, cx),
                ToolArg::Optional(ident) => optional.set(cx, &ident, "optional", ()),
                ToolArg::Timeout(arg) => arg.set_in(&mut timeout, cx),
                ToolArg::Breaker(arg) => arg.set_in(&mut breaker, cx),
                ToolArg::OnError(ident, policy) => on_error.set(cx, &ident, "on_error", policy),
                ToolArg::Crate(arg) => arg.set_in(&mut krate, cx),
            }
        }
        ToolArgs {
            name: name.get().map(|NameStr(lit)| lit),
            description: description.get(),
            optional: optional.get().is_some(),
            timeout: timeout.get(),
            breaker: breaker.get(),
            on_error: on_error.get(),
            krate: crate_path(krate),
        }
    }
}

/// Everything inside `#[fixer(...)]`.
pub(crate) struct FixerArgs {
    pub(crate) name: Option<LitStr>,
    pub(crate) krate: Path,
}

impl FixerArgs {
    /// What was read, even when some of it was wrong (reported to `cx`).
    pub(crate) fn parse(input: ParseStream<'_>, cx: &Ctxt) -> Self {
        let mut name = SetOnce::new("argument");
        let mut krate = SetOnce::new("argument");
        let args = parse_list(input, cx, |input| {
            let (ident, which) = arg_name(input, &["name", "crate"], "`#[fixer]`")?;
            Ok(match which {
                "name" => OrCrate::Item(Named::<NameStr>::parse_after(ident, input)?),
                _ => OrCrate::Crate(Named::parse_after(ident, input)?),
            })
        });
        for arg in args {
            match arg {
                OrCrate::Item(arg) => arg.set_in(&mut name, cx),
                OrCrate::Crate(arg) => arg.set_in(&mut krate, cx),
            }
        }
        FixerArgs {
            name: name.get().map(|NameStr(lit)| lit),
            krate: crate_path(krate),
        }
    }
}

/// Everything inside `defaults!(...)`.
pub(crate) struct DefaultsArgs {
    pub(crate) on_error: PolicyNode,
    pub(crate) krate: Path,
}

impl DefaultsArgs {
    /// What was read, even when some of it was wrong (reported to `cx`).
    pub(crate) fn parse(input: ParseStream<'_>, cx: &Ctxt) -> Self {
        if input.is_empty() {
            cx.push(input.error(
                "`defaults!` needs `on_error(...)`, e.g. `defaults!(on_error(execution = retry(3)))`",
            ));
        }
        let mut on_error = SetOnce::new("argument");
        let mut krate = SetOnce::new("argument");
        let args = parse_list(input, cx, |input| {
            let (ident, which) = arg_name(input, &["on_error", "crate"], "`defaults!`")?;
            Ok(match which {
                "on_error" => {
                    let policy = parse_on_error(input, &ident)?;
                    OrCrate::Item((ident, policy))
                }
                _ => OrCrate::Crate(Named::parse_after(ident, input)?),
            })
        });
        for arg in args {
            match arg {
                OrCrate::Item((ident, policy)) => on_error.set(cx, &ident, "on_error", policy),
                OrCrate::Crate(arg) => arg.set_in(&mut krate, cx),
            }
        }
        DefaultsArgs {
            on_error: on_error.get().unwrap_or_default(),
            krate: crate_path(krate),
        }
    }
}

/// Everything inside `tools![...]` or `fixers![...]`: paths, and perhaps `crate = "..."`.
pub(crate) struct ListArgs {
    pub(crate) paths: Vec<Path>,
    pub(crate) krate: Path,
}

impl ListArgs {
    /// What was read, even when some of it was wrong (reported to `cx`).
    pub(crate) fn parse(input: ParseStream<'_>, cx: &Ctxt) -> Self {
        let mut krate = SetOnce::new("argument");
        let mut paths = Vec::new();
        for item in parse_list(input, cx, |input| {
            OrCrate::parse(input, Path::parse_mod_style)
        }) {
            match item {
                OrCrate::Crate(arg) => arg.set_in(&mut krate, cx),
                OrCrate::Item(path) => paths.push(path),
            }
        }
        ListArgs {
            paths,
            krate: crate_path(krate),
        }
    }
}

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
