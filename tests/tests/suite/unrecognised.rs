//! Failures nothing recognises, and the text that names what they are: a status written in a
//! tool's error text is read as that status, and a `retry` that cannot retry says so.

use std::sync::atomic::{AtomicU32, Ordering};

use agent_errors::prelude::*;
use agent_errors::testing::ScriptedModel;
use agent_errors::{ErrorKind, Event};

static DOWN_CALLS: AtomicU32 = AtomicU32::new(0);

/// Reads the warehouse's stock.
#[tool(on_error(execution = retry(3)))]
async fn stock_behind_a_503() -> Result<u32, String> {
    DOWN_CALLS.fetch_add(1, Ordering::SeqCst);
    Err("warehouse API down (503)".to_owned())
}

static VAGUE_CALLS: AtomicU32 = AtomicU32::new(0);

/// Reads the warehouse's stock.
#[tool(on_error(execution = retry(3)))]
async fn stock_that_says_no() -> Result<u32, String> {
    VAGUE_CALLS.fetch_add(1, Ordering::SeqCst);
    Err("the warehouse said no".to_owned())
}

#[tokio::test(start_paused = true)]
async fn a_status_in_a_tools_error_text_is_retried_as_that_status() {
    let model = ScriptedModel::new().tool_call("stock_behind_a_503", "{}");
    let agent = Agent::builder("a")
        .model(model)
        .tools(tools![stock_behind_a_503])
        .build()
        .unwrap();

    let outcome = agent.run_with_report("stock?").await;

    // Retried as the 503 it names, until `retry(3)` ran out.
    let error = outcome.result.unwrap_err();
    let terminated = error.terminated().expect("the retries ran out");
    assert_eq!(terminated.kind, ErrorKind::Transient);
    assert_eq!(
        DOWN_CALLS.load(Ordering::SeqCst),
        3,
        "retry(3): three calls"
    );
    let kinds: Vec<ErrorKind> = outcome
        .report
        .named("tool_retry")
        .filter_map(|event| match event {
            Event::ToolRetry { kind, .. } => Some(*kind),
            _ => None,
        })
        .collect();
    assert_eq!(kinds, [ErrorKind::Transient, ErrorKind::Transient]);
    assert_eq!(outcome.report.count("unknown_not_retried"), 0);
}

#[tokio::test(start_paused = true)]
async fn a_retry_of_a_failure_nothing_recognises_says_so_once_per_run_and_tool() {
    let model = ScriptedModel::new()
        .tool_call("stock_that_says_no", "{}")
        .tool_call("stock_that_says_no", "{}")
        .text("no stock");
    let agent = Agent::builder("a")
        .model(model)
        .tools(tools![stock_that_says_no])
        .build()
        .unwrap();

    let outcome = agent.run_with_report("stock?").await;

    assert_eq!(outcome.result.unwrap(), "no stock");
    assert_eq!(VAGUE_CALLS.load(Ordering::SeqCst), 2, "never retried");
    let said: Vec<&Event> = outcome.report.named("unknown_not_retried").collect();
    assert_eq!(
        said,
        [&Event::UnknownNotRetried {
            tool: "stock_that_says_no".to_owned()
        }],
        "said once for the run, not once per call"
    );
}
