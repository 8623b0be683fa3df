//! The one path every macro takes: parse, then validate, then expand; or, when anything was
//! reported, the fallback next to every error at once.

use proc_macro2::TokenStream;
use quote::quote;
use syn::Path;

use crate::ast::{self, FixerFn, FnHead, ToolFn};
use crate::attr::{CratePath, DefaultsArgs, FixerArgs, ListArgs, PolicyArgs, ToolArgs};
use crate::ctxt::{Ctxt, parse_all};
use crate::{expand, valid};

/// One macro. `try_expand` reports every problem to `cx` and returns the expansion, or `None`
/// when it could not get that far; it records on `self` what the fallback needs.
pub(crate) trait Macro {
    fn try_expand(&mut self, cx: &Ctxt) -> Option<TokenStream>;

    /// What to emit beside the errors so that nothing else fails because of them.
    fn fallback(self, errors: TokenStream) -> TokenStream;
}

pub(crate) fn expand(mut mac: impl Macro) -> TokenStream {
    let cx = Ctxt::new();
    let expanded = mac.try_expand(&cx);
    match cx.check() {
        Ok(()) => expanded.expect("`try_expand` reports why it has no expansion"),
        Err(error) => mac.fallback(error.to_compile_error()),
    }
}

/// The errors first, then the items exactly as written: one clear message, no cascade from a
/// missing item.
fn items_after(errors: TokenStream, items: TokenStream) -> TokenStream {
    quote!(#errors #items)
}

/// The errors of a macro used as an expression, in a block whose value still has the expected
/// type, so no type error follows.
fn expression_after(errors: TokenStream, value: TokenStream) -> TokenStream {
    quote!({
        #errors
        #value
    })
}

/// `#[tool]`.
pub(crate) struct Tool {
    attr: TokenStream,
    /// The annotated item, as it will be emitted.
    item: TokenStream,
    head: Option<FnHead>,
    krate: Path,
}

impl Tool {
    pub(crate) fn new(attr: TokenStream, item: TokenStream) -> Self {
        Tool {
            attr,
            item,
            head: None,
            krate: CratePath::default_path(),
        }
    }
}

impl Macro for Tool {
    fn try_expand(&mut self, cx: &Ctxt) -> Option<TokenStream> {
        let func = ast::parse_fn(self.item.clone(), "tool")
            .map_err(|error| cx.push(error))
            .ok()?;
        let tool = ToolFn::from_item(&func, false, cx);
        if let Some(stripped) = ast::without_param_docs(&func) {
            self.item = quote!(#stripped);
        }
        self.head = Some(FnHead::new(&func));
        let grammar_errors = cx.error_count();
        let args = parse_all(cx, self.attr.clone(), ToolArgs::parse);
        self.krate = args.krate.clone();
        if cx.error_count() == grammar_errors {
            valid::tool(&args, &tool, cx);
        }
        if cx.has_errors() {
            return None;
        }
        let item = &self.item;
        let entry = expand::tool(&args, &tool);
        Some(quote!(#item #entry))
    }

    fn fallback(self, errors: TokenStream) -> TokenStream {
        let placeholder = self
            .head
            .map(|head| expand::placeholder_entry(&self.krate, "tool", &head, "ToolDef"));
        let item = self.item;
        items_after(errors, quote!(#item #placeholder))
    }
}

/// `#[fixer]`.
pub(crate) struct Fixer {
    attr: TokenStream,
    item: TokenStream,
    head: Option<FnHead>,
    krate: Path,
}

impl Fixer {
    pub(crate) fn new(attr: TokenStream, item: TokenStream) -> Self {
        Fixer {
            attr,
            item,
            head: None,
            krate: CratePath::default_path(),
        }
    }
}

impl Macro for Fixer {
    fn try_expand(&mut self, cx: &Ctxt) -> Option<TokenStream> {
        let func = ast::parse_fn(self.item.clone(), "fixer")
            .map_err(|error| cx.push(error))
            .ok()?;
        let fixer = FixerFn::from_item(&func, false, cx);
        self.head = Some(FnHead::new(&func));
        let args = parse_all(cx, self.attr.clone(), FixerArgs::parse);
        self.krate = args.krate.clone();
        if cx.has_errors() {
            return None;
        }
        let item = &self.item;
        let entry = expand::fixer(&args.krate, args.name.as_ref(), &fixer);
        Some(quote!(#item #entry))
    }

    fn fallback(self, errors: TokenStream) -> TokenStream {
        let placeholder = self
            .head
            .map(|head| expand::placeholder_entry(&self.krate, "fixer", &head, "FixerDef"));
        let item = self.item;
        items_after(errors, quote!(#item #placeholder))
    }
}

/// `policy!(...)`.
pub(crate) struct Policy {
    input: TokenStream,
    krate: Path,
}

impl Policy {
    pub(crate) fn new(input: TokenStream) -> Self {
        Policy {
            input,
            krate: CratePath::default_path(),
        }
    }
}

impl Macro for Policy {
    fn try_expand(&mut self, cx: &Ctxt) -> Option<TokenStream> {
        let args = parse_all(cx, self.input.clone(), PolicyArgs::parse);
        self.krate = args.krate.clone();
        if cx.has_errors() {
            return None;
        }
        valid::policy(&args.policy, None, cx);
        Some(expand::policy(&expand::private(&args.krate), &args.policy))
    }

    fn fallback(self, errors: TokenStream) -> TokenStream {
        let p = expand::private(&self.krate);
        expression_after(errors, quote!(#p::Policy::new()))
    }
}

/// `defaults!(...)`.
pub(crate) struct Defaults {
    input: TokenStream,
}

impl Defaults {
    pub(crate) fn new(input: TokenStream) -> Self {
        Defaults { input }
    }
}

impl Macro for Defaults {
    fn try_expand(&mut self, cx: &Ctxt) -> Option<TokenStream> {
        let args = parse_all(cx, self.input.clone(), DefaultsArgs::parse);
        if cx.has_errors() {
            return None;
        }
        valid::policy(&args.on_error, None, cx);
        Some(expand::defaults(&args.krate, &args.on_error))
    }

    /// Nothing: without the crate's trait, tools fall back to having no defaults, which is
    /// what the user sees until the error is fixed anyway.
    fn fallback(self, errors: TokenStream) -> TokenStream {
        errors
    }
}

/// Whether `path` names a type (its last segment is capitalised, as types are and functions are
/// not): a rig tool, or any other tool value, rather than a `#[tool]` function.
fn names_a_type(path: &Path) -> bool {
    let last = path
        .segments
        .last()
        .map(|segment| segment.ident.to_string());
    last.is_some_and(|name| name.starts_with(|c: char| c.is_ascii_uppercase()))
}

/// What `tools![..]` says of a type in its list: the way in for a tool that is a value.
fn not_a_tool_fn(path: &Path) -> String {
    let name = quote::ToTokens::to_token_stream(path)
        .to_string()
        .replace(' ', "");
    format!(
        "`{name}` is a type, and `tools![..]` lists `#[tool]` functions: a rig tool goes in as \
         `.tool(ToolDef::from_rig({name}))` (feature `rig`), any other tool value as \
         `.tool(ToolDef::from_handler(..))`"
    )
}

/// `tools![...]` and `fixers![...]`.
pub(crate) struct List {
    input: TokenStream,
    /// `"tool"` or `"fixer"`: which entry functions the paths name.
    kind: &'static str,
    /// The runtime type each entry returns.
    element: &'static str,
    krate: Path,
}

impl List {
    pub(crate) fn new(input: TokenStream, kind: &'static str, element: &'static str) -> Self {
        List {
            input,
            kind,
            element,
            krate: CratePath::default_path(),
        }
    }
}

impl Macro for List {
    fn try_expand(&mut self, cx: &Ctxt) -> Option<TokenStream> {
        let args = parse_all(cx, self.input.clone(), ListArgs::parse);
        self.krate = args.krate.clone();
        if self.kind == "tool" {
            for path in args.paths.iter().filter(|path| names_a_type(path)) {
                cx.error_spanned_by(path, not_a_tool_fn(path));
            }
        }
        Some(expand::list(
            &args.krate,
            &args.paths,
            self.kind,
            self.element,
        ))
    }

    fn fallback(self, errors: TokenStream) -> TokenStream {
        let empty = expand::list(&self.krate, &[], self.kind, self.element);
        expression_after(errors, empty)
    }
}

/// `crate_defaults!()`: the calling crate's `defaults!`, for a hand-built `ToolDef`.
pub(crate) struct CrateDefaults {
    input: TokenStream,
    krate: Path,
}

impl CrateDefaults {
    pub(crate) fn new(input: TokenStream) -> Self {
        CrateDefaults {
            input,
            krate: CratePath::default_path(),
        }
    }
}

impl Macro for CrateDefaults {
    fn try_expand(&mut self, cx: &Ctxt) -> Option<TokenStream> {
        let args = parse_all(cx, self.input.clone(), ListArgs::parse);
        self.krate = args.krate.clone();
        if let Some(path) = args.paths.first() {
            cx.error_spanned_by(path, "expected nothing, or `crate = \"...\"`");
        }
        Some(expand::crate_defaults(&expand::private(&args.krate)))
    }

    fn fallback(self, errors: TokenStream) -> TokenStream {
        expression_after(errors, quote!(::std::option::Option::None))
    }
}

/// A hidden list the macros keep (the policy keys, the actions), for the test that holds it
/// against the runtime's.
pub(crate) struct KnownList {
    input: TokenStream,
    expand: fn(&syn::Path) -> TokenStream,
}

impl KnownList {
    pub(crate) fn keys(input: TokenStream) -> Self {
        KnownList {
            input,
            expand: expand::policy_keys,
        }
    }

    pub(crate) fn actions(input: TokenStream) -> Self {
        KnownList {
            input,
            expand: expand::policy_actions,
        }
    }
}

impl Macro for KnownList {
    fn try_expand(&mut self, cx: &Ctxt) -> Option<TokenStream> {
        let args = parse_all(cx, self.input.clone(), ListArgs::parse);
        if let Some(path) = args.paths.first() {
            cx.error_spanned_by(path, "expected nothing, or `crate = \"...\"`");
        }
        Some((self.expand)(&args.krate))
    }

    fn fallback(self, errors: TokenStream) -> TokenStream {
        errors
    }
}

#[cfg(test)]
mod tests {
    use proc_macro2::TokenTree;

    use super::*;

    /// Every identifier and literal in `tokens`, groups included.
    fn words(tokens: TokenStream, out: &mut Vec<String>) {
        for tree in tokens {
            match tree {
                TokenTree::Group(group) => words(group.stream(), out),
                TokenTree::Ident(ident) => out.push(ident.to_string()),
                TokenTree::Literal(lit) => out.push(lit.to_string()),
                TokenTree::Punct(_) => {}
            }
        }
    }

    #[test]
    fn a_crate_path_replaces_every_reference_to_agent_errors() {
        let krate = quote!(crate = "sdk::rt");
        let tool_fn = quote! {
            #[doc = "Doubles it."]
            async fn double(x: u32) -> u32 { x * 2 }
        };
        let fixer_fn = quote!(
            fn repair(r: FixRequest) -> Result<Fix, FixerError> {
                todo!()
            }
        );
        let expansions = [
            expand(Tool::new(
                quote!(#krate, timeout = "1s", on_error(execution = [retry(2), escalate])),
                tool_fn.clone(),
            )),
            // The fallback, after an error, names the runtime too.
            expand(Tool::new(
                quote!(#krate, on_error(execution = retry(0))),
                tool_fn,
            )),
            expand(Fixer::new(krate.clone(), fixer_fn.clone())),
            expand(Fixer::new(quote!(#krate, nme = "x"), fixer_fn)),
            expand(Policy::new(quote!(#krate, execution = retry(2)))),
            expand(Policy::new(quote!(#krate, execution = retry(0)))),
            expand(Defaults::new(quote!(#krate, on_error(auth = throw)))),
            expand(List::new(quote!(#krate, double), "tool", "ToolDef")),
            expand(List::new(quote!(#krate, a b), "fixer", "FixerDef")),
            expand(KnownList::keys(krate.clone())),
            expand(KnownList::actions(krate.clone())),
        ];
        for expansion in expansions {
            let mut found = Vec::new();
            words(expansion.clone(), &mut found);
            assert!(
                found
                    .iter()
                    .all(|word| !word.contains("::agent_errors") && word != "agent_errors"),
                "{expansion}"
            );
            assert!(found.iter().any(|word| word == "rt"), "{expansion}");
        }
    }
}
