//! The macro crate keeps its own list of policy keys (it can't depend on the runtime), so this
//! test holds that list against the runtime's `PolicyKey::all()` and fails when either side
//! gains, loses, renames or reorders a key, or when the macros' idea of which keys `retry` can
//! help stops matching the runtime's retryable kinds.

use agent_errors::{ErrorKind, policy::PolicyKey};

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
