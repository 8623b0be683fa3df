use agent_errors::prelude::*;

/// An async fn must not block its thread, so `blocking` does not apply.
#[tool(blocking, timeout = "1s")]
async fn fetch(url: String) -> String {
    url
}

/// `blocking` takes no value.
#[tool(blocking = true)]
fn read(path: String) -> String {
    path
}

/// Given twice.
#[tool(blocking, blocking)]
fn copy(path: String) -> String {
    path
}

fn main() {}
