use agent_errors::prelude::*;

/// Searches for a phrase.
#[tool]
async fn search(query: &str, tags: Vec<&'static str>) -> usize {
    query.len() + tags.len()
}

fn main() {}
