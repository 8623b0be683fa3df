use agent_errors::prelude::*;

/// Looks something up.
#[tool(on_error(recommended = true))]
async fn lookup(id: u64) -> u64 {
    id
}

fn main() {
    let _twice = policy!(recommended, recommended);
    let _valued = policy!(timeout = retry(3, when_safe = true));
    let _flag_twice = policy!(timeout = retry(3, when_safe, when_safe));
}
