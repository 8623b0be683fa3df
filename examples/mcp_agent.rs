//! An agent whose tools live on an MCP server: the reference server
//! `@modelcontextprotocol/server-everything`, started over stdio, its tools registered like local
//! ones with a policy per tool. The model is scripted: it sends `get-sum` numbers as strings, the
//! server refuses them as invalid params, a fixer repairs them and the call is sent again in the
//! same turn; then it echoes the answer.
//!
//! Needs Node.js: the example installs the pinned server under `test-servers/` on first run.
//!
//! ```text
//! cargo run -p agent-errors-examples --bin mcp_agent --features mcp
//! ```

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use agent_errors::mcp::McpServer;
use agent_errors::prelude::*;
use agent_errors::testing::ScriptedModel;

/// Turns numbers sent as strings into numbers.
#[fixer]
fn numbers(req: FixRequest) -> Result<Fix, FixerError> {
    let mut args = req.args.unwrap_or_default();
    for key in ["a", "b"] {
        if let Some(n) = args[key].as_str().and_then(|s| s.parse::<f64>().ok()) {
            args[key] = serde_json::json!(n);
        }
    }
    Ok(Fix::args_value(&args))
}

/// Installs the pinned reference server (once) and returns its entry point.
fn install_server_everything() -> Result<String, Box<dyn std::error::Error>> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/install-mcp-server.sh");
    let output = Command::new("bash").arg(script).output()?;
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).into_owned().into());
    }
    Ok(String::from_utf8(output.stdout)?.trim().to_owned())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let entry = install_server_everything()?;
    let everything = McpServer::stdio("everything", "node")
        .args([entry.as_str(), "stdio"])
        .quiet()
        .with_timeout(Duration::from_secs(10))
        .connect()
        .await?;
    println!("server-everything runs as process {:?}", everything.pid());

    let model = ScriptedModel::new()
        .tool_call("get-sum", r#"{"a": "2", "b": "3"}"#)
        .tool_call("echo", r#"{"message": "2 + 3 = 5"}"#)
        .text("2 + 3 = 5");
    let agent = Agent::builder("mcp-agent")
        .model(model)
        .tools(everything.tools())
        .fixers(fixers![numbers])
        .on_tool_error("get-sum", policy!(invalid_args = fix(agent = "numbers")))
        .on_tool_error("echo", policy!(transient = [retry(3), escalate]))
        .on_tool_error(
            "trigger-long-running-operation",
            policy!(timeout = escalate),
        )
        .build()?;
    print!("{}", agent.explain("get-sum").expect("registered"));

    let outcome = agent.run_with_report("What is 2 + 3?").await;
    for event in &outcome.report.events {
        println!("  event  {event:?}");
    }
    println!("answer: {}", outcome.result?);
    everything.shutdown().await;
    Ok(())
}
