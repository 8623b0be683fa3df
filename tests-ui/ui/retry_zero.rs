use agent_errors::prelude::*;

/// Looks something up.
#[tool(on_error(execution = retry(0)))]
async fn lookup(id: u64) -> u64 {
    id
}

fn main() {}
