use agent_errors::prelude::*;

/// A plain function, not a tool.
fn helper() -> u32 {
    1
}

fn main() {
    let _ = helper();
    let _tools = tools![helper];
}
