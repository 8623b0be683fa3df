use agent_errors::prelude::*;

/// Looks something up.
#[tool(on_error(invalid_args = fix(builtin, agent = "json_fixer")))]
async fn lookup(id: u64) -> u64 {
    id
}

/// Looks something else up.
#[tool(on_error(invalid_args = [fix(builtin = true), fix(builtin, builtin), fix(builtin, retries = 0)]))]
async fn other(id: u64) -> u64 {
    id
}

fn main() {
    let _ = agent_errors::policy!(invalid_args = fix(builtin, agent = "json_fixer"));
}
