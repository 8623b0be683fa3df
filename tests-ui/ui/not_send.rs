use std::rc::Rc;

use agent_errors::prelude::*;

/// Holds an `Rc` across an await, so its future can't move between threads.
#[tool]
async fn shared(text: String) -> String {
    let shared = Rc::new(text);
    tokio::task::yield_now().await;
    shared.to_string()
}

fn main() {}
