//! `agent-errors-proxy`: this library's recovery in front of MCP servers, for any MCP client.
//!
//! ```text
//! agent-errors-proxy --config proxy.toml                 serve on stdio (what desktop hosts start)
//! agent-errors-proxy --config proxy.toml --http ADDR     serve streamable HTTP at http://ADDR/mcp
//! agent-errors-proxy --config proxy.toml --check         check the file, start nothing
//! agent-errors-proxy --config proxy.toml --explain TOOL  the policy TOOL resolved to, and why
//! ```
//!
//! The file names the upstream servers and the policies in the DSL's own words (see
//! `config.rs`). Every attempt is one JSON line on stderr (`--quiet` for none); `--trace`
//! prints the library's spans and events there too. Exit status: 0 after a session ends or a
//! check passes, 2 for a file with mistakes or bad arguments, 1 when a server could not be
//! started or serving failed.

mod approve;
mod attempt_log;
mod config;
mod explain;
mod policy_text;
mod problems;
mod session;
mod suggest;
mod upstream;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use rmcp::ServiceExt;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use crate::attempt_log::AttemptLog;
use crate::config::Config;
use crate::session::Shared;

const USAGE: &str = "usage: agent-errors-proxy --config FILE [--http ADDR] [--check] [--explain TOOL] [--quiet] [--trace]";

/// What the command line asks for.
#[derive(Debug, Default)]
struct Args {
    config: Option<String>,
    http: Option<SocketAddr>,
    check: bool,
    explain: Option<String>,
    quiet: bool,
    trace: bool,
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut parsed = Args::default();
    while let Some(arg) = args.next() {
        let mut value = |name: &str| {
            args.next()
                .ok_or_else(|| format!("{name} needs a value\n{USAGE}"))
        };
        match arg.as_str() {
            "--config" => parsed.config = Some(value("--config")?),
            "--http" => {
                let addr = value("--http")?;
                parsed.http = Some(addr.parse().map_err(|_| {
                    format!("--http takes an address such as 127.0.0.1:8931, not `{addr}`")
                })?);
            }
            "--explain" => parsed.explain = Some(value("--explain")?),
            "--check" => parsed.check = true,
            "--quiet" => parsed.quiet = true,
            "--trace" => parsed.trace = true,
            "--help" | "-h" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown argument `{other}`\n{USAGE}")),
        }
    }
    if parsed.config.is_none() {
        return Err(format!("--config FILE is required\n{USAGE}"));
    }
    Ok(parsed)
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    if args.trace {
        tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_max_level(tracing::Level::DEBUG)
            .init();
    }
    let path = args.config.clone().unwrap_or_default();
    let text = match read_file(&path) {
        Ok(text) => text,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let config = match config::parse(&text) {
        Ok(config) => config,
        Err(problems) => {
            eprint!("{}", problems.render(&path));
            eprintln!("{path}: {} problem(s); nothing was started", problems.len());
            return ExitCode::from(2);
        }
    };
    if args.check {
        println!("{path}: ok, {} upstream server(s)", config.servers.len());
        return ExitCode::SUCCESS;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("could not start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(run(args, config, text))
}

fn read_file(path: &str) -> Result<String, String> {
    let metadata = std::fs::metadata(path).map_err(|e| format!("{path}: {e}"))?;
    if metadata.len() > config::MAX_FILE_BYTES as u64 {
        return Err(format!(
            "{path}: larger than {} bytes",
            config::MAX_FILE_BYTES
        ));
    }
    std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))
}

async fn run(args: Args, config: Config, text: String) -> ExitCode {
    let upstreams = match upstream::connect(&config, &text).await {
        Ok(upstreams) => upstreams,
        Err(error) => {
            eprintln!("{error}");
            return match error {
                upstream::StartError::Problems(_) | upstream::StartError::Build(_) => {
                    ExitCode::from(2)
                }
                upstream::StartError::Connect { .. } => ExitCode::FAILURE,
            };
        }
    };
    if let Some(tool) = &args.explain {
        let explained = explain::explain(&upstreams, tool);
        upstreams.shutdown().await;
        return match explained {
            Some(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            None => {
                let names: Vec<&str> = upstreams.origins.keys().map(String::as_str).collect();
                eprintln!(
                    "no server offers a tool `{tool}`; the proxy offers: {}",
                    names.join(", ")
                );
                ExitCode::from(2)
            }
        };
    }
    let log = if args.quiet {
        AttemptLog::Off
    } else {
        AttemptLog::Stderr
    };
    let shared = Shared::new(&upstreams, config.session.clone(), log);
    let served = match args.http {
        Some(addr) => serve_http(shared, addr).await,
        None => serve_stdio(shared).await,
    };
    upstreams.shutdown().await;
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("{message}");
            ExitCode::FAILURE
        }
    }
}

async fn serve_stdio(shared: Arc<Shared>) -> Result<(), String> {
    let running = shared
        .session()
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| format!("the MCP client did not complete the handshake: {e}"))?;
    running
        .waiting()
        .await
        .map(drop)
        .map_err(|e| format!("the MCP session ended abnormally: {e}"))
}

async fn serve_http(shared: Arc<Shared>, addr: SocketAddr) -> Result<(), String> {
    let service: StreamableHttpService<session::Session, LocalSessionManager> =
        StreamableHttpService::new(
            move || Ok(shared.session()),
            Default::default(),
            StreamableHttpServerConfig::default(),
        );
    let router = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("could not listen on {addr}: {e}"))?;
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    // The address a test or a host reads to connect (port 0 picks a free one).
    eprintln!(
        "{}",
        serde_json::json!({ "event": "listening", "url": format!("http://{bound}/mcp") })
    );
    axum::serve(listener, router)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .map_err(|e| format!("serving HTTP failed: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Result<Args, String> {
        parse_args(list.iter().map(|s| (*s).to_owned()))
    }

    #[test]
    fn the_command_line_names_a_file_and_what_to_do_with_it() {
        let parsed = args(&["--config", "p.toml", "--explain", "search", "--quiet"]).unwrap();
        assert_eq!(parsed.config.as_deref(), Some("p.toml"));
        assert_eq!(parsed.explain.as_deref(), Some("search"));
        assert!(parsed.quiet);
        assert!(args(&[]).unwrap_err().contains("--config FILE is required"));
        assert!(args(&["--config"]).unwrap_err().contains("needs a value"));
        assert!(
            args(&["--config", "p", "--http", "nope"])
                .unwrap_err()
                .contains("127.0.0.1:8931")
        );
        assert!(args(&["--bogus"]).unwrap_err().contains("unknown argument"));
    }
}
