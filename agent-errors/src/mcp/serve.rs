//! The server side: a registry's tools served over MCP, each call run through its policy here,
//! so any MCP client gets the recovery layer without our agent loop.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, ServerHandler, ServiceExt};

use super::IDEMPOTENCY_KEY_META;
use crate::breaker::ServiceBreaker;
use crate::chat::ToolCall;
use crate::escapes::Visible;
use crate::executor::{CallOutcome, Limits, RunContext};
use crate::registry::Registry;

/// A registry's tools as an MCP server.
///
/// Every `tools/call` runs through [`Registry::execute`] with the tool's resolved policy:
/// retries, fixers, fallbacks and the service breaker work on this side, and the client gets
/// the one outcome. A call that stops the recovery ladder (an auth failure, retries used up,
/// `throw`) answers `isError: true` with a fixed message saying the call cannot succeed;
/// errors shown to a model are sanitized as always. Each call is its own run: the per-run
/// breaker does not span calls, the service breaker does. A call whose `_meta` carries an
/// idempotency key under [`IDEMPOTENCY_KEY_META`] (as this crate's client sends) gives the tool
/// that key as its [`IdempotencyKey`](crate::call::IdempotencyKey).
///
/// # Examples
///
/// It serves on this process's stdin and stdout until a client closes them, hence `no_run`:
///
/// ```no_run
/// use agent_errors::Registry;
/// use agent_errors::mcp::McpService;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let registry = Registry::builder().build()?;
/// McpService::new(registry).serve_stdio().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct McpService {
    inner: Arc<Inner>,
}

#[derive(Debug, Clone)]
struct Inner {
    registry: Registry,
    tools: Vec<Tool>,
    breaker: Arc<ServiceBreaker>,
    limits: Limits,
    info: Implementation,
}

/// Serving over MCP failed before or while the session ran.
///
/// # Examples
///
/// A server binary's `main` turns the outcome into its exit status:
///
/// ```
/// use std::process::ExitCode;
/// use agent_errors::mcp::ServeError;
///
/// fn exit_code(served: Result<(), ServeError>) -> ExitCode {
///     match served {
///         Ok(()) => ExitCode::SUCCESS, // the client closed the session
///         Err(ServeError::Handshake(why)) => { eprintln!("not an MCP client: {why}"); ExitCode::from(2) }
///         Err(error) => { eprintln!("{error}"); ExitCode::FAILURE } // `Session`, and the non-exhaustive rest
///     }
/// }
/// assert_eq!(exit_code(Err(ServeError::Handshake("closed".into()))), ExitCode::from(2));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The client did not complete the handshake.
    #[error("the MCP client did not complete the handshake: {0}")]
    Handshake(String),
    /// The session task ended abnormally.
    #[error("the MCP session ended abnormally: {0}")]
    Session(String),
}

impl McpService {
    /// Serves `registry`'s tools with a service breaker of their own (default thresholds).
    pub fn new(registry: Registry) -> Self {
        let tools = registry
            .specs()
            .iter()
            .map(|spec| {
                let schema = match &spec.parameters {
                    serde_json::Value::Object(object) => object.clone(),
                    _ => serde_json::Map::new(),
                };
                Tool::new(spec.name.clone(), spec.description.clone(), schema)
            })
            .collect();
        McpService {
            inner: Arc::new(Inner {
                registry,
                tools,
                breaker: Arc::new(ServiceBreaker::default()),
                limits: Limits::default(),
                info: Implementation::new("agent-errors", env!("CARGO_PKG_VERSION")),
            }),
        }
    }

    fn edit(self, change: impl FnOnce(&mut Inner)) -> Self {
        let mut inner = Arc::unwrap_or_clone(self.inner);
        change(&mut inner);
        McpService {
            inner: Arc::new(inner),
        }
    }

    /// Shares this service breaker (with an agent that calls the same tools, say).
    #[must_use]
    pub fn with_service_breaker(self, breaker: Arc<ServiceBreaker>) -> Self {
        self.edit(|inner| inner.breaker = breaker)
    }

    /// Bounds on recovery work per call.
    #[must_use]
    pub fn with_limits(self, limits: Limits) -> Self {
        self.edit(|inner| inner.limits = limits)
    }

    /// The name and version the server gives clients (default: this crate's).
    #[must_use]
    pub fn with_server_info(self, name: impl Into<String>, version: impl Into<String>) -> Self {
        self.edit(|inner| inner.info = Implementation::new(name, version))
    }

    /// Serves one client on this process's stdin and stdout until it disconnects.
    pub async fn serve_stdio(self) -> Result<(), ServeError> {
        let running = self
            .serve(rmcp::transport::stdio())
            .await
            .map_err(|e| ServeError::Handshake(e.to_string()))?;
        running
            .waiting()
            .await
            .map(drop)
            .map_err(|e| ServeError::Session(e.to_string()))
    }

    /// A tower service answering streamable HTTP, one session per client: mount it where you
    /// serve HTTP (`axum::Router::new().nest_service("/mcp", service)`). `config` sets the
    /// allowed hosts, the cancellation token that stops it, and the rest.
    pub fn streamable_http(
        self,
        config: StreamableHttpServerConfig,
    ) -> StreamableHttpService<McpService, LocalSessionManager> {
        StreamableHttpService::new(move || Ok(self.clone()), Default::default(), config)
    }

    async fn call(
        &self,
        request: CallToolRequestParams,
        id: String,
        key: Option<(&str, &str)>,
    ) -> CallToolResult {
        let arguments = request.arguments.map(serde_json::Value::Object);
        let arguments = arguments.map_or_else(|| "{}".to_owned(), |a| a.to_string());
        let mut ctx = RunContext::new()
            .with_service_breaker(Arc::clone(&self.inner.breaker))
            .with_limits(self.inner.limits);
        // The client's key names the call: the tool sees the key the client sent.
        let id = match key {
            Some((run_id, call_id)) => {
                ctx = ctx.with_run_id(run_id);
                call_id.to_owned()
            }
            None => id,
        };
        let call = ToolCall::new(id, request.name.to_string(), arguments);
        match self.inner.registry.execute(&ctx, &call).await {
            CallOutcome::Result(result) if result.is_error => {
                CallToolResult::error(vec![ContentBlock::text(result.content)])
            }
            CallOutcome::Result(result) => {
                CallToolResult::success(vec![ContentBlock::text(result.content)])
            }
            // Only the fixed message: the failure itself is for this side's logs and events.
            CallOutcome::Stop(stop) => {
                tracing::warn!(tool = %Visible::of(&stop.tool), kind = %stop.kind, "MCP call cannot succeed");
                CallToolResult::error(vec![ContentBlock::text(stop.user_message)])
            }
        }
    }
}

impl ServerHandler for McpService {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(self.inner.info.clone())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.inner.tools.clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // As the protocol asks: an unknown tool is a JSON-RPC error, not a tool result.
        if self.inner.registry.tool(&request.name).is_none() {
            let message = format!("tool `{}` not found", request.name);
            return Err(ErrorData::invalid_params(message, None));
        }
        let answer = tokio::select! {
            biased;
            () = context.ct.cancelled() => {
                CallToolResult::error(vec![ContentBlock::text(crate::executor::CANCELLED)])
            }
            answer = self.call(request, context.id.to_string(), idempotency_key(&context)) => answer,
        };
        Ok(answer.into())
    }
}

/// The longest idempotency key taken from a client: a key is an id, not a document.
const MAX_KEY_LEN: usize = 256;

/// The client's idempotency key for this call, as `(run_id, call_id)`: a `run_id:call_id`
/// string under [`IDEMPOTENCY_KEY_META`], short and free of control characters. Anything else
/// is ignored: the call then has no key.
fn idempotency_key(context: &RequestContext<RoleServer>) -> Option<(&str, &str)> {
    let key = context.meta.get(IDEMPOTENCY_KEY_META)?.as_str()?;
    if key.len() > MAX_KEY_LEN || key.chars().any(char::is_control) {
        return None;
    }
    key.rsplit_once(':')
        .filter(|(run, call)| !run.is_empty() && !call.is_empty())
}
