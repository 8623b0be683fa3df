use agent_errors::prelude::*;

/// Looks something up.
#[tool(on_error(invalid_args = retry(3), auth = [retry(2), throw]))]
async fn lookup(id: u64) -> u64 {
    id
}

fn main() {}
