//! A `#[tool]`'s entry, free fn or `#[toolset]` method: its argument struct, the fn that
//! parses the arguments and starts the call, and the static facts the runtime's `tool_def` is
//! handed.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{Ident, Type};

use crate::ast::{FnHead, Output, Param, ParamSource, Receiver, ToolFn};
use crate::attr::{OutputCheckValue, ToolArgs};
use crate::valid;

use super::policy::{optional_duration, optional_run_breaker, policy_table};
use super::{crate_defaults, description, entry_ident, path_string, private};

/// The entry function of a `#[tool]`, returning its `ToolDef`: the argument struct, a plain fn
/// that parses the arguments and starts the call, and the static facts, handed to the runtime's
/// `tool_def`.
pub(crate) fn tool(args: &ToolArgs, func: &ToolFn) -> TokenStream {
    let p = &private(&args.krate);
    let FnHead { ident, vis, cfgs } = &func.head;
    let entry = entry_ident("tool", ident);
    let parts = ToolParts::new(args, func, None);
    let ToolParts {
        items,
        raw,
        ext,
        prelude,
        start,
        requires,
        ..
    } = &parts;
    let crate_defaults = crate_defaults(p);
    quote! {
        #(#cfgs)*
        #[doc(hidden)]
        #[allow(dead_code, non_snake_case)]
        #vis fn #entry() -> #p::ToolDef {
            #items

            fn __agent_errors_call(#raw: &str, #ext: &#p::Extensions) -> #p::CallResult {
                #prelude
                #start
            }

            #p::tool_def(
                &__AGENT_ERRORS_TOOL,
                #p::schema::<__AgentErrorsArgs>,
                __agent_errors_call,
                #crate_defaults,
            )
            #requires
        }
    }
}

/// The hidden associated fn of a `#[tool]` method in a `#[toolset]` block: its `ToolDef` on the
/// shared instance. Nested items can't name `Self`, so they name `self_ty`.
pub(crate) fn method_tool(args: &ToolArgs, func: &ToolFn, self_ty: &Type) -> TokenStream {
    let p = &private(&args.krate);
    let FnHead { ident, cfgs, .. } = &func.head;
    let entry = entry_ident("tool", ident);
    let parts = ToolParts::new(args, func, Some(self_ty));
    let ToolParts {
        items,
        raw,
        ext,
        prelude,
        start,
        this,
        requires,
    } = &parts;
    let crate_defaults = crate_defaults(p);
    quote! {
        #(#cfgs)*
        #[doc(hidden)]
        #[allow(dead_code, non_snake_case)]
        fn #entry(#this: ::std::sync::Arc<Self>) -> #p::ToolDef {
            #items

            fn __agent_errors_call(
                #this: &::std::sync::Arc<#self_ty>,
                #raw: &str,
                #ext: &#p::Extensions,
            ) -> #p::CallResult {
                #prelude
                let #this = ::std::sync::Arc::clone(#this);
                #start
            }

            #p::method_tool_def(
                &__AGENT_ERRORS_TOOL,
                #p::schema::<__AgentErrorsArgs>,
                #this,
                __agent_errors_call,
                #crate_defaults,
            )
            #requires
        }
    }
}

/// What a tool's entry is made of, free fn or method alike.
struct ToolParts {
    /// The argument type `__AgentErrorsArgs` and the static `__AGENT_ERRORS_TOOL`.
    items: TokenStream,
    /// The names of the call fn's parameters.
    raw: Ident,
    ext: Ident,
    this: Ident,
    /// Statements that parse the arguments and read the context values.
    prelude: TokenStream,
    /// The expression that starts the call.
    start: TokenStream,
    /// `.requires_context::<T>()` for each `Ctx<T>` parameter, so a run missing one is refused
    /// when it starts.
    requires: TokenStream,
}

impl ToolParts {
    fn new(args: &ToolArgs, func: &ToolFn, self_ty: Option<&Type>) -> Self {
        let p = &private(&args.krate);
        let ident = &func.head.ident;
        let args_var = Ident::new("__agent_errors_args", Span::mixed_site());
        let raw = Ident::new("__agent_errors_raw", Span::mixed_site());
        let ext = Ident::new("__agent_errors_ext", Span::mixed_site());
        let this = Ident::new("__agent_errors_this", Span::mixed_site());
        let mut contexts = Vec::new();
        let mut requires = TokenStream::new();
        let call_args: Vec<TokenStream> = func
            .params
            .iter()
            .map(|param| match &param.source {
                ParamSource::Field => {
                    let field = &param.ident;
                    quote!(#args_var.#field)
                }
                ParamSource::Whole => quote!(#args_var),
                ParamSource::Context(held) => {
                    let var = format_ident!("__agent_errors_ctx_{}", param.ident.unraw());
                    let var = Ident::new(&var.to_string(), Span::mixed_site());
                    // Spanned on the held type: one that is not `Send + Sync` is reported there.
                    let read = quote_spanned!(held.span()=> #p::context::<#held>);
                    contexts.push(quote!(let #var = #read(#ext, #raw)?;));
                    requires.extend(quote!(.requires_context::<#held>()));
                    quote!(#var)
                }
            })
            .collect();
        let mut call = match (self_ty, func.receiver) {
            (Some(_), Receiver::Ref) => quote!(#this.#ident(#(#call_args),*)),
            (Some(ty), Receiver::None) => quote!(<#ty>::#ident(#(#call_args),*)),
            (None, _) => quote!(#ident(#(#call_args),*)),
        };
        if func.is_async {
            call = quote!(#call.await);
        }
        let body = call_body(p, func, call);
        // Spanned on the fn's name: a future (or a blocking closure) that is not `Send` is
        // reported there. Every plain `fn` runs on the blocking pool, marked `blocking` or not:
        // one that blocks its thread would otherwise hold the runtime's thread, and its
        // `timeout` could never fire.
        let start = if args.blocking.is_some() || !func.is_async {
            quote_spanned!(ident.span()=> #p::call_blocking(move || { #body }))
        } else {
            quote_spanned!(ident.span()=> #p::call(async move { #body }))
        };
        let prelude = quote! {
            let #args_var: __AgentErrorsArgs = #p::parse_args(#raw)?;
            #(#contexts)*
        };
        ToolParts {
            items: tool_items(args, func),
            raw,
            ext,
            this,
            prelude,
            start,
            requires,
        }
    }
}

/// The call's result as the model's text, or the boxed error. The conversions are spanned on
/// the return type, so a type that is not `Serialize` (or an error that can't be boxed) is
/// reported on it rather than on the attribute.
fn call_body(p: &TokenStream, func: &ToolFn, call: TokenStream) -> TokenStream {
    let return_span = match &func.output {
        Output::Result(ty) | Output::Plain(ty) => ty.span(),
        Output::Unit => func.head.ident.span(),
    };
    let output = quote_spanned!(return_span=> #p::output);
    let error = quote_spanned!(return_span=> #p::error);
    let value = Ident::new("value", Span::mixed_site().located_at(return_span));
    match &func.output {
        Output::Result(_) => quote_spanned! {return_span=>
            match #call {
                ::std::result::Result::Ok(#value) => #output(&#value),
                ::std::result::Result::Err(#value) => ::std::result::Result::Err(#error(#value)),
            }
        },
        Output::Plain(_) | Output::Unit => quote_spanned! {return_span=>
            let #value = #call;
            #output(&#value)
        },
    }
}

/// The argument type and the static `ToolSpec`. An `#[args]` parameter's own type is the
/// argument type, so its fields are the schema's top level.
fn tool_items(args: &ToolArgs, func: &ToolFn) -> TokenStream {
    let p = &private(&args.krate);
    let name = valid::tool_name(args, func);
    let description = match &args.description {
        Some(lit) => quote!(#lit),
        None => description(func.doc_description()),
    };
    let whole = func
        .params
        .iter()
        .find(|param| matches!(param.source, ParamSource::Whole));
    let args_type = args_type(p, &name, func, whole);
    let (policy, run_breaker) = match &args.on_error {
        Some(node) => (policy_table(p, node), optional_run_breaker(p, node)),
        None => (quote!(&[]), quote!(::core::option::Option::None)),
    };
    let recommended = args.on_error.as_ref().is_some_and(|node| node.recommended);
    let optional = args.optional;
    let idempotent = args.idempotent;
    let approval_required = args.approval.is_some();
    let timeout = optional_duration(args.timeout.as_ref());
    let breaker = match &args.breaker {
        Some(key) => quote!(::core::option::Option::Some(#key)),
        None => quote!(::core::option::Option::None),
    };
    let reconcile = match &args.reconcile {
        Some(name) => quote!(::core::option::Option::Some(#name)),
        None => quote!(::core::option::Option::None),
    };
    let output_check = output_check_spec(p, args.output_check.as_ref());
    let unique_keys = whole.is_none()
        && func
            .params
            .iter()
            .filter(|param| matches!(param.source, ParamSource::Field))
            .all(|param| refuses_repeated_keys(&param.ty));
    quote! {
        #args_type

        static __AGENT_ERRORS_TOOL: #p::ToolSpec = #p::ToolSpec {
            name: #name,
            description: #description,
            policy: #policy,
            run_breaker: #run_breaker,
            recommended: #recommended,
            optional: #optional,
            idempotent: #idempotent,
            approval_required: #approval_required,
            timeout: #timeout,
            breaker: #breaker,
            unique_keys: #unique_keys,
            output_check: #output_check,
            reconcile: #reconcile,
        };
    }
}

/// The type a call's arguments are read into: an `#[args]` parameter's own, or a struct of the
/// function's parameters, named `name` in the schema.
fn args_type(p: &TokenStream, name: &str, func: &ToolFn, whole: Option<&Param>) -> TokenStream {
    match whole {
        Some(param) => {
            let ty = &param.ty;
            // Spanned on the type: one without `Deserialize` or `JsonSchema` is reported there.
            quote_spanned!(ty.span()=> type __AgentErrorsArgs = #ty;)
        }
        None => {
            let fields = func
                .params
                .iter()
                .filter(|param| matches!(param.source, ParamSource::Field))
                .map(
                    |Param {
                         ident, ty, docs, ..
                     }| { quote_spanned!(ty.span()=> #(#docs)* #ident: #ty) },
                );
            let serde_crate = format!("{}::serde", path_string(p));
            let schemars_crate = format!("{}::schemars", path_string(p));
            quote! {
                #[derive(#p::serde::Deserialize, #p::schemars::JsonSchema)]
                #[serde(crate = #serde_crate, deny_unknown_fields)]
                #[schemars(crate = #schemars_crate, title = #name)]
                struct __AgentErrorsArgs {
                    #(#fields,)*
                }
            }
        }
    }
}

/// The `ToolSpec`'s output check: none, a ready-made one with the kind of error it reports, or
/// the user's function.
fn output_check_spec(p: &TokenStream, spec: Option<&OutputCheckValue>) -> TokenStream {
    match spec {
        None => quote!(::core::option::Option::None),
        Some(OutputCheckValue::Ready { check, kind }) => {
            let variant = match check.unraw().to_string().as_str() {
                "error_member" => quote!(ErrorMember),
                _ => quote!(OkFalse),
            };
            let kind = Ident::new(kind, check.span());
            quote!(::core::option::Option::Some(
                #p::OutputCheckSpec::#variant(#p::ErrorKind::#kind)
            ))
        }
        // Spanned at the path: a function of the wrong type is an error there.
        Some(OutputCheckValue::Custom(path)) => quote_spanned!(path.span()=>
            ::core::option::Option::Some(#p::OutputCheckSpec::Custom(#path))
        ),
    }
}

/// Whether serde reads `ty` so that no key can be given twice anywhere inside it, known from
/// its spelling alone: a scalar, a `String`, or an `Option`, `Vec` or `Box` of one. Anything
/// else (a map, a `serde_json::Value`, a user's type that may hold either) is not known to,
/// and the runtime checks its arguments for repeated keys itself.
fn refuses_repeated_keys(ty: &Type) -> bool {
    const SCALARS: &[&str] = &[
        "bool", "char", "String", "u8", "u16", "u32", "u64", "u128", "usize", "i8", "i16", "i32",
        "i64", "i128", "isize", "f32", "f64",
    ];
    const WRAPPERS: &[&str] = &["Option", "Vec", "Box"];
    let Type::Path(path) = ty else {
        return false;
    };
    if path.qself.is_some() {
        return false;
    }
    // `String` or `std::string::String`: a path into the standard library, or one word.
    let segments = &path.path.segments;
    let std_path = segments
        .first()
        .is_some_and(|first| ["std", "core", "alloc"].contains(&first.ident.to_string().as_str()));
    if segments.len() > 1 && !std_path {
        return false;
    }
    let Some(last) = segments.last() else {
        return false;
    };
    let name = last.ident.to_string();
    match &last.arguments {
        syn::PathArguments::None => SCALARS.contains(&name.as_str()),
        syn::PathArguments::AngleBracketed(generic) if WRAPPERS.contains(&name.as_str()) => {
            match generic.args.iter().collect::<Vec<_>>().as_slice() {
                [syn::GenericArgument::Type(inner)] => refuses_repeated_keys(inner),
                _ => false,
            }
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::refuses_repeated_keys;

    fn refuses(ty: &str) -> bool {
        refuses_repeated_keys(&syn::parse_str(ty).expect("a type"))
    }

    #[test]
    fn only_types_that_cannot_hold_an_object_are_trusted_to_refuse_repeated_keys() {
        for plain in [
            "u32",
            "String",
            "std::string::String",
            "Option<Vec<f64>>",
            "Box<bool>",
        ] {
            assert!(refuses(plain), "{plain}");
        }
        for open in [
            "serde_json::Value",
            "Value",
            "HashMap<String, u32>",
            "Vec<Order>",
            "my::String",
            "Option<serde_json::Map<String, serde_json::Value>>",
            "(u32, u32)",
            "[u8; 4]",
        ] {
            assert!(!refuses(open), "{open}");
        }
    }
}
