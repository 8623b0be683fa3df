use agent_errors::prelude::*;

/// A path that names nothing is reported on the string that gave it.
#[tool(crate = "nowhere::agent_errors")]
fn lost(x: u32) -> u32 {
    x
}

fn main() {
    let _ = agent_errors::policy!(crate = "crate::sdk", execution = retry(2));
}
