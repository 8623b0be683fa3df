use agent_errors::prelude::*;

/// Looks something up.
#[tool(breaker = "")]
async fn lookup(key: String) -> String {
    key
}

/// Looks something else up.
#[tool(breaker = "weather-api", breaker = "maps-api")]
async fn other(key: String) -> String {
    key
}

/// And a third thing.
#[tool(breaker = weather)]
async fn third(key: String) -> String {
    key
}

fn main() {}
