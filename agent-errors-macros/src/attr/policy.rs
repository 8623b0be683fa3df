//! The policy grammar: actions, ladders and `key = ladder` entries.

use super::*;

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
        /// `when_safe`: retried only where a second call cannot apply the effect twice.
        when_safe: bool,
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
    AskPerson,
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

pub(crate) const ACTIONS: [&str; 7] = [
    "retry",
    "fix",
    "escalate",
    "throw",
    "fallback",
    "degrade",
    "ask_person",
];

/// `name`, one of [`ACTIONS`], written with the least it needs: what the hidden list of every
/// action (`__policy_actions!`) parses, so each entry is read by the parser a policy's is.
pub(crate) fn written_action(name: &'static str) -> &'static str {
    match name {
        "retry" => "retry(2)",
        "fix" => "fix(agent = \"fixer\")",
        "fallback" => "fallback(tool = \"other\")",
        bare => bare,
    }
}

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
            bare @ ("escalate" | "throw" | "degrade" | "ask_person") => {
                if let Some((parens, _content)) = parens {
                    return Err(syn::Error::new(
                        parens.span.join(),
                        format_args!("`{bare}` takes no arguments: write `{bare}`"),
                    ));
                }
                match bare {
                    "escalate" => ActionKind::Escalate,
                    "throw" => ActionKind::Throw,
                    "degrade" => ActionKind::Degrade,
                    _ => ActionKind::AskPerson,
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
pub(super) enum RetryArg {
    Count(Count),
    MaxAttempts(Named<Count>),
    Initial(Named<DurationLit>),
    Max(Named<DurationLit>),
    WhenSafe(Ident),
}

/// The flag of `retry(3, when_safe)`.
const WHEN_SAFE: &str = "when_safe";

impl Parse for RetryArg {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let fork = input.fork();
        if let Ok(ident) = fork.call(Ident::parse_any) {
            if ident == WHEN_SAFE {
                input.parse::<Ident>()?;
                if input.peek(Token![=]) {
                    return Err(syn::Error::new(
                        ident.span(),
                        "`when_safe` takes no value: write `retry(3, when_safe)`",
                    ));
                }
                return Ok(RetryArg::WhenSafe(ident));
            }
        }
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

pub(super) fn parse_retry(name: &Ident, content: ParseStream<'_>) -> syn::Result<ActionKind> {
    let cx = Ctxt::new();
    let mut max_attempts = SetOnce::new("argument");
    let mut initial = SetOnce::new("argument");
    let mut max = SetOnce::new("argument");
    let mut when_safe = SetOnce::new("argument");
    for arg in parse_list(content, &cx, RetryArg::parse) {
        match arg {
            RetryArg::Count(count) => {
                let lit = count.lit.clone();
                max_attempts.set(&cx, lit, "max_attempts", count);
            }
            RetryArg::MaxAttempts(arg) => arg.set_in(&mut max_attempts, &cx),
            RetryArg::Initial(arg) => arg.set_in(&mut initial, &cx),
            RetryArg::Max(arg) => arg.set_in(&mut max, &cx),
            RetryArg::WhenSafe(ident) => when_safe.set(&cx, &ident, WHEN_SAFE, ()),
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
    let when_safe = when_safe.get().is_some();
    cx.check()?;
    Ok(ActionKind::Retry {
        max_attempts: max_attempts.expect("a missing count was reported above"),
        initial,
        max,
        when_safe,
    })
}

/// One argument inside `fix(...)`.
pub(super) enum FixArg {
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

pub(super) fn parse_fix(name: &Ident, content: ParseStream<'_>) -> syn::Result<ActionKind> {
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

pub(super) fn parse_fallback(name: &Ident, content: ParseStream<'_>) -> syn::Result<ActionKind> {
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
/// and a bad key does not hide the ladder's problems; or the per-run breaker's rule.
pub(super) enum RawEntry {
    Ladder {
        key: syn::Result<KeyNode>,
        ladder: syn::Result<LadderNode>,
    },
    RunBreaker {
        ident: Ident,
        rule: syn::Result<RunBreakerNode>,
    },
    /// `recommended`: the recommended preset below the entries written.
    Recommended(Ident),
}

/// The entry that asks for the recommended preset.
pub(super) const RECOMMENDED: &str = "recommended";

impl Parse for RawEntry {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let ident = any_ident(input, "a key such as `execution`")?;
        if ident == "on_error" && input.peek(token::Paren) {
            return Err(syn::Error::new(
                ident.span(),
                "write the entries without `on_error(...)` here, e.g. `execution = retry(3)`",
            ));
        }
        if ident == RECOMMENDED {
            if input.peek(Token![=]) {
                return Err(syn::Error::new(
                    ident.span(),
                    "`recommended` takes no value: write `recommended` among the entries, and \
                     entries of your own after it to change its keys",
                ));
            }
            return Ok(RawEntry::Recommended(ident));
        }
        if ident == RUN_BREAKER {
            input.parse::<Token![=]>()?;
            let rule = input.parse::<RunBreakerNode>();
            return Ok(RawEntry::RunBreaker { ident, rule });
        }
        let key = KeyNode::from_ident(ident);
        if let Err(error) = input.parse::<Token![=]>() {
            return Err(key.err().unwrap_or(error));
        }
        let ladder = input.parse::<LadderNode>();
        Ok(RawEntry::Ladder { key, ladder })
    }
}

/// The entry that sets the per-run breaker's rule rather than a ladder.
pub(super) const RUN_BREAKER: &str = "run_breaker";

/// What the per-run breaker does when the tool trips it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnTripKind {
    StopRun,
    RemoveTool,
}

/// `run_breaker = remove_tool(per_kind)`: what the per-run breaker does when the tool trips
/// it, and whether it counts failures per kind.
#[derive(Debug, Clone)]
pub(crate) struct RunBreakerNode {
    pub(crate) on_trip: OnTripKind,
    pub(crate) per_kind: bool,
}

impl Parse for RunBreakerNode {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        if input.peek(token::Bracket) {
            // Taken whole, so the error is this one and not "expected `,`" after it.
            let ladder = input.parse::<proc_macro2::Group>()?;
            return Err(syn::Error::new(
                ladder.span(),
                "`run_breaker` takes one action, not a ladder: `stop_run` or `remove_tool`",
            ));
        }
        let name = any_ident(input, "`stop_run` or `remove_tool`")?;
        let parens = if input.peek(token::Paren) {
            let content;
            let parens = syn::parenthesized!(content in input);
            Some((parens, content))
        } else {
            None
        };
        let on_trip = match name.unraw().to_string().as_str() {
            "stop_run" => OnTripKind::StopRun,
            "remove_tool" => OnTripKind::RemoveTool,
            other => {
                return Err(syn::Error::new(
                    name.span(),
                    format_args!(
                        "unknown `run_breaker` action `{other}`, expected `stop_run` or \
                         `remove_tool`"
                    ),
                ));
            }
        };
        let per_kind = match parens {
            Some((parens, content)) => parse_per_kind(&name, parens, &content)?,
            None => false,
        };
        Ok(RunBreakerNode { on_trip, per_kind })
    }
}

/// The inside of `remove_tool(...)`: `per_kind`, once.
fn parse_per_kind(
    name: &Ident,
    parens: token::Paren,
    content: ParseStream<'_>,
) -> syn::Result<bool> {
    let cx = Ctxt::new();
    let mut seen = SetOnce::new("argument");
    let args = parse_list(content, &cx, |input| {
        let (ident, _) = arg_name(input, &["per_kind"], &format!("`{}`", name.unraw()))?;
        Ok(ident)
    });
    for ident in args {
        seen.set(&cx, &ident, "per_kind", ());
    }
    let per_kind = seen.get().is_some();
    if !per_kind && !cx.has_errors() {
        cx.error_at(
            parens.span.join(),
            format_args!(
                "write `{0}` without parentheses, or `{0}(per_kind)` to count failures per kind",
                name.unraw()
            ),
        );
    }
    cx.finish(per_kind)
}

/// `key = ladder, key = ladder, ...`: the inside of `on_error(...)` and `policy!(...)`.
#[derive(Debug, Clone, Default)]
pub(crate) struct PolicyNode {
    /// In the order written, which is the order `Policy::entries` reports.
    pub(crate) entries: Vec<EntryNode>,
    /// `run_breaker = ...`, when written.
    pub(crate) run_breaker: Option<RunBreakerNode>,
    /// `recommended`, when written.
    pub(crate) recommended: bool,
}

/// Gathers a policy's entries, each key at most once.
pub(super) struct PolicyBuilder {
    seen: Vec<SetOnce<()>>,
    entries: Vec<EntryNode>,
    run_breaker: SetOnce<RunBreakerNode>,
    recommended: SetOnce<()>,
}

impl PolicyBuilder {
    pub(super) fn new() -> Self {
        PolicyBuilder {
            seen: Key::ALL.iter().map(|_| SetOnce::new("key")).collect(),
            entries: Vec::new(),
            run_breaker: SetOnce::new("key"),
            recommended: SetOnce::new("entry"),
        }
    }

    pub(super) fn add(&mut self, raw: RawEntry, cx: &Ctxt) {
        let (key, ladder) = match raw {
            RawEntry::Ladder { key, ladder } => (key, ladder),
            RawEntry::RunBreaker { ident, rule } => {
                match rule {
                    Ok(rule) => self.run_breaker.set(cx, &ident, RUN_BREAKER, rule),
                    Err(error) => cx.push(error),
                }
                return;
            }
            RawEntry::Recommended(ident) => {
                self.recommended.set(cx, &ident, RECOMMENDED, ());
                return;
            }
        };
        let key = match key {
            Ok(key) => {
                self.seen[key.key as usize].set(cx, &key.ident, key.key.name(), ());
                Some(key)
            }
            Err(error) => {
                cx.push(error);
                None
            }
        };
        match (key, ladder) {
            (Some(key), Ok(ladder)) => self.entries.push(EntryNode { key, ladder }),
            (_, Err(error)) => cx.push(error),
            (None, Ok(_)) => {}
        }
    }

    pub(super) fn finish(self) -> PolicyNode {
        PolicyNode {
            entries: self.entries,
            run_breaker: self.run_breaker.get(),
            recommended: self.recommended.get().is_some(),
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
