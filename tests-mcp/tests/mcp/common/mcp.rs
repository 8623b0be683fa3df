//! What the MCP tests share: the servers they start, and how they look at processes.

// Each test file uses its own part of this.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use agent_errors::mcp::McpServer;
use agent_errors::{Registry, RunContext, ToolCall, ToolResult, call::CallOutcome};

/// The reference server's entry point, installed on first use by the repository's script.
/// Panics (never skips) when Node.js or npm are missing or the install fails: CI must run these.
pub fn everything_entry() -> &'static PathBuf {
    static ENTRY: OnceLock<PathBuf> = OnceLock::new();
    ENTRY.get_or_init(|| {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        let script = root.join("scripts/install-mcp-server.sh");
        let dest = root.join("test-servers/mcp-server-everything");
        let output = Command::new("bash")
            .arg(&script)
            .arg(&dest)
            .output()
            .unwrap_or_else(|e| panic!("could not run {}: {e}", script.display()));
        assert!(
            output.status.success(),
            "installing @modelcontextprotocol/server-everything failed (Node.js and npm are \
             required):\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let entry = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        PathBuf::from(entry)
    })
}

/// The reference server over stdio, run by node directly so that killing it leaves nothing.
pub fn everything() -> McpServer {
    McpServer::stdio("everything", "node")
        .arg(everything_entry())
        .arg("stdio")
        .quiet()
}

/// The Rust fault server of this package over stdio.
pub fn faults() -> McpServer {
    McpServer::stdio("faults", env!("CARGO_BIN_EXE_mcp-fault-server")).quiet()
}

/// Whether a process of that id runs (a zombie does not).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
        Err(_) => false,
    }
}

/// Waits (polling, up to 10 s) until the process has exited.
pub async fn wait_gone(pid: u32) -> bool {
    for _ in 0..200 {
        if !alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// Runs one call in a fresh run and returns its result; panics on a stop.
pub async fn call(registry: &Registry, tool: &str, args: &str) -> ToolResult {
    call_in(registry, &RunContext::new(), tool, args).await
}

/// Runs one call in `ctx` and returns its result; panics on a stop.
pub async fn call_in(registry: &Registry, ctx: &RunContext, tool: &str, args: &str) -> ToolResult {
    match registry
        .execute(ctx, &ToolCall::new("call_1", tool, args))
        .await
    {
        CallOutcome::Result(result) => result,
        CallOutcome::Stop(stop) => panic!("`{tool}` stopped the run: {stop:?}"),
    }
}
