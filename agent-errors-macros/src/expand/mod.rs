//! Code generation. Paths into the runtime go through its hidden `__private` module, found at
//! `::agent_errors` or at the `crate = "..."` path the user gave; the rest are absolute
//! (`::std::...`). The one exception is on purpose: a tool entry looks up its crate's
//! `defaults!` with a `use crate::*` confined to a block (see [`crate_defaults`]).
//!
//! Per tool, the output is small and calls nothing generic that does not depend on the tool's
//! own types: the work shared by every tool is done by plain functions of the runtime.

mod policy;
mod tool;

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::ext::IdentExt;
use syn::{Ident, LitStr, Path};

use crate::ast::{Description, FixerFn, FnHead};

pub(crate) use policy::{defaults, policy, policy_actions, policy_keys};
pub(crate) use tool::{method_tool, tool};

/// `<crate>::__private`, the runtime's module for generated code.
pub(crate) fn private(krate: &Path) -> TokenStream {
    quote!(#krate::__private)
}

/// `<fn name>__is_not_a_<kind>__add_<kind>_attribute_to_its_definition`, spanned on the user's
/// identifier. A macro cannot see whether a function it is handed carries `#[tool]`, so
/// `tools![...]` names this entry and leaves the check to rustc: a plain function has no such
/// sibling, and rustc's "cannot find function" error, on the identifier in `tools![...]`, then
/// quotes a name that says what is wrong and how to fix it.
pub(crate) fn entry_ident(kind: &str, ident: &Ident) -> Ident {
    Ident::new(
        &format!(
            "{}__is_not_a_{kind}__add_{kind}_attribute_to_its_definition",
            ident.unraw()
        ),
        ident.span(),
    )
}

fn description(description: Option<Description>) -> TokenStream {
    match description {
        Some(Description::Text(text)) => quote!(#text),
        Some(Description::Concat(pieces)) => {
            let mut joined = Vec::new();
            for (i, piece) in pieces.into_iter().enumerate() {
                if i > 0 {
                    joined.push(quote!("\n"));
                }
                joined.push(piece);
            }
            quote!(::std::concat!(#(#joined),*))
        }
        None => quote!(""),
    }
}

/// The crate's `defaults!` policy, if it declared one. Isolated in a block so the glob import
/// that finds the crate's trait cannot shadow names the user wrote.
pub(crate) fn crate_defaults(p: &TokenStream) -> TokenStream {
    quote!({
        #[allow(unused_imports)]
        use crate::*;
        #[allow(unused_imports)]
        use #p::NoCrateDefaults as _;
        #p::DefaultsProbe.__agent_errors_crate_defaults()
    })
}

/// The string serde and schemars read for their `crate = "..."`.
fn path_string(path: &TokenStream) -> String {
    path.to_string().replace(' ', "")
}

/// The entry function of a `#[fixer]`, returning its `FixerDef`.
pub(crate) fn fixer(krate: &Path, name: Option<&LitStr>, func: &FixerFn) -> TokenStream {
    let p = &private(krate);
    let FnHead { ident, vis, cfgs } = &func.head;
    let entry = entry_ident("fixer", ident);
    let name = match name {
        Some(lit) => lit.value(),
        None => ident.unraw().to_string(),
    };
    let constructor = if func.is_async {
        quote_spanned!(ident.span()=> #p::async_fixer)
    } else {
        quote_spanned!(ident.span()=> #p::fixer)
    };
    quote! {
        #(#cfgs)*
        #[doc(hidden)]
        #[allow(dead_code, non_snake_case)]
        #vis fn #entry() -> #p::FixerDef {
            #constructor(#name, #ident)
        }
    }
}

/// An entry function that only keeps other code compiling while the attribute's own error is
/// reported: the crate does not build, so its body never runs.
pub(crate) fn placeholder_entry(
    krate: &Path,
    kind: &str,
    head: &FnHead,
    returns: &str,
) -> TokenStream {
    let p = private(krate);
    let FnHead { ident, vis, cfgs } = head;
    let entry = entry_ident(kind, ident);
    let returns = Ident::new(returns, Span::call_site());
    quote! {
        #(#cfgs)*
        #[doc(hidden)]
        #[allow(dead_code, non_snake_case)]
        #vis fn #entry() -> #p::#returns {
            ::std::unreachable!("the `#[{}]` attribute reported a compile error", #kind)
        }
    }
}

/// `tools![...]` and `fixers![...]`: a `Vec` of the named entries.
pub(crate) fn list(krate: &Path, paths: &[Path], kind: &str, element: &str) -> TokenStream {
    let p = private(krate);
    let element = Ident::new(element, Span::call_site());
    let calls = paths.iter().map(|path| {
        let mut path = path.clone();
        if let Some(last) = path.segments.last_mut() {
            last.ident = entry_ident(kind, &last.ident);
        }
        quote!(#path())
    });
    quote!(<::std::vec::Vec<#p::#element>>::from([#(#calls),*]))
}
