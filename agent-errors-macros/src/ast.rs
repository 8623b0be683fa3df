//! The annotated functions as a typed model: what `#[tool]` and `#[fixer]` read from a `fn`.

use proc_macro2::{Span, TokenStream};
use syn::spanned::Spanned;
use syn::{
    Attribute, Expr, ExprLit, FnArg, GenericArgument, Ident, Item, ItemFn, Lit, Meta, Pat,
    PathArguments, ReturnType, Type, Visibility,
};

use crate::ctxt::Ctxt;

/// Reads `item` as a function, or explains (spanned on the item's keyword) that `attribute` only
/// goes on functions.
pub(crate) fn parse_fn(item: TokenStream, attribute: &str) -> syn::Result<ItemFn> {
    let message = format!("`#[{attribute}]` only applies to a `fn` or `async fn`");
    match syn::parse2::<Item>(item) {
        Ok(Item::Fn(func)) => Ok(func),
        Ok(other) => Err(syn::Error::new(keyword_span(&other), message)),
        Err(error) => Err(syn::Error::new(error.span(), message)),
    }
}

fn keyword_span(item: &Item) -> Span {
    match item {
        Item::Const(i) => i.const_token.span,
        Item::Enum(i) => i.enum_token.span,
        Item::ExternCrate(i) => i.extern_token.span,
        Item::ForeignMod(i) => i.abi.extern_token.span,
        Item::Impl(i) => i.impl_token.span,
        Item::Macro(i) => i.mac.path.span(),
        Item::Mod(i) => i.mod_token.span,
        Item::Static(i) => i.static_token.span,
        Item::Struct(i) => i.struct_token.span,
        Item::Trait(i) => i.trait_token.span,
        Item::TraitAlias(i) => i.trait_token.span,
        Item::Type(i) => i.type_token.span,
        Item::Union(i) => i.union_token.span,
        Item::Use(i) => i.use_token.span,
        _ => Span::call_site(),
    }
}

/// The identity of an annotated function, enough to emit its entry function even when the
/// attribute is wrong (so `tools![f]` elsewhere does not fail too).
pub(crate) struct FnHead {
    pub(crate) ident: Ident,
    pub(crate) vis: Visibility,
    /// `#[cfg(...)]` attributes, copied so the entry exists exactly when the function does.
    pub(crate) cfgs: Vec<Attribute>,
}

impl FnHead {
    pub(crate) fn new(func: &ItemFn) -> Self {
        FnHead {
            ident: func.sig.ident.clone(),
            vis: func.vis.clone(),
            cfgs: func
                .attrs
                .iter()
                .filter(|a| a.path().is_ident("cfg"))
                .cloned()
                .collect(),
        }
    }
}

/// A parameter of a tool: one field of the generated arguments type.
pub(crate) struct Param {
    pub(crate) ident: Ident,
    pub(crate) ty: Type,
    /// `///` lines on the parameter: the field's description in the schema.
    pub(crate) docs: Vec<Attribute>,
    pub(crate) source: ParamSource,
}

/// Where a parameter's value comes from.
pub(crate) enum ParamSource {
    /// One field of the model's arguments.
    Field,
    /// The whole of the model's arguments (`#[args]`): the type's fields are the schema's.
    Whole,
    /// A `Ctx<T>`: the run's value of type `T` (the type held), never shown to the model.
    Context(Box<Type>),
}

/// How a `#[tool]` method of a `#[toolset]` block is called.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Receiver {
    /// A free function, or an associated function without `self`.
    None,
    /// `&self`: called on the shared instance.
    Ref,
}

/// What a tool returns.
pub(crate) enum Output {
    /// No return type: `()`.
    Unit,
    /// A type whose last path segment is `Result`: used as `Result<T, E>`.
    Result(Type),
    /// Any other type, wrapped in an infallible `Ok`.
    Plain(Type),
}

/// One `#[doc = ...]` attribute.
pub(crate) enum DocLine {
    Text(String),
    /// A doc attribute that is not a literal, such as `#[doc = include_str!("tool.md")]`.
    Expr(Expr),
}

/// A `#[tool]` function.
pub(crate) struct ToolFn {
    pub(crate) head: FnHead,
    pub(crate) receiver: Receiver,
    pub(crate) is_async: bool,
    pub(crate) params: Vec<Param>,
    pub(crate) output: Output,
    pub(crate) docs: Vec<DocLine>,
}

impl ToolFn {
    /// The model of `func`; anything a tool can't be is reported to `cx`. `in_toolset`: the
    /// function is a method of a `#[toolset]` block, so `&self` is allowed.
    pub(crate) fn from_item(func: &ItemFn, in_toolset: bool, cx: &Ctxt) -> Self {
        let sig = &func.sig;
        reject_common(func, "tool", cx);
        let mut params = Vec::new();
        let mut receiver = Receiver::None;
        for input in &sig.inputs {
            match input {
                FnArg::Receiver(r) => receiver = check_receiver(r, "tool", in_toolset, cx),
                FnArg::Typed(typed) => {
                    if let Some(param) = Param::from_typed(typed, cx) {
                        params.push(param);
                    }
                }
            }
        }
        check_whole(&params, cx);
        let output = match &sig.output {
            ReturnType::Default => Output::Unit,
            ReturnType::Type(_, ty) if is_result(ty) => Output::Result((**ty).clone()),
            ReturnType::Type(_, ty) => Output::Plain((**ty).clone()),
        };
        ToolFn {
            head: FnHead::new(func),
            receiver,
            is_async: sig.asyncness.is_some(),
            params,
            output,
            docs: doc_lines(&func.attrs),
        }
    }
}

/// `&self` in a `#[toolset]` block; anything else is reported.
fn check_receiver(r: &syn::Receiver, what: &str, in_toolset: bool, cx: &Ctxt) -> Receiver {
    if !in_toolset {
        cx.error_spanned_by(
            r,
            format_args!(
                "a {what} that takes `self` must be in an `impl` block marked `#[toolset]`, \
                 which builds its {what}s from a shared instance"
            ),
        );
    } else if r.reference.is_none() || r.colon_token.is_some() {
        cx.error_spanned_by(
            r,
            format_args!("a {what} method takes `&self`: the instance is shared as an `Arc<Self>`"),
        );
    } else if r.mutability.is_some() {
        cx.error_spanned_by(
            r,
            format_args!(
                "a {what} method takes `&self`, not `&mut self`: calls run concurrently on one \
                 shared instance, so keep mutable state behind a `Mutex` in a field"
            ),
        );
    }
    Receiver::Ref
}

impl Param {
    fn from_typed(typed: &syn::PatType, cx: &Ctxt) -> Option<Param> {
        let whole = typed.attrs.iter().any(|a| a.path().is_ident("args"));
        let source = match context_type(&typed.ty, cx) {
            Some(held) => ParamSource::Context(Box::new(held)),
            None if whole => ParamSource::Whole,
            None => ParamSource::Field,
        };
        if !matches!(source, ParamSource::Context(_)) {
            check_param_type(&typed.ty, cx);
        }
        match &*typed.pat {
            Pat::Ident(p) if p.by_ref.is_none() && p.subpat.is_none() => Some(Param {
                ident: p.ident.clone(),
                ty: (*typed.ty).clone(),
                docs: typed
                    .attrs
                    .iter()
                    .filter(|a| a.path().is_ident("doc"))
                    .cloned()
                    .collect(),
                source,
            }),
            pat => {
                cx.error_spanned_by(
                    pat,
                    "a tool parameter must be a plain name such as `query: String`: \
                     the name is the JSON field the model fills in",
                );
                None
            }
        }
    }
}

/// `T` of a `Ctx<T>` parameter; a bare `Ctx` is reported.
fn context_type(ty: &Type, cx: &Ctxt) -> Option<Type> {
    let Type::Path(path) = ty else { return None };
    let last = path.path.segments.last()?;
    if last.ident != "Ctx" {
        return None;
    }
    if let PathArguments::AngleBracketed(args) = &last.arguments {
        if let [GenericArgument::Type(held)] = args.args.iter().collect::<Vec<_>>()[..] {
            return Some(held.clone());
        }
    }
    cx.error_spanned_by(
        ty,
        "`Ctx` takes the type of the run's value it reads, such as `Ctx<UserId>`",
    );
    None
}

/// An `#[args]` parameter is the whole argument object, so it must be the only one the model
/// fills in.
fn check_whole(params: &[Param], cx: &Ctxt) {
    let fields = params
        .iter()
        .filter(|p| !matches!(p.source, ParamSource::Context(_)));
    let wholes = params
        .iter()
        .filter(|p| matches!(p.source, ParamSource::Whole))
        .count();
    if wholes > 0 && fields.clone().count() > 1 {
        for p in fields {
            cx.error_spanned_by(
                &p.ident,
                "an `#[args]` parameter is the whole argument object: it must be the tool's only \
                 parameter besides `Ctx<T>` ones",
            );
        }
    }
}

const FIXER_ARITY: &str = "a fixer takes exactly one parameter: `request: FixRequest`";

/// A `#[fixer]` function.
pub(crate) struct FixerFn {
    pub(crate) head: FnHead,
    pub(crate) receiver: Receiver,
    pub(crate) is_async: bool,
}

impl FixerFn {
    /// The model of `func`; anything a fixer can't be is reported to `cx`.
    pub(crate) fn from_item(func: &ItemFn, in_toolset: bool, cx: &Ctxt) -> Self {
        let sig = &func.sig;
        reject_common(func, "fixer", cx);
        let mut inputs = sig.inputs.iter().peekable();
        let mut receiver = Receiver::None;
        if let Some(FnArg::Receiver(r)) = inputs.peek() {
            receiver = check_receiver(r, "fixer", in_toolset, cx);
            inputs.next();
        }
        match inputs.next() {
            None => cx.error_at(sig.paren_token.span.join(), FIXER_ARITY),
            Some(FnArg::Receiver(r)) => cx.error_spanned_by(r, FIXER_ARITY),
            Some(FnArg::Typed(_)) => {}
        }
        let extra: Vec<_> = inputs.collect();
        if let Some(first) = extra.first() {
            let mut span = first.span();
            if let Some(joined) = extra.last().and_then(|last| span.join(last.span())) {
                span = joined;
            }
            cx.error_at(span, FIXER_ARITY);
        }
        FixerFn {
            head: FnHead::new(func),
            receiver,
            is_async: sig.asyncness.is_some(),
        }
    }
}

/// What neither a tool nor a fixer can be: generic, `unsafe`, variadic.
fn reject_common(func: &ItemFn, what: &str, cx: &Ctxt) {
    let sig = &func.sig;
    if !sig.generics.params.is_empty() {
        cx.error_spanned_by(
            &sig.generics,
            format_args!(
                "a {what} can't be generic: it is called with values parsed at run time, \
                 so every type must be concrete"
            ),
        );
    }
    if let Some(unsafety) = &sig.unsafety {
        cx.error_spanned_by(
            unsafety,
            format_args!("a {what} can't be `unsafe`: the agent calls it without checks"),
        );
    }
    if let Some(variadic) = &sig.variadic {
        cx.error_spanned_by(variadic, format_args!("a {what} can't be variadic"));
    }
}

/// Borrowed and `impl Trait` types can't be deserialized into an owned, `'static` call.
fn check_param_type(ty: &Type, cx: &Ctxt) {
    match ty {
        Type::Reference(reference) => cx.error_spanned_by(
            reference,
            "a tool parameter can't be a reference: use an owned type such as `String` or `Vec<T>`",
        ),
        Type::ImplTrait(impl_trait) => cx.error_spanned_by(
            impl_trait,
            "a tool parameter can't be `impl Trait`: use a concrete type that implements \
             `Deserialize` and `JsonSchema`",
        ),
        Type::Array(t) => check_param_type(&t.elem, cx),
        Type::Slice(t) => check_param_type(&t.elem, cx),
        Type::Group(t) => check_param_type(&t.elem, cx),
        Type::Paren(t) => check_param_type(&t.elem, cx),
        Type::Tuple(t) => t.elems.iter().for_each(|t| check_param_type(t, cx)),
        Type::Path(t) => {
            for segment in &t.path.segments {
                if let PathArguments::AngleBracketed(args) = &segment.arguments {
                    for arg in &args.args {
                        if let GenericArgument::Type(t) = arg {
                            check_param_type(t, cx);
                        }
                    }
                }
            }
        }
        _ => {}
    }
}

/// `Result<..>`, `io::Result<..>`, `anyhow::Result<..>`: anything named `Result` last.
fn is_result(ty: &Type) -> bool {
    match ty {
        Type::Path(path) if path.qself.is_none() => path
            .path
            .segments
            .last()
            .is_some_and(|segment| segment.ident == "Result"),
        Type::Group(group) => is_result(&group.elem),
        Type::Paren(paren) => is_result(&paren.elem),
        _ => false,
    }
}

fn doc_lines(attrs: &[Attribute]) -> Vec<DocLine> {
    attrs
        .iter()
        .filter(|a| a.path().is_ident("doc"))
        .filter_map(|a| match &a.meta {
            Meta::NameValue(nv) => Some(match &nv.value {
                Expr::Lit(ExprLit {
                    lit: Lit::Str(s), ..
                }) => DocLine::Text(s.value()),
                other => DocLine::Expr(other.clone()),
            }),
            _ => None,
        })
        .collect()
}

/// A tool's description as an expression of type `&'static str`.
pub(crate) enum Description {
    /// Known now.
    Text(String),
    /// Assembled by `concat!` because some doc attribute is an expression.
    Concat(Vec<TokenStream>),
}

impl ToolFn {
    /// The doc comment as a description: every line trimmed, lines joined with `\n`, blank
    /// lines at either end dropped. `None` when there is no doc text.
    pub(crate) fn doc_description(&self) -> Option<Description> {
        if self.docs.iter().all(|d| matches!(d, DocLine::Text(_))) {
            let text: Vec<&str> = self
                .docs
                .iter()
                .filter_map(|d| match d {
                    DocLine::Text(t) => Some(t.as_str()),
                    DocLine::Expr(_) => None,
                })
                .collect();
            let text = trim_lines(&text);
            return (!text.is_empty()).then_some(Description::Text(text));
        }
        let mut pieces = Vec::new();
        let mut pending: Vec<&str> = Vec::new();
        let flush = |pending: &mut Vec<&str>, pieces: &mut Vec<TokenStream>| {
            let text = trim_lines(pending);
            if !text.is_empty() {
                pieces.push(quote::quote!(#text));
            }
            pending.clear();
        };
        for doc in &self.docs {
            match doc {
                DocLine::Text(t) => pending.push(t),
                DocLine::Expr(e) => {
                    flush(&mut pending, &mut pieces);
                    pieces.push(quote::quote!(#e));
                }
            }
        }
        flush(&mut pending, &mut pieces);
        Some(Description::Concat(pieces))
    }
}

fn trim_lines(docs: &[&str]) -> String {
    let lines: Vec<&str> = docs
        .iter()
        .flat_map(|d| d.split('\n'))
        .map(str::trim)
        .collect();
    let start = lines.iter().position(|l| !l.is_empty());
    let end = lines.iter().rposition(|l| !l.is_empty());
    match (start, end) {
        (Some(start), Some(end)) => lines[start..=end].join("\n"),
        _ => String::new(),
    }
}

/// `func` as rustc should see it: doc comments on parameters describe the schema's fields, but
/// rustc rejects them on parameters, so they are taken off. `None` when there are none, so the
/// item is emitted exactly as written.
pub(crate) fn without_param_docs(func: &ItemFn) -> Option<ItemFn> {
    let is_doc = |a: &Attribute| a.path().is_ident("doc") || a.path().is_ident("args");
    let has_docs = func.sig.inputs.iter().any(|input| match input {
        FnArg::Typed(typed) => typed.attrs.iter().any(is_doc),
        FnArg::Receiver(_) => false,
    });
    if !has_docs {
        return None;
    }
    let mut stripped = func.clone();
    for input in &mut stripped.sig.inputs {
        if let FnArg::Typed(typed) = input {
            typed.attrs.retain(|a| !is_doc(a));
        }
    }
    Some(stripped)
}
