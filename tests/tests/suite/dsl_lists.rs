//! The macro crate keeps its own lists of policy keys and of actions (it can't depend on the
//! runtime), so these tests hold each against the runtime's and fail when either side gains,
//! loses, renames or reorders an entry, or when the two disagree on what an entry means: which
//! keys `retry` can help, which actions end a ladder.

use agent_errors::__private::{Rung, every_action};
use agent_errors::ErrorKind;
use agent_errors::policy::{Action, PolicyKey};

#[test]
fn the_macros_know_exactly_the_runtimes_policy_keys() {
    // Each entry is expanded by the same code that expands a key in a policy: a key the runtime
    // does not have is a compile error here.
    let from_macros: Vec<(&str, PolicyKey, bool)> = agent_errors::__private::policy_keys!().into();

    let macro_keys: Vec<PolicyKey> = from_macros.iter().map(|&(_, key, _)| key).collect();
    let runtime_keys: Vec<PolicyKey> = PolicyKey::all().collect();
    assert_eq!(
        macro_keys, runtime_keys,
        "the macros' keys and the runtime's differ"
    );

    for (name, key, can_retry) in from_macros {
        assert_eq!(name, key.as_str(), "the macros spell `{key}` as `{name}`");
        let retryable = match key {
            PolicyKey::InvalidArgs => false,
            PolicyKey::Execution => ErrorKind::ALL.iter().any(|kind| kind.is_retryable()),
            PolicyKey::Kind(kind) => kind.is_retryable(),
        };
        assert_eq!(
            can_retry, retryable,
            "the macros think `retry` can help `{name}`: {can_retry}; the runtime: {retryable}"
        );
    }
}

/// An action's name as the DSL writes it: its `Display` up to its arguments.
fn written_name(action: &Action) -> String {
    let written = action.to_string();
    written.split('(').next().unwrap_or_default().to_owned()
}

#[test]
fn the_macros_know_exactly_the_runtimes_actions() {
    // Each entry is read from its written form by the parser a policy's actions go through and
    // expanded as a policy's rung is: an action the runtime does not have is a compile error here.
    let from_macros: Vec<(&str, Rung, bool)> = agent_errors::__private::policy_actions!().into();

    let macro_names: Vec<&str> = from_macros.iter().map(|&(name, _, _)| name).collect();
    let runtime_names: Vec<String> = every_action().iter().map(written_name).collect();
    assert_eq!(
        macro_names, runtime_names,
        "the macros' actions and the runtime's differ"
    );

    for (name, rung, terminal) in from_macros {
        let action = rung.action();
        assert_eq!(
            written_name(&action),
            name,
            "the macros' `{name}` builds the runtime's `{action}`"
        );
        assert_eq!(
            terminal,
            action.is_terminal(),
            "the macros think `{name}` ends a ladder: {terminal}; the runtime: {}",
            action.is_terminal()
        );
    }
}
