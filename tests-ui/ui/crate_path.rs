use agent_errors::prelude::*;

/// Not a string.
#[tool(crate = agent_errors)]
async fn unquoted(x: u32) -> u32 {
    x
}

/// Not a path.
#[tool(crate = "not a path")]
async fn spaced(x: u32) -> u32 {
    x
}

/// Given twice.
#[tool(crate = "::agent_errors", crate = "::agent_errors")]
fn twice(x: u32) -> u32 {
    x
}

#[fixer(crate = "1up")]
fn repair(request: FixRequest) -> Result<Fix, FixerError> {
    Ok(Fix::args(request.raw_args))
}

fn main() {
    let _ = agent_errors::policy!(crate = 3, execution = retry(2));
}
