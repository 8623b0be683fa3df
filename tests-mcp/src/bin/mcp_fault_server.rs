//! A small MCP server on stdio whose tools fail in the ways MCP servers fail, for the client's
//! fault tests: it dies mid-call, answers invalid params, hangs, answers `isError`.
//!
//! | tool | what it does |
//! | --- | --- |
//! | `echo {text}` | answers `text` |
//! | `die` | exits without answering |
//! | `die_once {marker}` | exits without answering if the file `marker` does not exist (and creates it); answers `survived` otherwise |
//! | `strict {n}` | answers JSON-RPC invalid params unless `n` is an integer, then `n * 2` |
//! | `strict_text {n}` | like `strict`, but writes the error into an `isError` result, as servers on the TypeScript SDK do |
//! | `fail {text}` | answers `isError: true` with `text` |
//! | `hang` | never answers; counts the calls and the cancellations it receives |
//! | `hangs` | answers `"<hang calls started> <hang calls cancelled>"` |
//! | `meta` | answers the request's `_meta`, as JSON |
//! | `flaky {marker, failures}` | answers `isError` "HTTP 503 Service Unavailable" the first `failures` times (counted in the file `marker`), then `ok after N failures`; every attempt appends the idempotency key its `_meta` carried to `marker.keys` |
//!
//! `MCP_FAULT_LIST` makes `tools/list` fail too: `hang` never answers it, `huge` answers 100,000
//! tools (one reply line of about 30 MB, over the client transport's 16 MiB line limit, so it
//! never arrives).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, JsonObject,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use serde_json::{Value, json};

#[derive(Clone, Default)]
struct FaultServer {
    hangs: Arc<AtomicU32>,
    cancellations: Arc<AtomicU32>,
}

fn tool(name: &'static str, properties: Value) -> Tool {
    let schema = json!({ "type": "object", "properties": properties });
    let Value::Object(schema) = schema else {
        unreachable!("an object literal")
    };
    Tool::new(name, format!("The `{name}` fault."), schema)
}

fn text(result: impl Into<String>) -> Result<CallToolResponse, ErrorData> {
    Ok(CallToolResult::success(vec![ContentBlock::text(result)]).into())
}

fn error_text(result: impl Into<String>) -> Result<CallToolResponse, ErrorData> {
    Ok(CallToolResult::error(vec![ContentBlock::text(result)]).into())
}

fn string_arg(args: &JsonObject, name: &str) -> String {
    args.get(name)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

impl FaultServer {
    async fn hang(
        &self,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.hangs.fetch_add(1, Ordering::SeqCst);
        context.ct.cancelled().await;
        self.cancellations.fetch_add(1, Ordering::SeqCst);
        Err(ErrorData::internal_error("cancelled", None))
    }
}

impl ServerHandler for FaultServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        match std::env::var("MCP_FAULT_LIST").as_deref() {
            Ok("hang") => std::future::pending().await,
            Ok("huge") => {
                // About 30 MB on one line: past rmcp's 16 MiB line limit, so the client drops
                // it and the answer never arrives.
                let description = "One of very many tools, described at length. ".repeat(6);
                let many = (0..100_000).map(|n| {
                    let name = format!("tool_{n:06}_with_a_long_name_to_fill_the_line");
                    Tool::new(name, description.clone(), JsonObject::new())
                });
                return Ok(ListToolsResult::with_all_items(many.collect()));
            }
            _ => {}
        }
        let string = json!({ "type": "string" });
        let integer = json!({ "type": "integer" });
        Ok(ListToolsResult::with_all_items(vec![
            tool("echo", json!({ "text": string })),
            tool("die", json!({})),
            tool("die_once", json!({ "marker": string })),
            tool("strict", json!({ "n": integer })),
            tool("strict_text", json!({ "n": integer })),
            tool("fail", json!({ "text": string })),
            tool("hang", json!({})),
            tool("hangs", json!({})),
            tool("meta", json!({})),
            tool("flaky", json!({ "marker": string, "failures": integer })),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        let n = args.get("n").and_then(Value::as_i64);
        match request.name.as_ref() {
            "echo" => text(string_arg(&args, "text")),
            "die" => std::process::exit(3),
            "die_once" => {
                let marker = string_arg(&args, "marker");
                if std::fs::metadata(&marker).is_err() {
                    let _ = std::fs::write(&marker, b"died");
                    std::process::exit(3);
                }
                text("survived")
            }
            "strict" => match n {
                Some(n) => text((n * 2).to_string()),
                None => Err(ErrorData::invalid_params("`n` must be an integer", None)),
            },
            "strict_text" => match n {
                Some(n) => text((n * 2).to_string()),
                None => {
                    error_text("MCP error -32602: Input validation error: `n` must be a number")
                }
            },
            "fail" => error_text(string_arg(&args, "text")),
            "hang" => self.hang(context).await,
            "meta" => text(Value::Object(context.meta.0.0.clone()).to_string()),
            "flaky" => flaky(&args, &context),
            "hangs" => text(format!(
                "{} {}",
                self.hangs.load(Ordering::SeqCst),
                self.cancellations.load(Ordering::SeqCst)
            )),
            other => Err(ErrorData::invalid_params(
                format!("Tool {other} not found"),
                None,
            )),
        }
    }
}

/// The `flaky` tool: fails with a 503 until it has failed `failures` times.
fn flaky(
    args: &JsonObject,
    context: &RequestContext<RoleServer>,
) -> Result<CallToolResponse, ErrorData> {
    use std::io::Write as _;
    let marker = string_arg(args, "marker");
    let failures = args.get("failures").and_then(Value::as_u64).unwrap_or(1);
    let key = context
        .meta
        .0
        .0
        .get("agent-errors/idempotency-key")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    if let Ok(mut keys) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(format!("{marker}.keys"))
    {
        let _ = writeln!(keys, "{key}");
    }
    let failed: u64 = std::fs::read_to_string(&marker)
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0);
    if failed < failures {
        let _ = std::fs::write(&marker, (failed + 1).to_string());
        return error_text("HTTP 503 Service Unavailable");
    }
    text(format!("ok after {failed} failures"))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let running = FaultServer::default()
        .serve(rmcp::transport::stdio())
        .await?;
    running.waiting().await?;
    Ok(())
}
