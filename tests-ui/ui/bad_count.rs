use agent_errors::prelude::*;

/// Looks something up.
#[tool(on_error(
    execution = retry(-1),
    timeout = retry("3"),
    quota = retry(2.5),
    invalid_args = fix(agent = "json_fixer", retries = 0),
))]
async fn lookup(id: u64) -> u64 {
    id
}

fn main() {}
