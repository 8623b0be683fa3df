use agent_errors::prelude::*;

/// A plain function with a fixer's signature, but no `#[fixer]`.
fn repair(request: FixRequest) -> Result<Fix, FixerError> {
    Ok(Fix::args(request.raw_args.clone()))
}

fn main() {
    let _ = repair;
    let _fixers = fixers![repair];
}
