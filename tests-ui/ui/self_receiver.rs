use agent_errors::prelude::*;

struct Catalogue;

impl Catalogue {
    /// Looks something up.
    #[tool]
    async fn lookup(&self, id: u64) -> u64 {
        id
    }
}

fn main() {}
