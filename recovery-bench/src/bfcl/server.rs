//! The simulator server: installing what it needs, starting it through this library's MCP
//! client, and the three control calls the benchmark makes outside the agent.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use agent_errors::ToolDef;
use agent_errors::build::ReconcilerDef;
use agent_errors::call::{ReconcileRequest, Reconciled};
use agent_errors::mcp::{McpClient, McpServer};
use agent_errors::testing::handler_of;
use serde::Deserialize;
use serde_json::json;

use super::model::Call;

/// The bench directory holding `server.py` and `setup.sh`.
fn bench_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/bfcl"))
}

/// A tool call the server does not answer within this is a timeout (the client's bound).
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// Why the server could not be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ServerError {
    #[error("installing bfcl-eval failed: {0}")]
    Setup(String),
    #[error("starting the simulator server: {0}")]
    Connect(Box<agent_errors::mcp::McpError>),
    #[error("the server has no control tool `{0}`")]
    NoControl(&'static str),
    #[error("control call `{tool}` failed: {message}")]
    Control { tool: &'static str, message: String },
}

/// Makes the venv under the target directory, with `bfcl-eval` and `mpmath` in it, unless it
/// is there already; answers its Python.
pub(crate) fn install() -> Result<PathBuf, ServerError> {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../target")),
        PathBuf::from,
    );
    let venv = target.join("bfcl-venv");
    let status = Command::new("sh")
        .arg(bench_dir().join("setup.sh"))
        .arg(&venv)
        .status()
        .map_err(|e| ServerError::Setup(e.to_string()))?;
    if !status.success() {
        return Err(ServerError::Setup(format!("setup.sh exited with {status}")));
    }
    Ok(venv.join("bin").join("python"))
}

/// One server process and the client on it.
pub(crate) struct Worker {
    pub(crate) client: McpClient,
    reset: ToolDef,
    turn_end: ToolDef,
    score: ToolDef,
    applied: ToolDef,
}

/// What `bench_reset` answers: the task.
#[derive(Debug, Deserialize)]
pub(crate) struct TaskInfo {
    pub(crate) questions: Vec<String>,
    pub(crate) ground_truth: Vec<Vec<Call>>,
    pub(crate) tools: Vec<String>,
    pub(crate) tasks: usize,
}

/// The name the reconciled strategy's tools give their reconciler.
pub(crate) const RECONCILER: &str = "applied_by_key";

/// What `bench_applied` answers.
#[derive(Debug, Deserialize)]
struct Applied {
    applied: bool,
    result: Option<String>,
}

/// What `bench_score` answers: BFCL's checker's verdict and the server's counts.
#[derive(Debug, Deserialize)]
pub(crate) struct Score {
    pub(crate) passed: bool,
    pub(crate) why: Option<String>,
    pub(crate) duplicates: u64,
    pub(crate) duplicate_detail: Vec<serde_json::Value>,
    pub(crate) tool_calls: u64,
    /// Calls repeated under a key whose answer the server had sent: a timeout the machine's
    /// load caused, not a fault.
    pub(crate) late_answers: u64,
}

impl Worker {
    pub(crate) async fn start(python: &Path) -> Result<Worker, ServerError> {
        let client = McpServer::stdio("bfcl", python)
            .arg(bench_dir().join("server.py"))
            .with_timeout(CALL_TIMEOUT)
            .connect()
            .await
            .map_err(|e| ServerError::Connect(Box::new(e)))?;
        let control = |name: &'static str| {
            client
                .tools()
                .into_iter()
                .find(|t| t.name() == name)
                .ok_or(ServerError::NoControl(name))
        };
        Ok(Worker {
            reset: control("bench_reset")?,
            turn_end: control("bench_turn_end")?,
            score: control("bench_score")?,
            applied: control("bench_applied")?,
            client,
        })
    }

    /// BFCL's tools of the task, as this library's MCP client registers them.
    pub(crate) fn tools(&self, names: &[String]) -> Vec<ToolDef> {
        self.client
            .tools()
            .into_iter()
            .filter(|t| names.iter().any(|n| n == t.name()))
            .collect()
    }

    /// A reconciler that asks the server whether a call with the request's idempotency key
    /// was applied, as a service that records each request's key can be asked (a payment looked
    /// up by its key) whether or not it deduplicates by it.
    pub(crate) fn reconciler(&self) -> ReconcilerDef {
        let applied = self.applied.clone();
        ReconcilerDef::from_async_fn(RECONCILER, move |request: ReconcileRequest| {
            let args = json!({"key": request.key.to_string()});
            let running = handler_of(&applied).call(&args.to_string());
            async move {
                let text = running?.await?;
                let answer: Applied = serde_json::from_str(&text)?;
                Ok::<_, agent_errors::BoxError>(match answer.result {
                    Some(result) if answer.applied => Reconciled::happened(result),
                    _ => Reconciled::DidNotHappen,
                })
            }
        })
    }

    async fn control(
        &self,
        name: &'static str,
        tool: &ToolDef,
        args: serde_json::Value,
    ) -> Result<String, ServerError> {
        let failed = |message: String| ServerError::Control {
            tool: name,
            message,
        };
        let running = handler_of(tool)
            .call(&args.to_string())
            .map_err(|e| failed(e.to_string()))?;
        running.await.map_err(|e| failed(e.to_string()))
    }

    /// Starts task `task`'s run: fresh simulators, faults at `rate` from `seed`.
    pub(crate) async fn reset(
        &self,
        task: usize,
        seed: u64,
        rate: f64,
        dedup: bool,
    ) -> Result<TaskInfo, ServerError> {
        let args = json!({"task": task, "seed": seed, "rate": rate, "dedup": dedup});
        let text = self.control("bench_reset", &self.reset, args).await?;
        serde_json::from_str(&text).map_err(|e| ServerError::Control {
            tool: "bench_reset",
            message: e.to_string(),
        })
    }

    /// The user turn ended: the server keeps the simulators' state for the checker.
    pub(crate) async fn turn_end(&self) -> Result<(), ServerError> {
        self.control("bench_turn_end", &self.turn_end, json!({}))
            .await
            .map(drop)
    }

    /// BFCL's checker on the run, and the server's counts.
    pub(crate) async fn score(&self) -> Result<Score, ServerError> {
        let text = self.control("bench_score", &self.score, json!({})).await?;
        serde_json::from_str(&text).map_err(|e| ServerError::Control {
            tool: "bench_score",
            message: e.to_string(),
        })
    }
}
