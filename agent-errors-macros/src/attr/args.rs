//! The argument lists of each macro: `#[tool(...)]`, `#[fixer(...)]`, `policy!`, `defaults!`,
//! `tools!`/`fixers!`.

use super::*;

/// `crate = "path"` where a list allows it, or one of the list's own items.
pub(super) enum OrCrate<T> {
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
pub(super) fn crate_path(slot: SetOnce<CratePath>) -> Path {
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
pub(super) fn parse_on_error(input: ParseStream<'_>, ident: &Ident) -> syn::Result<PolicyNode> {
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
pub(super) enum ToolArg {
    Name(Named<NameStr>),
    Description(Named<LitStr>),
    Optional(Ident),
    Idempotent(Ident),
    Approval(Named<ApprovalValue>),
    Blocking(Ident),
    Timeout(Named<DurationLit>),
    Breaker(Named<LitStr>),
    OutputCheck(Named<OutputCheckValue>),
    Reconcile(Named<LitStr>),
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
                "idempotent",
                "approval",
                "blocking",
                "timeout",
                "breaker",
                "output_check",
                "reconcile",
                "on_error",
                "crate",
            ],
            "`#[tool]`",
        )?;
        Ok(match name {
            "name" => ToolArg::Name(Named::parse_after(ident, input)?),
            "description" => ToolArg::Description(Named::parse_after(ident, input)?),
            "optional" => ToolArg::Optional(flag(ident, input)?),
            "idempotent" => {
                if input.peek(Token![=]) {
                    return Err(syn::Error::new(
                        ident.span(),
                        "`idempotent` is a flag: write `#[tool(idempotent)]` for a tool that may \
                         run twice with the same arguments, or leave it out",
                    ));
                }
                ToolArg::Idempotent(ident)
            }
            "approval" => {
                if !input.peek(Token![=]) {
                    return Err(syn::Error::new(
                        ident.span(),
                        "`approval` needs a value: write `#[tool(approval = required)]` for a \
                         tool whose calls wait for a person's approval",
                    ));
                }
                ToolArg::Approval(Named::parse_after(ident, input)?)
            }
            "blocking" => ToolArg::Blocking(flag(ident, input)?),
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
            "output_check" => ToolArg::OutputCheck(Named::parse_after(ident, input)?),
            "reconcile" => ToolArg::Reconcile(reconcile_name(ident, input)?),
            "crate" => ToolArg::Crate(Named::parse_after(ident, input)?),
            _ => {
                let policy = parse_on_error(input, &ident)?;
                ToolArg::OnError(ident, policy)
            }
        })
    }
}

/// The value of `approval = ...`: `required`, the one there is.
#[derive(Debug, Clone)]
pub(crate) struct ApprovalValue;

impl ArgValue for ApprovalValue {
    fn parse_value(input: ParseStream<'_>, _: &Ident) -> syn::Result<Self> {
        if input.peek(LitStr) {
            let lit: LitStr = input.parse()?;
            return Err(syn::Error::new(
                lit.span(),
                "expected `required` without quotes: write `approval = required`",
            ));
        }
        let value = any_ident(input, "`required`: write `approval = required`")?;
        if value.unraw() != "required" {
            return Err(syn::Error::new(
                value.span(),
                format_args!(
                    "unknown approval `{}`, expected `required`: write `approval = required`, or \
                     leave it out for a tool that runs without one",
                    value.unraw()
                ),
            ));
        }
        Ok(ApprovalValue)
    }
}

/// The ready checks `output_check = ...` knows, by name.
const READY_CHECKS: &[&str] = &["error_member", "ok_false"];

/// The value of `output_check = ...`: a ready check with the kind of failure it reports
/// (`error_member(transient)`), or the path of a `fn(&str) -> Result<(), OutputRejected>`.
#[derive(Debug, Clone)]
pub(crate) enum OutputCheckValue {
    /// `check(kind)`: the check's name and the runtime `ErrorKind` variant it reports.
    Ready { check: Ident, kind: &'static str },
    /// A function of the user's.
    Custom(Path),
}

impl ArgValue for OutputCheckValue {
    fn parse_value(input: ParseStream<'_>, _: &Ident) -> syn::Result<Self> {
        let expected = "`error_member(kind)`, `ok_false(kind)`, or the path of a \
                        `fn(&str) -> Result<(), OutputRejected>`";
        if input.peek(LitStr) {
            let lit: LitStr = input.parse()?;
            return Err(syn::Error::new(
                lit.span(),
                format_args!("expected {expected}, without quotes"),
            ));
        }
        let path = Path::parse_mod_style(input)
            .map_err(|e| syn::Error::new(e.span(), format_args!("expected {expected}")))?;
        let ready = path
            .get_ident()
            .filter(|ident| READY_CHECKS.contains(&ident.unraw().to_string().as_str()));
        if !input.peek(token::Paren) {
            return match ready {
                Some(check) => Err(syn::Error::new(
                    check.span(),
                    format_args!(
                        "`{check}` needs the kind of failure it reports: write \
                         `{check}(transient)`, `{check}(quota)`, ..."
                    ),
                )),
                None => Ok(OutputCheckValue::Custom(path)),
            };
        }
        let Some(check) = ready.cloned() else {
            return Err(syn::Error::new_spanned(
                &path,
                format_args!(
                    "unknown ready check, expected one of: {}; a function of yours is named \
                     by its path alone, without parentheses",
                    quoted_list(READY_CHECKS.iter().copied())
                ),
            ));
        };
        let content;
        syn::parenthesized!(content in input);
        let kinds = || {
            quoted_list(
                Key::ALL
                    .iter()
                    .filter(|k| k.error_kind().is_some())
                    .map(|k| k.name()),
            )
        };
        if content.is_empty() {
            return Err(syn::Error::new(
                check.span(),
                format_args!(
                    "`{check}` needs the kind of failure it reports, one of: {}",
                    kinds()
                ),
            ));
        }
        let written = any_ident(&content, "a kind of failure, e.g. `transient`")?;
        let name = written.unraw().to_string();
        let kind = Key::ALL
            .iter()
            .find(|k| k.name() == name)
            .and_then(|k| k.error_kind())
            .ok_or_else(|| {
                syn::Error::new(
                    written.span(),
                    format_args!(
                        "unknown kind of failure `{name}`, expected one of: {}",
                        kinds()
                    ),
                )
            })?;
        if !content.is_empty() {
            return Err(content.error("a ready check takes one kind of failure"));
        }
        Ok(OutputCheckValue::Ready { check, kind })
    }
}

/// The value of `reconcile = "name"`: the name a reconciler is given to the agent under, as a
/// string that is not blank. A path or a name without quotes says how to write it.
fn reconcile_name(ident: Ident, input: ParseStream<'_>) -> syn::Result<Named<LitStr>> {
    let usage = "write `reconcile = \"check_refund\"`, the name of a reconciler given to the \
                 agent with `.reconciler(ReconcilerDef::from_fn(\"check_refund\", ..))`";
    if !input.peek(Token![=]) {
        return Err(syn::Error::new(
            ident.span(),
            format_args!("`reconcile` needs the reconciler's name: {usage}"),
        ));
    }
    let fork = input.fork();
    let _: Token![=] = fork.parse()?;
    if !fork.peek(LitStr) {
        return Err(syn::Error::new(
            fork.span(),
            format_args!("expected the reconciler's name as a string: {usage}"),
        ));
    }
    let name: Named<LitStr> = Named::parse_after(ident, input)?;
    if name.value.value().trim().is_empty() {
        return Err(syn::Error::new(
            name.value.span(),
            format_args!("a reconciler's name cannot be empty: {usage}"),
        ));
    }
    Ok(name)
}

/// A flag such as `optional`: its presence says it all, so a value after it is an error.
fn flag(ident: Ident, input: ParseStream<'_>) -> syn::Result<Ident> {
    if input.peek(Token![=]) {
        return Err(syn::Error::new(
            input.span(),
            format_args!("`{ident}` takes no value: write `#[tool({ident})]`, or leave it out"),
        ));
    }
    Ok(ident)
}

/// Everything inside `#[tool(...)]`.
pub(crate) struct ToolArgs {
    pub(crate) name: Option<LitStr>,
    pub(crate) description: Option<LitStr>,
    pub(crate) optional: bool,
    pub(crate) idempotent: bool,
    /// `approval = required`: each call waits for a person's approval before it runs.
    pub(crate) approval: Option<ApprovalValue>,
    /// `blocking`, kept for its span: the body runs on tokio's blocking pool.
    pub(crate) blocking: Option<Ident>,
    pub(crate) timeout: Option<DurationLit>,
    pub(crate) breaker: Option<LitStr>,
    pub(crate) output_check: Option<OutputCheckValue>,
    /// `reconcile = "name"`: the reconciler asked whether a call whose outcome is unknown took
    /// effect.
    pub(crate) reconcile: Option<LitStr>,
    pub(crate) on_error: Option<PolicyNode>,
    pub(crate) krate: Path,
}

impl ToolArgs {
    /// What was read, even when some of it was wrong (reported to `cx`).
    pub(crate) fn parse(input: ParseStream<'_>, cx: &Ctxt) -> Self {
        let mut name = SetOnce::new("argument");
        let mut description = SetOnce::new("argument");
        let mut optional = SetOnce::new("argument");
        let mut idempotent = SetOnce::new("argument");
        let mut approval = SetOnce::new("argument");
        let mut blocking = SetOnce::new("argument");
        let mut timeout = SetOnce::new("argument");
        let mut breaker = SetOnce::new("argument");
        let mut output_check = SetOnce::new("argument");
        let mut reconcile = SetOnce::new("argument");
        let mut on_error = SetOnce::new("argument");
        let mut krate = SetOnce::new("argument");
        for arg in parse_list(input, cx, ToolArg::parse) {
            match arg {
                ToolArg::Name(arg) => arg.set_in(&mut name, cx),
                ToolArg::Description(arg) => arg.set_in(&mut description, cx),
                ToolArg::Optional(ident) => optional.set(cx, &ident, "optional", ()),
                ToolArg::Idempotent(ident) => idempotent.set(cx, &ident, "idempotent", ()),
                ToolArg::Approval(arg) => arg.set_in(&mut approval, cx),
                ToolArg::Blocking(ident) => blocking.set(cx, &ident, "blocking", ident.clone()),
                ToolArg::Timeout(arg) => arg.set_in(&mut timeout, cx),
                ToolArg::Breaker(arg) => arg.set_in(&mut breaker, cx),
                ToolArg::OutputCheck(arg) => arg.set_in(&mut output_check, cx),
                ToolArg::Reconcile(arg) => arg.set_in(&mut reconcile, cx),
                ToolArg::OnError(ident, policy) => on_error.set(cx, &ident, "on_error", policy),
                ToolArg::Crate(arg) => arg.set_in(&mut krate, cx),
            }
        }
        ToolArgs {
            name: name.get().map(|NameStr(lit)| lit),
            description: description.get(),
            optional: optional.get().is_some(),
            idempotent: idempotent.get().is_some(),
            approval: approval.get(),
            blocking: blocking.get(),
            timeout: timeout.get(),
            breaker: breaker.get(),
            output_check: output_check.get(),
            reconcile: reconcile.get(),
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

/// One argument of `defaults!(...)`.
enum DefaultsArg {
    OnError(Ident, PolicyNode),
    /// `recommended`: the recommended preset below the crate's own entries.
    Recommended(Ident),
    Crate(Named<CratePath>),
}

impl DefaultsArgs {
    /// What was read, even when some of it was wrong (reported to `cx`).
    pub(crate) fn parse(input: ParseStream<'_>, cx: &Ctxt) -> Self {
        if input.is_empty() {
            cx.push(input.error(
                "`defaults!` needs `recommended` or `on_error(...)`, e.g. \
                 `defaults!(recommended)` or `defaults!(on_error(execution = retry(3)))`",
            ));
        }
        let mut on_error = SetOnce::new("argument");
        let mut recommended = SetOnce::new("argument");
        let mut krate = SetOnce::new("argument");
        let args = parse_list(input, cx, |input| {
            let allowed = &["recommended", "on_error", "crate"];
            let (ident, which) = arg_name(input, allowed, "`defaults!`")?;
            Ok(match which {
                "on_error" => {
                    let policy = parse_on_error(input, &ident)?;
                    DefaultsArg::OnError(ident, policy)
                }
                "recommended" if input.peek(Token![=]) || input.peek(token::Paren) => {
                    return Err(syn::Error::new(
                        ident.span(),
                        "`recommended` takes nothing: write `defaults!(recommended)`, and \
                         `on_error(...)` beside it to change its keys",
                    ));
                }
                "recommended" => DefaultsArg::Recommended(ident),
                _ => DefaultsArg::Crate(Named::parse_after(ident, input)?),
            })
        });
        for arg in args {
            match arg {
                DefaultsArg::OnError(ident, policy) => {
                    on_error.set(cx, &ident, "on_error", policy);
                }
                DefaultsArg::Recommended(ident) => recommended.set(cx, &ident, "recommended", ()),
                DefaultsArg::Crate(arg) => arg.set_in(&mut krate, cx),
            }
        }
        let mut on_error: PolicyNode = on_error.get().unwrap_or_default();
        on_error.recommended |= recommended.get().is_some();
        DefaultsArgs {
            on_error,
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
