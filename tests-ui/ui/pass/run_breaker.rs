//! The per-run breaker's rule, in a tool's `on_error`, in `policy!` and counted per kind.

use agent_errors::prelude::*;

/// Looks an order up.
#[tool(on_error(execution = [retry(3), escalate], run_breaker = remove_tool(per_kind)))]
async fn lookup(id: u64) -> u64 {
    id
}

fn main() {
    let _ = tools![lookup];
    let _ = policy!(run_breaker = stop_run);
    let _ = policy!(execution = escalate, run_breaker = remove_tool);
}
