//! This crate's `#[tool]`s served over MCP on stdio, with their policies applied on this side:
//! any MCP client (a desktop app, an IDE, another agent) gets the retries and the sanitized
//! errors without our agent loop.
//!
//! ```text
//! cargo build -p agent-errors-examples --bin mcp_server --features mcp
//! # then point an MCP client at target/debug/mcp_server
//! ```

use agent_errors::Registry;
use agent_errors::mcp::McpService;
use agent_errors::prelude::*;

/// Count the top-level keys of a JSON object.
#[tool(on_error(invalid_args = escalate, execution = [retry(2), escalate]))]
async fn count_keys(json: String) -> Result<usize, serde_json::Error> {
    let object: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&json)?;
    Ok(object.len())
}

/// Fetches the release notes of a version.
#[tool(on_error(execution = [retry(3), escalate]))]
async fn release_notes(version: String) -> Result<String, HttpError> {
    match version.as_str() {
        "2.1" => Ok("Version 2.1 fixes the login bug.".to_owned()),
        other => Err(HttpError::new(404, format!("no release {other}"))),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let registry = Registry::builder()
        .tools(tools![count_keys, release_notes])
        .build()?;
    // Logs go to stderr: stdout is the MCP channel.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .init();
    McpService::new(registry).serve_stdio().await?;
    Ok(())
}
