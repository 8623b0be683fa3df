//! MCP (feature `mcp`, on [rmcp](https://docs.rs/rmcp)): the tools of any MCP server under the
//! same recovery policies as local tools, and a registry's tools served over MCP.
//!
//! # Connecting
//!
//! [`McpServer::stdio`] starts a server as a child process the client owns;
//! [`McpServer::http`] reaches one over streamable HTTP. [`connect`](McpServer::connect) lists
//! its tools and [`McpClient::tools`] gives them as [`ToolDef`](crate::ToolDef)s with the
//! server's own names, descriptions and input schemas, to register on an agent or a registry
//! like any tool. Two servers with a tool of the same name are refused when the agent is built
//! ([`ConfigProblem::DuplicateTool`](crate::build::ConfigProblem::DuplicateTool)) unless one has a
//! [prefix](McpServer::with_prefix).
//!
//! # Policies
//!
//! A remote tool resolves its policy like a local one: [`McpServer::with_policy`] is the tool
//! layer of every tool of that server, `on_tool_error("tool", policy!(...))` the agent layer,
//! [`McpServer::with_crate_defaults`] the crate layer; `explain` and the start-up validation
//! see them all.
//!
//! # How MCP failures are classified
//!
//! | failure | kind | so |
//! | --- | --- | --- |
//! | invalid params: JSON-RPC `-32602`, or an `isError` result whose text starts with `MCP error -32602` (servers on the TypeScript SDK) | `validation`, as [`InvalidArguments`](crate::call::InvalidArguments) | the `invalid_args` key: a fixer can repair the arguments and the call is sent again in the same turn |
//! | tool not found (`-32602` saying so), method not found (`-32601`), resource not found (`-32002`) | `not_found` | not retried |
//! | transport closed, server process exited (before or during the call) | `transient` | retried; the next call restarts the server with backoff |
//! | the server kept exiting after its restarts ([`McpError::GaveUp`]) | `transient` | fails at once, so the service breaker opens |
//! | request timeout ([`McpServer::with_request_timeout`], default [`DEFAULT_REQUEST_TIMEOUT`], for every request, connecting included; [`McpServer::with_timeout`] for a tool's calls) | `timeout` | retried; the server is told the request is cancelled; from [`McpServer::connect`], an error that names the server and the bound |
//! | an `isError` result | from its text: an HTTP status written in it (`HTTP 503`, `status 429`) through the status table, with a `Retry-After` next to it; otherwise the message patterns | as that kind |
//! | any other JSON-RPC error | from its message | as that kind |
//!
//! What the model sees of a failure is sanitized like any tool error.
//!
//! # Which tools, and what they are told
//!
//! [`McpServer::allow_tools`], [`deny_tools`](McpServer::deny_tools) and
//! [`filter_tools`](McpServer::filter_tools) choose which of a server's tools are offered;
//! the others are never registered. Every call carries its idempotency key in `_meta` under
//! [`IDEMPOTENCY_KEY_META`].
//!
//! # Lifecycle
//!
//! A stdio server that exits is restarted on the next call, after a backoff
//! ([`McpServer::with_restarts`]); calls in flight when it died each answer a transient
//! failure. Dropping a call's future (a cancelled run, a timeout, a call the run stopped
//! waiting for) sends MCP's `notifications/cancelled` for it. [`McpClient::shutdown`] stops the
//! process and waits for it; dropping the last handle on the connection kills it.
//!
//! # Serving tools
//!
//! [`McpService`] serves a [`Registry`](crate::Registry) over stdio
//! ([`serve_stdio`](McpService::serve_stdio)) or streamable HTTP
//! ([`streamable_http`](McpService::streamable_http)), each call running through its policy on
//! the server side.

mod client;
mod connection;
mod error;
mod filter;
mod serve;

/// The `_meta` key under which each `tools/call` carries the call's
/// [`IdempotencyKey`](crate::call::IdempotencyKey) (`run_id:call_id`, the same for every retry and
/// repair of one call and after a durable run resumes), so a server that deduplicates can do
/// the work once. A call without a key (a [`RunContext`](crate::RunContext) with no run id)
/// sends no `_meta`. [`McpService`] reads it back: a served tool asking for a
/// `Ctx<IdempotencyKey>` gets the client's key.
pub const IDEMPOTENCY_KEY_META: &str = "agent-errors/idempotency-key";

pub use client::{DEFAULT_REQUEST_TIMEOUT, McpClient, McpServer};
pub use error::McpError;
pub use serve::{McpService, ServeError};

/// The rmcp this crate is built on, for transports and configuration types.
pub use rmcp;
