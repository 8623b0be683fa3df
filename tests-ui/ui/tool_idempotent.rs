use agent_errors::prelude::*;

/// Charges a card.
#[tool(idempotent = 3)]
async fn charge(cents: u64) -> u64 {
    cents
}

/// Looks a price up.
#[tool(idempotent, idempotent)]
async fn price(item: String) -> String {
    item
}

/// Refunds a charge.
#[tool(on_error(outcome_unknown = retry(2)))]
async fn refund(cents: u64) -> u64 {
    cents
}

fn main() {}
