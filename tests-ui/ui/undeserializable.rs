use agent_errors::prelude::*;

#[derive(serde::Deserialize)]
struct Query {
    text: String,
}

/// Takes a parameter without a JSON Schema.
#[tool]
async fn search(query: Query) -> String {
    query.text
}

fn main() {}
