use agent_errors::prelude::*;

/// Looks up a word.
#[tool]
async fn helpers(word: String) -> String {
    word
}

/// A plain function, not a tool, beside a tool of a similar name.
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
    let _tools = tools![helpers];
}
