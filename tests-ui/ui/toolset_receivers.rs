use agent_errors::prelude::*;

struct Counter {
    count: u64,
}

#[toolset]
impl Counter {
    /// Adds one.
    #[tool]
    async fn bump(&mut self) -> u64 {
        self.count += 1;
        self.count
    }

    /// Reads it, by value.
    #[tool]
    fn read(self) -> u64 {
        self.count
    }

    /// Generic.
    #[tool]
    fn generic<T: serde::de::DeserializeOwned>(&self, id: u64) -> u64 {
        id
    }

    #[fixer]
    fn repair(&mut self, request: FixRequest) -> Result<Fix, FixerError> {
        Ok(Fix::args(request.raw_args))
    }
}

fn main() {
    let _ = std::sync::Arc::new(Counter { count: 0 }).tools();
}
