use agent_errors::prelude::*;

/// Looks something up.
#[tool(on_error(server_error = retry(max_attempts = 3, initial = "20s", max = "5s")))]
async fn lookup(id: u64) -> u64 {
    id
}

fn main() {}
