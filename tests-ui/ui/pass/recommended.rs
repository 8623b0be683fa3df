//! The recommended preset in every form: the crate's defaults, a tool's `on_error`, `policy!`,
//! and `retry(n, when_safe)`.

use agent_errors::prelude::*;

agent_errors::defaults!(recommended, on_error(not_found = escalate));

/// Looks an order up.
#[tool(on_error(recommended, timeout = [retry(5, when_safe), escalate]))]
async fn lookup(id: u64) -> u64 {
    id
}

fn main() {
    let _ = tools![lookup];
    let _ = policy!(recommended);
    let _ = policy!(recommended, quota = [retry(max_attempts = 4, initial = "1s", when_safe), escalate]);
}
