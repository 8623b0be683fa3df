//! `crate = "..."`: every macro expands against agent-errors reached through another path, here
//! a re-export, as a crate that renamed the dependency or wraps it in its own SDK would write.
//! (The macro crate's own tests check that such an expansion names nothing at `::agent_errors`.)

mod sdk {
    pub use agent_errors as runtime;
}

use std::time::Duration;

use sdk::runtime::policy::PolicyKey;
use sdk::runtime::{BoxError, Fix, FixRequest, FixerError, ToolDef};

sdk::runtime::defaults!(
    crate = "crate::sdk::runtime",
    on_error(execution = [retry(2), escalate]),
);

/// Doubles a number.
#[sdk::runtime::tool(
    crate = "crate::sdk::runtime",
    timeout = "5s",
    on_error(invalid_args = fix(agent = "trim")),
)]
async fn double(n: i64) -> i64 {
    n * 2
}

#[sdk::runtime::fixer(crate = "crate::sdk::runtime")]
fn trim(request: FixRequest) -> Result<Fix, FixerError> {
    Ok(Fix::args(request.raw_args.trim().to_owned()))
}

async fn call(tool: &ToolDef, raw: &str) -> Result<String, BoxError> {
    let running = sdk::runtime::testing::handler_of(tool)
        .call(raw)
        .map_err(BoxError::from)?;
    running.await
}

#[tokio::test]
async fn the_macros_expand_against_a_re_exported_runtime() {
    let tools = sdk::runtime::tools![crate = "crate::sdk::runtime", double];
    let fixers = sdk::runtime::fixers![crate = "crate::sdk::runtime", trim];
    let policy = sdk::runtime::policy!(crate = "crate::sdk::runtime", execution = retry(3));

    let tool = &tools[0];
    assert_eq!(tool.name(), "double");
    assert_eq!(tool.description(), "Doubles a number.");
    assert_eq!(tool.timeout(), Some(Duration::from_secs(5)));
    assert!(tool.policy().get(PolicyKey::InvalidArgs).is_some());
    assert!(
        tool.crate_defaults()
            .is_some_and(|defaults| defaults.get(PolicyKey::Execution).is_some())
    );
    assert_eq!(call(tool, r#"{"n": 21}"#).await.unwrap(), "42");
    assert_eq!(fixers[0].name(), "trim");
    assert_eq!(policy.entries().count(), 1);
}
