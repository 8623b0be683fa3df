use agent_errors::prelude::*;

/// Not a function.
#[tool]
struct Lookup {
    id: u64,
}

#[fixer]
const REPAIR: u8 = 0;

fn main() {}
