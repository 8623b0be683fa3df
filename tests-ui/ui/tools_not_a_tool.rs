use agent_errors::prelude::*;

/// A plain function, not a tool.
fn helper() -> u32 {
    1
}

mod nested {
    /// Another plain function, named by its path.
    pub fn lookup() -> u32 {
        2
    }
}

fn main() {
    let _ = helper();
    let _ = nested::lookup();
    let _tools = tools![helper];
    let _tools = tools![nested::lookup];
}
