use agent_errors::prelude::*;

/// Looks something up.
#[tool(
    name = "lookup",
    name = "find",
    description = "Finds things.",
    description = "Looks things up.",
    on_error(execution = retry(2), execution = escalate),
)]
async fn lookup(id: u64) -> u64 {
    id
}

fn main() {}
