//! What the proxy adds to a call: `echo` on the workspace's fault server, called N times by
//! this library's MCP client directly, and through the proxy (stdio to the proxy, stdio on to
//! the server), the two in turn, in one run.
//!
//! ```sh
//! cargo build --release -p agent-errors-tests-mcp --bin mcp-fault-server
//! cargo bench -p agent-errors-proxy --bench overhead
//! ```

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agent_errors::mcp::McpServer;
use agent_errors::{Registry, RunContext, ToolCall};

const ROUNDS: usize = 5;

fn binary(name: &str) -> PathBuf {
    let release = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/release")
        .join(name);
    let dir = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from);
    let found = dir
        .map(|d| d.join("release").join(name))
        .filter(|p| p.exists());
    let path = found.unwrap_or(release);
    assert!(
        path.exists(),
        "{} is missing: build it with --release first",
        path.display()
    );
    path
}

async fn calls(server: McpServer, n: usize) -> Duration {
    let client = server.quiet().connect().await.expect("the server starts");
    let registry = Registry::builder()
        .tools(client.tools())
        .build()
        .expect("a registry");
    let ctx = RunContext::new().with_run_id("bench");
    let started = Instant::now();
    for i in 0..n {
        let call = ToolCall::new(format!("c{i}"), "echo", r#"{"text":"hello"}"#);
        let outcome = registry.execute(&ctx, &call).await;
        assert!(outcome.result().is_some_and(|r| !r.is_error), "{outcome:?}");
    }
    let took = started.elapsed();
    client.shutdown().await;
    took
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let server = binary("mcp-fault-server");
    let proxy = binary("agent-errors-proxy");
    let dir = std::env::temp_dir().join(format!("proxy-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a directory");
    let config = dir.join("proxy.toml");
    let text = format!("[servers.faults]\ncommand = \"{}\"\n", server.display());
    std::fs::write(&config, text).expect("the config");
    println!("| calls | direct, µs/call | through the proxy, µs/call | added, µs/call |");
    println!("| ---: | ---: | ---: | ---: |");
    for n in [200, 2_000] {
        let (mut direct, mut proxied) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            let d = calls(McpServer::stdio("direct", &server), n).await;
            let p = calls(
                McpServer::stdio("proxied", &proxy).args([
                    "--config".as_ref(),
                    config.as_os_str(),
                    "--quiet".as_ref(),
                ]),
                n,
            )
            .await;
            direct.push(d.as_secs_f64() * 1e6 / n as f64);
            proxied.push(p.as_secs_f64() * 1e6 / n as f64);
        }
        let (d, p) = (median(direct), median(proxied));
        println!("| {n} | {d:.0} | {p:.0} | {:.0} |", p - d);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
