use agent_errors::prelude::*;

/// Reads a bare context.
#[tool]
fn bare(user: Ctx) -> String {
    String::new()
}

/// `#[args]` is the whole object, so it can't have company.
#[tool]
fn place(#[args] order: Order, note: String) -> String {
    format!("{} {note}", order.item)
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Order {
    item: String,
}

fn main() {}
