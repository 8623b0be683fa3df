use agent_errors::prelude::*;

/// Looks something up.
#[tool(name = "look up")]
async fn lookup(id: u64) -> u64 {
    id
}

/// Falls back to itself.
#[tool(on_error(execution = fallback(tool = "find")))]
async fn find(id: u64) -> u64 {
    id
}

fn main() {}
