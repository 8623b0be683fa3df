use agent_errors::prelude::*;

#[fixer]
fn nothing_to_fix() -> Result<Fix, FixerError> {
    Err(FixerError::throw("no request"))
}

#[fixer]
async fn too_much(request: FixRequest, attempt: u32, tool: String) -> Result<Fix, FixerError> {
    let _ = (attempt, tool);
    Ok(Fix::args(request.raw_args))
}

fn main() {}
