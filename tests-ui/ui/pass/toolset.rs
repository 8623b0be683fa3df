#![deny(warnings)]

use std::sync::Arc;

use agent_errors::prelude::*;

struct Pool;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Order {
    /// What to buy.
    item: String,
}

struct User(String);

#[toolset]
impl Pool {
    /// Looks something up.
    #[agent_errors::tool(timeout = "5s", on_error(execution = [retry(2), escalate]))]
    async fn lookup(&self, id: u64, user: Ctx<User>) -> Result<String, std::io::Error> {
        Ok(format!("{id} for {}", user.0))
    }

    /// Places an order; the order is the whole argument object.
    #[tool]
    fn place(&self, #[args] order: Order) -> String {
        order.item
    }

    /// Waits on a synchronous client, with the run's user.
    #[tool(blocking)]
    fn audit(&self, id: u64, user: Ctx<User>) -> String {
        std::thread::yield_now();
        format!("{id} audited for {}", user.0)
    }

    /// No state needed.
    #[tool(name = "ping")]
    fn ping_tool() -> &'static str {
        "pong"
    }

    #[fixer(name = "repair")]
    async fn repair_args(&self, request: FixRequest) -> Result<Fix, FixerError> {
        Ok(Fix::args(request.raw_args))
    }
}

fn main() {
    let pool = Arc::new(Pool);
    assert_eq!(Arc::clone(&pool).tools().len(), 4);
    assert_eq!(pool.fixers().len(), 1);
}
