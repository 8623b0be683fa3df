//! One MCP client's session with the proxy: one run, in the library's terms.
//!
//! The session's calls share one [`RunContext`]: its id starts every call's idempotency key
//! (sent upstream in `_meta`), its per-run breaker counts a tool's failures across the
//! session and takes a broken tool off the list (the client is sent `tools/list_changed`), its
//! caps bound the session's calls, and its approver asks the client's user. The service
//! breaker is shared by every session.

use std::collections::BTreeSet;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, OnceLock};

use agent_errors::call::CallOutcome;
use agent_errors::mcp::IDEMPOTENCY_KEY_META;
use agent_errors::run::UsageLimits;
use agent_errors::{Limits, Registry, RunContext, ToolCall};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{Peer, RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler};

use crate::approve::AskTheClient;
use crate::attempt_log::AttemptLog;
use crate::config::SessionSettings;
use crate::upstream::Upstreams;

/// What a call of a session past one of its caps is answered.
pub(crate) const SESSION_STOPPED: &str = "this session reached one of its usage caps ([session] \
     max_tool_calls or a tool's max_calls), so no more calls are made in it: start a new session";

/// What every session shares.
#[derive(Debug)]
pub(crate) struct Shared {
    registry: Registry,
    tools: Vec<Tool>,
    breaker: Arc<agent_errors::breaker::ServiceBreaker>,
    limits: UsageLimits,
    settings: SessionSettings,
    log: AttemptLog,
}

impl Shared {
    pub(crate) fn new(
        upstreams: &Upstreams,
        settings: SessionSettings,
        log: AttemptLog,
    ) -> Arc<Self> {
        let tools = upstreams
            .registry
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
        let mut limits = UsageLimits::new();
        if let Some(max) = settings.max_tool_calls {
            limits = limits.max_tool_calls(max);
        }
        for (tool, max) in &upstreams.max_calls {
            limits = limits.max_calls_of(tool.clone(), *max);
        }
        Arc::new(Shared {
            registry: upstreams.registry.clone(),
            tools,
            breaker: Arc::clone(&upstreams.breaker),
            limits,
            settings,
            log,
        })
    }

    /// A new session, with an id no other session of this process has had.
    pub(crate) fn session(self: &Arc<Self>) -> Session {
        Session {
            shared: Arc::clone(self),
            state: Arc::new(State {
                id: format!("proxy-{:016x}", fastrand::u64(..)),
                context: OnceLock::new(),
                removed: Mutex::new(BTreeSet::new()),
            }),
        }
    }
}

/// One client's session.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    shared: Arc<Shared>,
    state: Arc<State>,
}

#[derive(Debug)]
struct State {
    id: String,
    /// Made at the session's first call, when the client is known.
    context: OnceLock<RunContext>,
    /// The tools taken off this session's list, as last told to the client.
    removed: Mutex<BTreeSet<String>>,
}

impl Session {
    fn context(&self, peer: &Peer<RoleServer>) -> &RunContext {
        self.state.context.get_or_init(|| {
            let settings = &self.shared.settings;
            let mut ctx = RunContext::new()
                .with_run_id(self.state.id.clone())
                .with_service_breaker(Arc::clone(&self.shared.breaker))
                // A session is long: its retries are bounded per call by each policy, and
                // across sessions by the service breaker, not by one run's allowance.
                .with_limits(Limits::default().with_max_retries(u32::MAX))
                .with_usage_limits(self.shared.limits.clone())
                .with_approver(AskTheClient::new(peer.clone()));
            if let Some(threshold) = settings.breaker_threshold.and_then(NonZeroU32::new) {
                ctx = ctx.with_breaker_threshold(threshold);
            }
            ctx
        })
    }

    fn offered(&self) -> Vec<Tool> {
        let Some(ctx) = self.state.context.get() else {
            return self.shared.tools.clone();
        };
        self.shared
            .tools
            .iter()
            .filter(|tool| !ctx.is_degraded(&tool.name))
            .cloned()
            .collect()
    }

    async fn call(
        &self,
        request: CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let ctx = self.context(&context.peer);
        if ctx.is_stopped() {
            return CallToolResult::error(vec![ContentBlock::text(SESSION_STOPPED)]);
        }
        let arguments = request.arguments.map(serde_json::Value::Object);
        let arguments = arguments.map_or_else(|| "{}".to_owned(), |a| a.to_string());
        let call = ToolCall::new(call_id(context), request.name.to_string(), arguments);
        let started = tokio::time::Instant::now();
        let outcome = self.shared.registry.execute(ctx, &call).await;
        self.shared.log.call(
            &self.state.id,
            &call,
            ctx.events().take(),
            &outcome,
            started.elapsed(),
        );
        self.tell_of_removals(ctx, &context.peer).await;
        match outcome {
            CallOutcome::Result(result) if result.is_error => {
                CallToolResult::error(vec![ContentBlock::text(result.content)])
            }
            CallOutcome::Result(result) => {
                CallToolResult::success(vec![ContentBlock::text(result.content)])
            }
            // The fixed message only: the failure itself is in this side's log.
            CallOutcome::Stop(stop) => {
                CallToolResult::error(vec![ContentBlock::text(stop.user_message)])
            }
        }
    }

    /// Sends `tools/list_changed` when a tool was taken off (or put back on) this session's
    /// list since the client was last told.
    async fn tell_of_removals(&self, ctx: &RunContext, peer: &Peer<RoleServer>) {
        let now: BTreeSet<String> = self
            .shared
            .tools
            .iter()
            .filter(|tool| ctx.is_degraded(&tool.name))
            .map(|tool| tool.name.to_string())
            .collect();
        let changed = {
            let mut removed = self.state.removed.lock().unwrap_or_else(|p| p.into_inner());
            let changed = *removed != now;
            *removed = now;
            changed
        };
        if changed {
            // A client that has gone away has nothing to be told.
            let _ = peer.notify_tool_list_changed().await;
        }
    }
}

/// The call's id: the client's idempotency key when it sent one (so its retries of one call
/// keep one key upstream), else the JSON-RPC request's id, unique within the session.
fn call_id(context: &RequestContext<RoleServer>) -> String {
    const MAX_KEY_LEN: usize = 256;
    let client_key = context
        .meta
        .get(IDEMPOTENCY_KEY_META)
        .and_then(serde_json::Value::as_str)
        .filter(|key| {
            key.len() <= MAX_KEY_LEN && !key.chars().any(char::is_control) && !key.is_empty()
        });
    match client_key {
        Some(key) => format!("client-{key}"),
        None => format!("r{}", context.id),
    }
}

impl ServerHandler for Session {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .build();
        ServerConfig::new(capabilities).with_server_info(Implementation::new(
            "agent-errors-proxy",
            env!("CARGO_PKG_VERSION"),
        ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.offered()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // As the protocol asks: an unknown tool is a JSON-RPC error, not a tool result.
        if self.shared.registry.tool(&request.name).is_none() {
            let message = format!("tool `{}` not found", request.name);
            return Err(ErrorData::invalid_params(message, None));
        }
        let answer = tokio::select! {
            biased;
            () = context.ct.cancelled() => CallToolResult::error(vec![ContentBlock::text("operation cancelled")]),
            answer = self.call(request, &context) => answer,
        };
        Ok(answer.into())
    }
}
