//! One live connection to an MCP server: started on connect, restarted with backoff when the
//! server exits, closed for good on shutdown.

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult, JsonObject, RequestParamsMeta, Tool};
use rmcp::service::{Peer, RoleClient, RunningService};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ServiceError, ServiceExt};
use tokio::sync::Mutex;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::IDEMPOTENCY_KEY_META;
use super::error::McpError;
use crate::error::BoxError;
use crate::escapes::Visible;
use crate::retry::RetrySchedule;

/// How to reach a server.
#[derive(Debug, Clone)]
pub(crate) enum Endpoint {
    /// A child process speaking MCP on its stdin and stdout.
    Stdio(CommandSpec),
    /// A streamable HTTP endpoint.
    Http(String),
}

/// A command that can be run again: what a restart needs.
#[derive(Debug, Clone)]
pub(crate) struct CommandSpec {
    pub(crate) program: OsString,
    pub(crate) args: Vec<OsString>,
    pub(crate) env: Vec<(OsString, OsString)>,
    pub(crate) current_dir: Option<PathBuf>,
    pub(crate) quiet: bool,
}

type Service = RunningService<RoleClient, ()>;

/// A running session and the process behind it, if we started one.
struct Live {
    service: Service,
    /// Tells this life apart from the next: a call that saw it die marks only it dead.
    life: u64,
}

/// Where the connection stands. The lock is held across a restart, so calls that find the
/// server gone wait for one restart instead of each starting their own.
enum State {
    Up(Live),
    /// The server exited (or could not be restarted), the last time at `at`.
    Down {
        at: Instant,
    },
    Shut,
}

pub(crate) struct Connection {
    server: String,
    endpoint: Endpoint,
    restarts: RetrySchedule,
    /// The bound on every request: the handshake, `tools/list`, each `tools/call`.
    request_timeout: Duration,
    state: Mutex<State>,
    lives: AtomicU64,
    /// Deaths in a row with no call answered in between: what the restart backoff counts.
    deaths: AtomicU32,
    pid: AtomicU32,
    shutdown: CancellationToken,
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("server", &self.server)
            .field("endpoint", &self.endpoint)
            .field("pid", &self.pid())
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// Starts the server and lists its tools, the handshake and the listing each bounded by
    /// `request_timeout` (a server that never answers, or whose listing is over the
    /// transport's line limit and so never arrives, is a timeout, and its process is killed).
    pub(crate) async fn open(
        server: String,
        endpoint: Endpoint,
        restarts: RetrySchedule,
        request_timeout: Duration,
    ) -> Result<(Arc<Connection>, Vec<Tool>), McpError> {
        let mut connection = Connection {
            server,
            endpoint,
            restarts,
            request_timeout,
            state: Mutex::new(State::Shut),
            lives: AtomicU64::new(0),
            deaths: AtomicU32::new(0),
            pid: AtomicU32::new(0),
            shutdown: CancellationToken::new(),
        };
        let live = connection.start().await?;
        let listing = live.service.peer().list_all_tools();
        let tools = tokio::time::timeout(request_timeout, listing)
            .await
            .map_err(|_| McpError::timed_out(&connection.server, request_timeout))?;
        let tools = tools.map_err(|e| McpError::handshake(&connection.server, e))?;
        *connection.state.get_mut() = State::Up(live);
        Ok((Arc::new(connection), tools))
    }

    pub(crate) fn server(&self) -> &str {
        &self.server
    }

    /// The server process's id, while one runs.
    pub(crate) fn pid(&self) -> Option<u32> {
        Some(self.pid.load(Ordering::SeqCst)).filter(|&pid| pid != 0)
    }

    /// Calls `tool`, with the call's idempotency key in `_meta` when it has one: restarts the
    /// server first if it exited. Dropping the future tells the server with MCP's cancellation
    /// notification (rmcp sends it when a request is abandoned).
    pub(crate) async fn call(
        &self,
        tool: &str,
        args: JsonObject,
        key: Option<String>,
    ) -> Result<String, BoxError> {
        let (peer, life) = self.peer().await?;
        let mut params = CallToolRequestParams::new(tool.to_owned()).with_arguments(args);
        if let Some(key) = key {
            let meta = params.meta_or_default();
            meta.insert(IDEMPOTENCY_KEY_META.to_owned(), key.into());
        }
        // Past the bound the request's future is dropped, which tells the server it is
        // cancelled.
        let bounded = tokio::time::timeout(self.request_timeout, peer.call_tool(params));
        let answer = tokio::select! {
            biased;
            () = self.shutdown.cancelled() => return Err(McpError::shutdown(&self.server).into()),
            answer = bounded => match answer {
                Ok(answer) => answer,
                Err(_) => return Err(McpError::timed_out(&self.server, self.request_timeout).into()),
            },
        };
        match answer {
            Ok(result) => {
                // Any answer shows the server works: restarts count from zero again.
                self.deaths.store(0, Ordering::SeqCst);
                output(&self.server, tool, result)
            }
            Err(error) => {
                if matches!(
                    error,
                    ServiceError::TransportClosed | ServiceError::Cancelled { .. }
                ) {
                    self.died(life).await;
                }
                if self.shutdown.is_cancelled() {
                    return Err(McpError::shutdown(&self.server).into());
                }
                Err(McpError::from_service(&self.server, error))
            }
        }
    }

    /// Stops the server and waits for it to exit: calls still running answer "shut down".
    pub(crate) async fn shutdown(&self) {
        self.shutdown.cancel();
        let mut state = self.state.lock().await;
        if let State::Up(live) = std::mem::replace(&mut *state, State::Shut) {
            // For a child process this closes its stdin, waits, then signals and kills it.
            if let Err(error) = live.service.cancel().await {
                tracing::warn!(server = %Visible::of(&self.server), error = %Visible::of(error), "MCP session did not end cleanly");
            }
        }
        self.pid.store(0, Ordering::SeqCst);
    }

    /// A peer of the running server, restarting it (after its backoff) if it exited.
    async fn peer(&self) -> Result<(Peer<RoleClient>, u64), McpError> {
        let mut state = self.state.lock().await;
        loop {
            match &*state {
                State::Shut => return Err(McpError::shutdown(&self.server)),
                State::Up(live) if !live.service.is_closed() => {
                    return Ok((live.service.peer().clone(), live.life));
                }
                State::Up(_) => self.mark_down(&mut state),
                &State::Down { at } => {
                    let deaths = self.deaths.load(Ordering::SeqCst);
                    let restarts = self.restarts.max_attempts();
                    if deaths > restarts {
                        return Err(McpError::gave_up(&self.server, restarts));
                    }
                    let wait = tokio::time::sleep_until(at + self.restarts.delay(deaths));
                    tokio::select! {
                        biased;
                        () = self.shutdown.cancelled() => {
                            return Err(McpError::shutdown(&self.server));
                        }
                        () = wait => {}
                    }
                    tracing::info!(server = %Visible::of(&self.server), deaths, "restarting MCP server");
                    match self.start().await {
                        Ok(live) => *state = State::Up(live),
                        Err(error) => {
                            self.mark_down(&mut state);
                            return Err(error);
                        }
                    }
                }
            }
        }
    }

    /// A call found the session of `life` gone.
    async fn died(&self, life: u64) {
        let mut state = self.state.lock().await;
        if matches!(&*state, State::Up(live) if live.life == life) {
            self.mark_down(&mut state);
        }
    }

    /// The running session is gone, or a restart failed: one more death in a row.
    fn mark_down(&self, state: &mut State) {
        self.deaths.fetch_add(1, Ordering::SeqCst);
        *state = State::Down { at: Instant::now() };
        self.pid.store(0, Ordering::SeqCst);
    }

    /// Starts a new session: spawns the process or opens the HTTP session, then the handshake.
    async fn start(&self) -> Result<Live, McpError> {
        let life = self.lives.fetch_add(1, Ordering::SeqCst) + 1;
        let service = match &self.endpoint {
            Endpoint::Stdio(spec) => {
                let process = spawn(spec).map_err(|source| McpError::Spawn {
                    server: self.server.clone(),
                    source,
                })?;
                self.pid.store(process.id().unwrap_or(0), Ordering::SeqCst);
                self.bounded(().serve(process)).await?
            }
            Endpoint::Http(url) => {
                let transport = StreamableHttpClientTransport::from_uri(url.as_str());
                self.bounded(().serve(transport)).await?
            }
        };
        let service = service.map_err(|e| McpError::handshake(&self.server, e))?;
        Ok(Live { service, life })
    }
}

impl Connection {
    /// `request` within the request bound; past it, dropped (with the process it holds).
    async fn bounded<T>(&self, request: impl Future<Output = T>) -> Result<T, McpError> {
        tokio::time::timeout(self.request_timeout, request)
            .await
            .map_err(|_| {
                self.pid.store(0, Ordering::SeqCst);
                McpError::timed_out(&self.server, self.request_timeout)
            })
    }
}

/// Spawns the server process. It is killed if its handle is dropped, so a client that is
/// dropped without `shutdown` leaves no process behind.
fn spawn(spec: &CommandSpec) -> std::io::Result<TokioChildProcess> {
    let mut command = tokio::process::Command::new(&spec.program);
    command
        .args(&spec.args)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .kill_on_drop(true);
    if let Some(dir) = &spec.current_dir {
        command.current_dir(dir);
    }
    let stderr = if spec.quiet {
        Stdio::null()
    } else {
        Stdio::inherit()
    };
    let (process, _) = TokioChildProcess::builder(command).stderr(stderr).spawn()?;
    Ok(process)
}

/// A tool's result as the text the model sees, or the failure an `isError` result stands for.
fn output(server: &str, tool: &str, result: CallToolResult) -> Result<String, BoxError> {
    let mut text = String::new();
    for block in &result.content {
        if !text.is_empty() {
            text.push('\n');
        }
        match block.as_text() {
            Some(t) => text.push_str(&t.text),
            None => text.push_str(&serde_json::to_string(block).unwrap_or_default()),
        }
    }
    if text.is_empty() {
        if let Some(structured) = &result.structured_content {
            text = structured.to_string();
        }
    }
    if result.is_error == Some(true) {
        Err(McpError::from_error_text(server, tool, text))
    } else {
        Ok(text)
    }
}
