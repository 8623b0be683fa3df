//! `#[toolset]`: an `impl` block whose `#[tool]` and `#[fixer]` methods become tools and fixers
//! of one shared instance. The methods' attributes are read here (the inner attributes never
//! run on their own) and taken off, and a second `impl` block adds the hidden entry per method
//! and the public `tools` and `fixers` that collect them.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Attribute, ImplItem, ImplItemFn, Item, ItemFn, ItemImpl, Meta, Path, Type};

use crate::ast::{self, FixerFn, Receiver, ToolFn};
use crate::attr::{CratePath, FixerArgs, ListArgs, ToolArgs};
use crate::ctxt::{Ctxt, parse_all};
use crate::driver::Macro;
use crate::expand::{self, entry_ident, private};
use crate::valid;

/// `#[toolset]`.
pub(crate) struct Toolset {
    attr: TokenStream,
    item: TokenStream,
    /// The block as it will be emitted, once read: the inner attributes taken off.
    block: Option<ItemImpl>,
    krate: Path,
}

impl Toolset {
    pub(crate) fn new(attr: TokenStream, item: TokenStream) -> Self {
        Toolset {
            attr,
            item,
            block: None,
            krate: CratePath::default_path(),
        }
    }
}

/// Which of our attributes a method carries, taken off it.
enum Marked {
    Tool(TokenStream),
    Fixer(TokenStream),
}

/// `#[tool]`, `#[tool(...)]`, `#[agent_errors::tool(...)]` and the same for `fixer`: the
/// attribute's arguments, and which it was.
fn take_marker(method: &mut ImplItemFn) -> Option<Marked> {
    let position = method
        .attrs
        .iter()
        .position(|attr| marker_name(attr).is_some())?;
    let attr = method.attrs.remove(position);
    let args = match &attr.meta {
        Meta::List(list) => list.tokens.clone(),
        _ => TokenStream::new(),
    };
    Some(match marker_name(&attr) {
        Some("tool") => Marked::Tool(args),
        _ => Marked::Fixer(args),
    })
}

fn marker_name(attr: &Attribute) -> Option<&'static str> {
    let last = attr.path().segments.last()?;
    if last.ident == "tool" {
        Some("tool")
    } else if last.ident == "fixer" {
        Some("fixer")
    } else {
        None
    }
}

fn as_item_fn(method: &ImplItemFn) -> ItemFn {
    ItemFn {
        attrs: method.attrs.clone(),
        vis: method.vis.clone(),
        sig: method.sig.clone(),
        block: Box::new(method.block.clone()),
    }
}

impl Macro for Toolset {
    fn try_expand(&mut self, cx: &Ctxt) -> Option<TokenStream> {
        let args = parse_all(cx, self.attr.clone(), ListArgs::parse);
        self.krate = args.krate.clone();
        if let Some(path) = args.paths.first() {
            cx.error_spanned_by(path, "expected nothing, or `crate = \"...\"`");
        }
        let mut block = match syn::parse2::<Item>(self.item.clone()) {
            Ok(Item::Impl(block)) => block,
            other => {
                let span = other.map_or_else(|e| e.span(), |item| item.span());
                cx.error_at(
                    span,
                    "`#[toolset]` goes on an `impl` block: `impl MyService { .. }`",
                );
                return None;
            }
        };
        check_block(&block, cx);
        let self_ty = (*block.self_ty).clone();
        let mut tools = Vec::new();
        let mut fixers = Vec::new();
        for item in &mut block.items {
            let ImplItem::Fn(method) = item else { continue };
            let Some(marked) = take_marker(method) else {
                continue;
            };
            let func = as_item_fn(method);
            if let Some(stripped) = ast::without_param_docs(&func) {
                method.sig = stripped.sig;
            }
            match marked {
                Marked::Tool(attr) => tools.push(method_tool(attr, &func, &self_ty, cx)),
                Marked::Fixer(attr) => fixers.push(method_fixer(attr, &func, cx)),
            }
        }
        if tools.is_empty() && fixers.is_empty() {
            cx.error_spanned_by(
                block.impl_token,
                "this `#[toolset]` block has no `#[tool]` or `#[fixer]` method: mark the methods \
                 to offer, or remove `#[toolset]`",
            );
        }
        self.block = Some(block);
        let block = self.block.as_ref()?;
        let (tool_entries, tool_calls): (Vec<_>, Vec<_>) = tools.into_iter().flatten().unzip();
        let (fixer_entries, fixer_calls): (Vec<_>, Vec<_>) = fixers.into_iter().flatten().unzip();
        let collectors = collectors(&self.krate, &tool_calls, &fixer_calls);
        Some(quote! {
            #block

            impl #self_ty {
                #(#tool_entries)*
                #(#fixer_entries)*
                #collectors
            }
        })
    }

    fn fallback(self, errors: TokenStream) -> TokenStream {
        let Some(block) = self.block else {
            let item = self.item;
            return quote!(#errors #item);
        };
        // A trait impl or a generic block has no place for the collectors; the error says why.
        if block.trait_.is_some() || !block.generics.params.is_empty() {
            return quote!(#errors #block);
        }
        let self_ty = &*block.self_ty;
        let collectors = collectors(&self.krate, &[], &[]);
        quote! {
            #errors
            #block
            impl #self_ty {
                #collectors
            }
        }
    }
}

/// What a `#[toolset]` block can't be: a trait impl (the methods would be the trait's), generic
/// (each tool needs one concrete type).
fn check_block(block: &ItemImpl, cx: &Ctxt) {
    if let Some((_, path, _)) = &block.trait_ {
        cx.error_spanned_by(
            path,
            "`#[toolset]` goes on an inherent `impl` block, not a trait impl",
        );
    }
    if !block.generics.params.is_empty() {
        cx.error_spanned_by(
            &block.generics,
            "a `#[toolset]` block can't be generic: its tools are called with values parsed at \
             run time, so the type must be concrete",
        );
    }
}

/// The entry of one `#[tool]` method, and the expression that calls it in `tools`.
fn method_tool(
    attr: TokenStream,
    func: &ItemFn,
    self_ty: &Type,
    cx: &Ctxt,
) -> Option<(TokenStream, TokenStream)> {
    let before = cx.error_count();
    let tool = ToolFn::from_item(func, true, cx);
    let grammar_errors = cx.error_count();
    let args = parse_all(cx, attr, ToolArgs::parse);
    if cx.error_count() == grammar_errors {
        valid::tool(&args, &tool, cx);
    }
    if cx.error_count() > before {
        return None;
    }
    let entry = entry_ident("tool", &tool.head.ident);
    let cfgs = &tool.head.cfgs;
    let call =
        quote!(#(#cfgs)* __agent_errors_list.push(Self::#entry(::std::sync::Arc::clone(&self))););
    Some((expand::method_tool(&args, &tool, self_ty), call))
}

/// The entry of one `#[fixer]` method, and the expression that calls it in `fixers`.
fn method_fixer(attr: TokenStream, func: &ItemFn, cx: &Ctxt) -> Option<(TokenStream, TokenStream)> {
    let before = cx.error_count();
    let fixer = FixerFn::from_item(func, true, cx);
    let args = parse_all(cx, attr, FixerArgs::parse);
    if cx.error_count() > before {
        return None;
    }
    let p = private(&args.krate);
    let ident = &fixer.head.ident;
    let cfgs = &fixer.head.cfgs;
    let entry = entry_ident("fixer", ident);
    let name = match &args.name {
        Some(lit) => lit.value(),
        None => syn::ext::IdentExt::unraw(ident).to_string(),
    };
    let this = syn::Ident::new("__agent_errors_this", Span::mixed_site());
    let request = syn::Ident::new("__agent_errors_request", Span::mixed_site());
    let target = match fixer.receiver {
        Receiver::Ref => quote!(#this.#ident),
        Receiver::None => quote!(Self::#ident),
    };
    let body = if fixer.is_async {
        quote_spanned! {ident.span()=>
            #p::async_fixer(#name, move |#request| {
                let #this = ::std::sync::Arc::clone(&#this);
                async move { #target(#request).await }
            })
        }
    } else {
        quote_spanned!(ident.span()=> #p::fixer(#name, move |#request| #target(#request)))
    };
    let entry_fn = quote! {
        #(#cfgs)*
        #[doc(hidden)]
        #[allow(dead_code, non_snake_case, unused_variables)]
        fn #entry(#this: ::std::sync::Arc<Self>) -> #p::FixerDef {
            #body
        }
    };
    let call =
        quote!(#(#cfgs)* __agent_errors_list.push(Self::#entry(::std::sync::Arc::clone(&self))););
    Some((entry_fn, call))
}

/// `tools` and `fixers`: the block's tools and fixers on one shared instance.
fn collectors(krate: &Path, tools: &[TokenStream], fixers: &[TokenStream]) -> TokenStream {
    let p = private(krate);
    quote! {
        /// The tools of this `#[toolset]` block, each calling its method on this instance.
        #[allow(dead_code, unused_mut, clippy::vec_init_then_push)]
        pub fn tools(self: ::std::sync::Arc<Self>) -> ::std::vec::Vec<#p::ToolDef> {
            let mut __agent_errors_list = ::std::vec::Vec::new();
            #(#tools)*
            __agent_errors_list
        }

        /// The fixers of this `#[toolset]` block, each calling its method on this instance.
        #[allow(dead_code, unused_mut, clippy::vec_init_then_push)]
        pub fn fixers(self: ::std::sync::Arc<Self>) -> ::std::vec::Vec<#p::FixerDef> {
            let mut __agent_errors_list = ::std::vec::Vec::new();
            #(#fixers)*
            __agent_errors_list
        }
    }
}
