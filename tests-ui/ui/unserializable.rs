use agent_errors::prelude::*;

struct Opaque;

/// Returns something that can't be sent to a model.
#[tool]
async fn opaque(query: String) -> Opaque {
    let _ = query;
    Opaque
}

fn main() {}
