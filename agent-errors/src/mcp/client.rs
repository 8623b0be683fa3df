//! The client side: an MCP server's tools as [`ToolDef`]s, under the same policies as local
//! tools.

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{JsonObject, Tool};

use super::connection::{CommandSpec, Connection, Endpoint};
use super::error::McpError;
use super::filter::ToolFilter;
use crate::arguments::parse_args;
use crate::error::ToolError;
use crate::extensions::Extensions;
use crate::idempotency::IdempotencyKey;
use crate::policy::Policy;
use crate::retry::RetrySchedule;
use crate::tool::{ToolDef, ToolFuture, ToolHandler};

/// An MCP server to connect to, and how its tools are registered.
///
/// # Examples
///
/// It starts a real MCP server program, hence `no_run`:
///
/// ```no_run
/// use agent_errors::mcp::McpServer;
/// use agent_errors::{Agent, policy};
/// # use agent_errors::testing::ScriptedModel;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let files = McpServer::stdio("files", "node")
///     .arg("server.js")
///     .with_prefix("files_")
///     .with_policy(policy!(execution = [retry(3), escalate]))
///     .connect()
///     .await?;
/// let agent = Agent::builder("assistant")
///     .model(ScriptedModel::new())
///     .tools(files.tools())
///     .on_tool_error("files_read", policy!(not_found = escalate))
///     .build()?;
/// # drop(agent);
/// files.shutdown().await;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct McpServer {
    name: String,
    endpoint: Endpoint,
    prefix: String,
    policy: Policy,
    crate_defaults: Option<Policy>,
    timeout: Option<Duration>,
    request_timeout: Duration,
    breaker: Option<String>,
    idempotent: Option<bool>,
    keyed: bool,
    restarts: RetrySchedule,
    filter: ToolFilter,
}

impl McpServer {
    /// A server the library starts as a child process and talks to over its stdin and stdout.
    /// The process is the client's: restarted when it exits, stopped by
    /// [`McpClient::shutdown`] or when the last handle on it is dropped.
    ///
    /// Point it at the server itself (`node dist/index.js`) rather than at a launcher such as
    /// `npx`, whose own children would outlive it when it is killed.
    pub fn stdio(name: impl Into<String>, program: impl Into<OsString>) -> Self {
        let spec = CommandSpec {
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            current_dir: None,
            quiet: false,
        };
        McpServer::new(name.into(), Endpoint::Stdio(spec))
    }

    /// A server reached over streamable HTTP at `url`. TLS (`https://`) needs rmcp's `reqwest`
    /// feature enabled in your own `Cargo.toml`.
    pub fn http(name: impl Into<String>, url: impl Into<String>) -> Self {
        McpServer::new(name.into(), Endpoint::Http(url.into()))
    }

    fn new(name: String, endpoint: Endpoint) -> Self {
        McpServer {
            name,
            endpoint,
            prefix: String::new(),
            policy: Policy::new(),
            crate_defaults: None,
            timeout: None,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            breaker: None,
            idempotent: None,
            keyed: false,
            restarts: default_restarts(),
            filter: ToolFilter::default(),
        }
    }

    fn command(mut self, edit: impl FnOnce(&mut CommandSpec)) -> Self {
        if let Endpoint::Stdio(spec) = &mut self.endpoint {
            edit(spec);
        }
        self
    }

    /// Adds an argument to the command (stdio servers only).
    #[must_use]
    pub fn arg(self, arg: impl Into<OsString>) -> Self {
        self.command(|spec| spec.args.push(arg.into()))
    }

    /// Adds arguments to the command (stdio servers only).
    #[must_use]
    pub fn args(self, args: impl IntoIterator<Item = impl Into<OsString>>) -> Self {
        self.command(|spec| spec.args.extend(args.into_iter().map(Into::into)))
    }

    /// Sets an environment variable of the process (stdio servers only).
    #[must_use]
    pub fn env(self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.command(|spec| spec.env.push((key.into(), value.into())))
    }

    /// Runs the process in `dir` (stdio servers only).
    #[must_use]
    pub fn current_dir(self, dir: impl Into<PathBuf>) -> Self {
        self.command(|spec| spec.current_dir = Some(dir.into()))
    }

    /// Discards what the process writes on stderr (by default it goes to ours).
    #[must_use]
    pub fn quiet(self) -> Self {
        self.command(|spec| spec.quiet = true)
    }

    /// Registers every tool of this server as `prefix` + its name: how two servers with tools
    /// of the same name live in one agent. The server is still called by its own names.
    #[must_use]
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The policy of every tool of this server, as their tool-level layer: agent
    /// `on_tool_error` entries and crate defaults still fill in the keys it leaves out.
    #[must_use]
    pub fn with_policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// The crate-wide defaults the tools inherit (the third layer), as `defaults!` gives them
    /// to `#[tool]`s.
    #[must_use]
    pub fn with_crate_defaults(mut self, defaults: Option<Policy>) -> Self {
        self.crate_defaults = defaults;
        self
    }

    /// Bounds every call of this server's tools: a call still running after `timeout` fails as
    /// a [`Timeout`](crate::ErrorKind::Timeout), and the server is told the request is cancelled.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Bounds every MCP request to this server, connecting included: the handshake and the
    /// `tools/list` of [`connect`](McpServer::connect) (and of each restart), and every
    /// `tools/call`. A request with no answer after `timeout` fails with
    /// [`McpError::Timeout`] (kind `timeout`): a server that never answers, or whose answer
    /// never arrives whole (a tool list over the transport's line limit), is an error that
    /// names it, not a future that never ends. The default is
    /// [`DEFAULT_REQUEST_TIMEOUT`](super::DEFAULT_REQUEST_TIMEOUT) (60 s); raise it for tools
    /// that run longer. [`with_timeout`](McpServer::with_timeout) bounds a tool's calls within
    /// it, under the tool's policy.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use agent_errors::mcp::{McpError, McpServer};
    ///
    /// # async fn demo() {
    /// let slow = McpServer::stdio("slow", "node")
    ///     .arg("server.js")
    ///     .with_request_timeout(Duration::from_secs(5))
    ///     .connect()
    ///     .await;
    /// if let Err(McpError::Timeout { timeout, .. }) = &slow {
    ///     eprintln!("the server did not answer within {timeout:?}");
    /// }
    /// # }
    /// ```
    #[must_use]
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Makes every tool of this server share one service breaker keyed `key` (by default each
    /// tool has its own): a server that is down then opens once for all its tools, and any
    /// local tool naming the same key shares it too.
    #[must_use]
    pub fn with_breaker_key(mut self, key: impl Into<String>) -> Self {
        self.breaker = Some(key.into());
        self
    }

    /// Whether this server's tools may run twice for one call (see
    /// [`ToolDef::idempotent`]), whatever the server says. Without it each tool follows its
    /// own annotations: `idempotentHint: true`, or `readOnlyHint: true` (a tool that changes nothing can run
    /// again); a tool with neither is not idempotent. Annotations are the server's claims, so
    /// set this for a server you do not trust to make them.
    #[must_use]
    pub fn with_idempotent(mut self, idempotent: bool) -> Self {
        self.idempotent = Some(idempotent);
        self
    }

    /// Declares that the server applies each `tools/call` once per idempotency key, the key
    /// every call carries in `_meta` under
    /// [`IDEMPOTENCY_KEY_META`](super::IDEMPOTENCY_KEY_META) (as an [`McpService`](super::McpService)
    /// of this crate can): every tool of the server is [keyed](ToolDef::keyed), so the
    /// recommended preset retries its timeouts and dropped connections. Off by default: a
    /// server that ignores the key would apply a retried call twice.
    #[must_use]
    pub fn with_keyed(mut self, keyed: bool) -> Self {
        self.keyed = keyed;
        self
    }

    /// How a server that exited is restarted: at most `schedule.max_attempts()` restarts in a
    /// row without a call answered in between, the n-th after `schedule.delay(n)`. Past that,
    /// calls fail at once ([`McpError::GaveUp`], transient, so breakers count them). The default
    /// is 5 restarts, from 200 ms doubling up to 5 s.
    #[must_use]
    pub fn with_restarts(mut self, schedule: RetrySchedule) -> Self {
        self.restarts = schedule;
        self
    }

    /// Offers only the tools named here (by the server's own name, before any
    /// [prefix](McpServer::with_prefix)); a name ending in `*` stands for every name that starts
    /// with what precedes it. Every tool of the server is offered unless a filter says
    /// otherwise, and the filters add up: a tool is offered when it is on every allow list, on
    /// no deny list and passes every predicate.
    ///
    /// A tool that is not offered is not registered: the model never sees it, and a call of it
    /// by name is an unknown tool (`not_found`), never sent to the server.
    ///
    /// ```no_run
    /// use agent_errors::mcp::McpServer;
    ///
    /// # async fn demo() -> Result<(), agent_errors::mcp::McpError> {
    /// let everything = McpServer::stdio("everything", "node")
    ///     .args(["server-everything/dist/index.js", "stdio"])
    ///     .allow_tools(["echo", "get-*"]) // `echo`, and every tool whose name starts `get-`
    ///     .deny_tools(["get-env"]) // but never the one that prints the server's environment
    ///     .filter_tools(|tool| {
    ///         // nothing the server itself calls destructive
    ///         tool.annotations
    ///             .as_ref()
    ///             .is_none_or(|a| a.destructive_hint != Some(true))
    ///     })
    ///     .connect()
    ///     .await?;
    /// # drop(everything); Ok(()) }
    /// ```
    #[must_use]
    pub fn allow_tools(mut self, names: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.filter.allow(names);
        self
    }

    /// Never offers the tools named here (names or `prefix*`, as in
    /// [`allow_tools`](McpServer::allow_tools)).
    #[must_use]
    pub fn deny_tools(mut self, names: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.filter.deny(names);
        self
    }

    /// Offers only the tools `keep` accepts: it sees each tool as the server listed it (name,
    /// description, schema, annotations), so it can judge by more than the name.
    #[must_use]
    pub fn filter_tools(mut self, keep: impl Fn(&Tool) -> bool + Send + Sync + 'static) -> Self {
        self.filter.predicate(keep);
        self
    }

    /// Starts (or reaches) the server, completes the MCP handshake and lists its tools.
    pub async fn connect(self) -> Result<McpClient, McpError> {
        let (connection, listed) = Connection::open(
            self.name.clone(),
            self.endpoint.clone(),
            self.restarts.clone(),
            self.request_timeout,
        )
        .await?;
        let tools = listed
            .into_iter()
            .filter(|tool| self.filter.keeps(tool))
            .map(|tool| self.tool_def(&connection, tool))
            .collect();
        Ok(McpClient { connection, tools })
    }

    fn tool_def(&self, connection: &Arc<Connection>, tool: Tool) -> ToolDef {
        let idempotent = self
            .idempotent
            .unwrap_or_else(|| annotated_idempotent(&tool));
        let description = tool
            .description
            .map(|d| d.into_owned())
            .or(tool.title)
            .unwrap_or_default();
        let handler = RemoteTool {
            connection: Arc::clone(connection),
            name: tool.name.to_string(),
        };
        let parameters = serde_json::Value::Object(JsonObject::clone(&tool.input_schema));
        let def = ToolDef::from_handler(
            format!("{}{}", self.prefix, tool.name),
            description,
            parameters,
            handler,
        )
        .with_policy(self.policy.clone())
        .with_crate_defaults(self.crate_defaults.clone())
        .idempotent(idempotent)
        .keyed(self.keyed);
        let def = match &self.breaker {
            Some(key) => def.with_breaker_key(key.clone()),
            None => def,
        };
        match self.timeout {
            Some(timeout) => def.with_timeout(timeout),
            None => def,
        }
    }
}

/// Whether the server says a second call of `tool` does no more than the first: its
/// `idempotentHint`, or `readOnlyHint` (a tool that changes nothing can run again).
fn annotated_idempotent(tool: &Tool) -> bool {
    tool.annotations.as_ref().is_some_and(|annotations| {
        annotations.idempotent_hint == Some(true) || annotations.read_only_hint == Some(true)
    })
}

/// How long an MCP request waits for its answer unless
/// [`McpServer::with_request_timeout`] says otherwise: the handshake, `tools/list` and every
/// `tools/call`.
///
/// # Examples
///
/// ```
/// assert_eq!(agent_errors::mcp::DEFAULT_REQUEST_TIMEOUT.as_secs(), 60);
/// ```
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

fn default_restarts() -> RetrySchedule {
    RetrySchedule::attempts(5)
        .expect("5 is not zero")
        .with_initial(Duration::from_millis(200))
        .with_max(Duration::from_secs(5))
}

/// A connected MCP server: its tools, and the handle that stops it.
///
/// Clones share the connection. The tools hold it too, so it lives as long as an agent that
/// uses them; [`shutdown`](McpClient::shutdown) ends it for everyone.
///
/// # Examples
///
/// It starts a real MCP server program, hence `no_run`:
///
/// ```no_run
/// use agent_errors::mcp::McpServer;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), agent_errors::mcp::McpError> {
/// let client = McpServer::stdio("git", "uvx").arg("mcp-server-git").connect().await?;
/// println!("`{}` (pid {:?}) offers {} tools", client.name(), client.pid(), client.tools().len());
/// client.shutdown().await; // also ends the tools' connection on every agent that holds them
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct McpClient {
    connection: Arc<Connection>,
    tools: Vec<ToolDef>,
}

impl McpClient {
    /// The server's name.
    pub fn name(&self) -> &str {
        self.connection.server()
    }

    /// The server's tools, to register on an agent or a registry.
    pub fn tools(&self) -> Vec<ToolDef> {
        self.tools.clone()
    }

    /// The id of the server process while it runs (stdio servers).
    pub fn pid(&self) -> Option<u32> {
        self.connection.pid()
    }

    /// Stops the server and waits for its process to exit (it is closed, then signalled, then
    /// killed). Calls still running answer [`McpError::Shutdown`]; later calls too.
    pub async fn shutdown(&self) {
        self.connection.shutdown().await;
    }
}

/// Calls one tool of the server: parses the arguments here, sends them in the future.
struct RemoteTool {
    connection: Arc<Connection>,
    name: String,
}

impl fmt::Debug for RemoteTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteTool")
            .field("server", &self.connection.server())
            .field("name", &self.name)
            .finish()
    }
}

impl ToolHandler for RemoteTool {
    fn call(&self, raw_args: &str) -> Result<ToolFuture, ToolError> {
        self.call_with(raw_args, &Extensions::new())
    }

    /// Sends the call's [`IdempotencyKey`], when it has one, in the request's `_meta` under
    /// [`IDEMPOTENCY_KEY_META`](super::IDEMPOTENCY_KEY_META).
    fn call_with(&self, raw_args: &str, extensions: &Extensions) -> Result<ToolFuture, ToolError> {
        let args = parse_args::<JsonObject>(raw_args)?;
        let connection = Arc::clone(&self.connection);
        let name = self.name.clone();
        let key = extensions.get::<IdempotencyKey>().map(ToString::to_string);
        Ok(Box::pin(
            async move { connection.call(&name, args, key).await },
        ))
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::ToolAnnotations;

    use super::*;

    fn tool(annotations: Option<ToolAnnotations>) -> Tool {
        let tool = Tool::new("t", "A tool.", JsonObject::new());
        match annotations {
            Some(annotations) => tool.annotate(annotations),
            None => tool,
        }
    }

    #[test]
    fn a_tool_is_idempotent_when_its_server_says_so_or_says_it_changes_nothing() {
        assert!(!annotated_idempotent(&tool(None)));
        assert!(!annotated_idempotent(&tool(Some(ToolAnnotations::new()))));
        let idempotent = ToolAnnotations::new().idempotent(true);
        assert!(annotated_idempotent(&tool(Some(idempotent))));
        let read_only = ToolAnnotations::new().read_only(true);
        assert!(annotated_idempotent(&tool(Some(read_only))));
        let neither = ToolAnnotations::new().read_only(false).idempotent(false);
        assert!(!annotated_idempotent(&tool(Some(neither))));
    }
}
