//! A crate without `defaults!`: its tools inherit no crate-wide policy.

use agent_errors::policy::{Action, Policy, PolicyKey};
use agent_errors::prelude::*;

/// Doubles a number.
#[tool(on_error(execution = retry(2)))]
fn double(n: i32) -> i32 {
    n * 2
}

mod inner {
    /// Says nothing.
    #[agent_errors::tool]
    pub async fn quiet() {}
}

#[test]
fn tools_of_a_crate_without_defaults_inherit_none() {
    let tools = tools![double, inner::quiet];
    assert_eq!(tools[0].crate_defaults(), None);
    assert_eq!(tools[1].crate_defaults(), None);
    assert_eq!(
        tools[0].policy(),
        &Policy::new().on(PolicyKey::Execution, Action::retry(2).unwrap())
    );
}
