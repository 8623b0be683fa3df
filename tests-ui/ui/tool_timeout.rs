use agent_errors::prelude::*;

/// Looks something up.
#[tool(timeout = 30)]
async fn lookup(key: String) -> String {
    key
}

/// Looks something else up.
#[tool(timeout = "0s")]
async fn other(key: String) -> String {
    key
}

fn main() {}
