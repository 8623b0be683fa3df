use agent_errors::prelude::*;

/// Looks something up.
#[tool(on_error(invalid_args = fix(retries = 2)))]
async fn lookup(id: u64) -> u64 {
    id
}

fn main() {}
