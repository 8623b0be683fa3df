use agent_errors::prelude::*;

#[fixer]
fn wrong_types(raw: String) -> Option<String> {
    Some(raw)
}

fn main() {}
