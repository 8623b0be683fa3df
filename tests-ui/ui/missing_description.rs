use agent_errors::prelude::*;

#[tool(on_error(execution = retry(3)))]
async fn lookup(id: u64) -> u64 {
    id
}

fn main() {}
