use agent_errors::prelude::*;

/// Looks something up.
#[tool(on_error(execution = [throw, retry(2)]))]
async fn lookup(id: u64) -> u64 {
    id
}

fn main() {}
