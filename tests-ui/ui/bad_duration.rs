use agent_errors::prelude::*;

/// Looks something up.
#[tool(on_error(
    execution = retry(max_attempts = 3, initial = "10 seconds"),
    timeout = retry(max_attempts = 3, max = "0s"),
    quota = retry(max_attempts = 3, initial = 250),
))]
async fn lookup(id: u64) -> u64 {
    id
}

fn main() {}
