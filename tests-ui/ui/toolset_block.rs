use agent_errors::prelude::*;

struct Empty;

#[toolset]
impl Empty {
    fn helper(&self) -> u32 {
        1
    }
}

struct Wrapper<T>(T);

#[toolset]
impl<T: Send + Sync + 'static> Wrapper<T> {
    /// Reads it.
    #[tool]
    fn read(&self) -> u32 {
        2
    }
}

trait Named {
    fn name(&self) -> String;
}

#[toolset]
impl Named for Empty {
    /// Its name.
    #[tool]
    fn name(&self) -> String {
        "empty".into()
    }
}

#[toolset]
struct NotAnImpl;

fn main() {
    let _ = std::sync::Arc::new(Empty).tools();
}
