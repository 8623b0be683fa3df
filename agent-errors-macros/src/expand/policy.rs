//! Policies as code: the `PolicyTable` constant of a tool, a `Policy` expression, the
//! crate's `defaults!`, and the lists of keys and actions a test holds against the runtime's.

use proc_macro2::{Literal, Span, TokenStream};
use quote::quote;
use syn::{Ident, Path};

use crate::attr::{
    ACTIONS, ActionKind, ActionNode, DurationLit, Key, OnTripKind, PolicyNode, RunBreakerNode,
    written_action,
};

use super::private;

/// A `&'static PolicyTable` constant: entries in the order written.
pub(super) fn policy_table(p: &TokenStream, node: &PolicyNode) -> TokenStream {
    let entries = node.entries.iter().map(|entry| {
        let key = key(p, entry.key.key);
        let rungs = entry.ladder.actions.iter().map(|action| rung(p, action));
        quote!((#key, &[#(#rungs),*]))
    });
    quote!(&[#(#entries),*])
}

/// A `Policy` expression, entries in the order written.
pub(crate) fn policy(p: &TokenStream, node: &PolicyNode) -> TokenStream {
    let table = policy_table(p, node);
    let mut policy = quote!(#p::policy(const { #table }));
    if node.recommended {
        policy = quote!(#policy.with_recommended());
    }
    match &node.run_breaker {
        Some(written) => {
            let rule = run_breaker(p, written);
            quote!(#policy.run_breaker(#rule))
        }
        None => policy,
    }
}

/// `Some(rule)` for a policy's `run_breaker = ...`, `None` when it writes none: a constant.
pub(super) fn optional_run_breaker(p: &TokenStream, node: &PolicyNode) -> TokenStream {
    match &node.run_breaker {
        Some(written) => {
            let rule = run_breaker(p, written);
            quote!(::core::option::Option::Some(#rule))
        }
        None => quote!(::core::option::Option::None),
    }
}

/// The `RunBreakerRule` that `run_breaker = ...` writes, as a constant expression.
fn run_breaker(p: &TokenStream, written: &RunBreakerNode) -> TokenStream {
    let on_trip = match written.on_trip {
        OnTripKind::StopRun => quote!(#p::OnTrip::StopRun),
        OnTripKind::RemoveTool => quote!(#p::OnTrip::RemoveTool),
    };
    let rule = quote!(#p::RunBreakerRule::new(#on_trip));
    if written.per_kind {
        quote!(#rule.per_kind())
    } else {
        rule
    }
}

/// The runtime's `PolicyKey` for `key`.
pub(crate) fn key(p: &TokenStream, key: Key) -> TokenStream {
    match key.error_kind() {
        Some(kind) => {
            let kind = Ident::new(kind, Span::call_site());
            quote!(#p::PolicyKey::Kind(#p::ErrorKind::#kind))
        }
        None if key == Key::InvalidArgs => quote!(#p::PolicyKey::InvalidArgs),
        None => quote!(#p::PolicyKey::Execution),
    }
}

fn rung(p: &TokenStream, action: &ActionNode) -> TokenStream {
    match &action.kind {
        ActionKind::Retry {
            max_attempts,
            initial,
            max,
            when_safe,
        } => {
            let max_attempts = Literal::u32_unsuffixed(max_attempts.value);
            let initial = optional_duration(initial.as_ref());
            let max = optional_duration(max.as_ref());
            quote!(#p::Rung::Retry { max_attempts: #max_attempts, initial: #initial, max: #max, when_safe: #when_safe })
        }
        ActionKind::Fix { agent, retries } => {
            let retries = Literal::u32_unsuffixed(retries.as_ref().map_or(1, |count| count.value));
            quote!(#p::Rung::Fix { agent: #agent, retries: #retries })
        }
        ActionKind::Escalate => quote!(#p::Rung::Escalate),
        ActionKind::Throw => quote!(#p::Rung::Throw),
        ActionKind::Degrade => quote!(#p::Rung::Degrade),
        ActionKind::AskPerson => quote!(#p::Rung::AskPerson),
        ActionKind::Fallback { tool } => quote!(#p::Rung::Fallback(#tool)),
    }
}

pub(super) fn optional_duration(duration: Option<&DurationLit>) -> TokenStream {
    match duration {
        Some(d) => {
            let nanos = Literal::u64_unsuffixed(d.nanos);
            quote!(::std::option::Option::Some(::std::time::Duration::from_nanos(#nanos)))
        }
        None => quote!(::std::option::Option::None),
    }
}

/// `defaults!(...)`: the crate's trait that tool entries find through `use crate::*`, and the
/// check that it sits at the crate root.
pub(crate) fn defaults(krate: &Path, node: &PolicyNode) -> TokenStream {
    let p = &private(krate);
    let policy = policy(p, node);
    quote! {
        #[doc(hidden)]
        #[allow(dead_code)]
        pub(crate) trait __AgentErrorsCrateDefaults {
            fn __agent_errors_crate_defaults(self) -> ::std::option::Option<#p::Policy>;
        }

        impl __AgentErrorsCrateDefaults for #p::DefaultsProbe {
            fn __agent_errors_crate_defaults(self) -> ::std::option::Option<#p::Policy> {
                ::std::option::Option::Some(#policy)
            }
        }

        #[doc(hidden)]
        #[allow(non_camel_case_types, dead_code)]
        type __agent_errors_defaults_must_be_declared_at_the_crate_root = ();

        const _: crate::__agent_errors_defaults_must_be_declared_at_the_crate_root = ();
    }
}

/// `[(name, PolicyKey, can_retry), ...]` for every key the macros know, through the same
/// mapping policies use, so a test can hold it against the runtime's list.
pub(crate) fn policy_keys(krate: &Path) -> TokenStream {
    let p = &private(krate);
    let keys = Key::ALL.iter().map(|&k| {
        let name = k.name();
        let key = key(p, k);
        let can_retry = k.can_retry();
        quote!((#name, #key, #can_retry))
    });
    quote!([#(#keys),*])
}

/// `[(name, Rung, is_terminal), ...]` for every action the macros know, in the order their
/// messages list them: each read from its written form by the parser a policy's actions go
/// through and expanded as a policy's rung is, so a test can hold the macros' actions against
/// the runtime's.
pub(crate) fn policy_actions(krate: &Path) -> TokenStream {
    let p = &private(krate);
    let actions = ACTIONS.iter().map(|&name| {
        let written = written_action(name);
        match syn::parse_str::<ActionNode>(written) {
            Ok(action) => {
                let rung = rung(p, &action);
                let terminal = action.kind.is_terminal();
                quote!((#name, #rung, #terminal))
            }
            Err(error) => {
                let message = format!("the macros cannot read their own `{written}`: {error}");
                quote!(::core::compile_error!(#message))
            }
        }
    });
    quote!([#(#actions),*])
}
