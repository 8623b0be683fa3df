use agent_errors::prelude::*;

/// Looks something up.
#[tool(on_error(execution = escalate, run_breaker = retry(3)))]
async fn lookup(id: u64) -> u64 {
    id
}

/// Finds something.
#[tool(on_error(run_breaker = [remove_tool], not_found = escalate))]
async fn find(id: u64) -> u64 {
    id
}

/// Reads something.
#[tool(on_error(run_breaker = remove_tool(per_tool)))]
async fn read(id: u64) -> u64 {
    id
}

fn main() {
    let _twice = policy!(run_breaker = stop_run, run_breaker = remove_tool);
    let _empty = policy!(run_breaker = remove_tool());
    let _misspelt = policy!(runbreaker = remove_tool);
}
