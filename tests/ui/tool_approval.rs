use agent_errors::prelude::*;

/// Sends money.
#[tool(approval)]
async fn transfer(cents: u64) -> u64 {
    cents
}

/// Sends money abroad.
#[tool(approval = "required")]
async fn wire(cents: u64) -> u64 {
    cents
}

/// Deletes a file.
#[tool(approval = sometimes)]
async fn delete(path: String) -> String {
    path
}

/// Closes an account.
#[tool(approval = required, approval = required)]
async fn close(id: u64) -> u64 {
    id
}

/// Refunds a charge.
#[tool(on_error(execution = ask_person(reviewer = "ops")))]
async fn refund(cents: u64) -> u64 {
    cents
}

/// Charges a card.
#[tool(on_error(execution = [ask_person, escalate, ask_person]))]
async fn charge(cents: u64) -> u64 {
    cents
}

fn main() {}
