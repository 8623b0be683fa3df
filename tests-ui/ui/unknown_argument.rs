use agent_errors::prelude::*;

/// Looks something up.
#[tool(on_error(
    execution = retry(attempts = 3),
    invalid_args = fix(agent = "json_fixer", tries = 2),
    not_found = fallback(name = "search"),
))]
async fn lookup(id: u64) -> u64 {
    id
}

/// Looks something else up.
#[tool(nme = "find")]
async fn find(id: u64) -> u64 {
    id
}

#[fixer(label = "x")]
fn repair(request: FixRequest) -> Result<Fix, FixerError> {
    Ok(Fix::args(request.raw_args))
}

fn main() {}
