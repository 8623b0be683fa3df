use agent_errors::prelude::*;

/// Echoes anything.
#[tool]
async fn echo<T: serde::Serialize>(value: T) -> T {
    value
}

/// Prints anything.
#[tool]
fn show(value: impl std::fmt::Display) -> String {
    value.to_string()
}

fn main() {}
