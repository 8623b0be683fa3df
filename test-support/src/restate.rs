//! A `restate-server` process on free loopback ports, its state in a base directory the caller
//! owns (so a test can kill the server and start another on the same state and ports).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Where `scripts/install-restate-server.sh` installs, from the workspace root: the binary is
/// `restate-server-<platform>/bin/restate-server` in here, for the platform npm picked.
const INSTALLED: &str = "test-servers/restate-server/node_modules/@restatedev";

/// How long a server gets to answer on its admin and ingress ports: 300 polls of 100 ms.
const READY_POLLS: u32 = 300;

/// Why a Restate server did not start or did not take a service.
///
/// # Examples
///
/// ```
/// use agent_errors_test_support::StartError;
///
/// fn advice(error: &StartError) -> &'static str {
///     match error {
///         StartError::NotInstalled { .. } => "run `bash scripts/install-test-deps.sh`",
///         StartError::Install(_) => "the install script's output says why",
///         StartError::Spawn(_) => "the binary is there but does not run here",
///         StartError::NotReady => "look at the server's own log",
///         StartError::Register(_) => "is the service listening on that port?",
///     }
/// }
///
/// let missing = StartError::NotInstalled { looked_for: "/nowhere".into() };
/// assert_eq!(advice(&missing), "run `bash scripts/install-test-deps.sh`");
/// ```
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// No binary where the install script puts it even after running it, and
    /// `RESTATE_SERVER_BIN` is not set.
    #[error(
        "restate-server is not installed (looked for {}): run `bash scripts/install-restate-server.sh` \
         (or `bash scripts/install-test-deps.sh`), or set RESTATE_SERVER_BIN",
        looked_for.display()
    )]
    NotInstalled {
        /// The path that was tried.
        looked_for: PathBuf,
    },
    /// The binary was missing and installing it failed (no npm, no network, ...).
    #[error("restate-server is missing and could not be installed: {0}")]
    Install(#[from] crate::InstallError),
    /// The binary is there but the process could not be started.
    #[error("restate-server did not start: {0}")]
    Spawn(#[source] std::io::Error),
    /// The process started but did not answer on its admin and ingress ports within 30 s.
    #[error("restate-server did not answer on its admin and ingress ports within 30 s")]
    NotReady,
    /// The admin API refused the service's deployment, or could not be reached.
    #[error("the service's registration was refused: {0}")]
    Register(String),
}

/// A free loopback port, for a server or a service to listen on.
///
/// # Examples
///
/// ```
/// let port = agent_errors_test_support::free_port();
/// assert!(std::net::TcpListener::bind(("127.0.0.1", port)).is_ok());
/// ```
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("the loopback interface has a free port")
        .port()
}

/// A running `restate-server`: killed when dropped. Its base directory is left to the caller.
///
/// # Examples
///
/// ```
/// use agent_errors_test_support::RestateServer;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let base = std::env::temp_dir().join(format!("restate-doc-{}", std::process::id()));
/// let server = RestateServer::start(base.clone()).await?;
/// let health = reqwest::get(format!("{}/restate/health", server.ingress_url())).await?;
/// assert!(health.status().is_success());
/// // A service would be served on a port of its own and then `server.register(port)`.
/// let (base, _ports) = server.kill();
/// std::fs::remove_dir_all(base)?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct RestateServer {
    process: Child,
    base: PathBuf,
    admin: u16,
    ingress: u16,
    node: u16,
}

impl RestateServer {
    /// Starts a server on free loopback ports with its state under `base`, and waits until its
    /// admin and ingress ports answer.
    pub async fn start(base: PathBuf) -> Result<RestateServer, StartError> {
        let ports = (free_port(), free_port(), free_port());
        RestateServer::start_on(base, ports).await
    }

    /// Starts a server on the given `(admin, ingress, node)` ports with its state under `base`:
    /// after [`kill`](Self::kill), the same server back on its own state.
    pub async fn start_on(
        base: PathBuf,
        (admin, ingress, node): (u16, u16, u16),
    ) -> Result<RestateServer, StartError> {
        let process = Command::new(binary()?)
            .arg("--base-dir")
            .arg(&base)
            .args(["--no-logo", "--default-num-partitions", "1"])
            .env("RESTATE_LISTEN_MODE", "tcp")
            .env("RESTATE_BIND_ADDRESS", format!("127.0.0.1:{node}"))
            .env(
                "RESTATE_ADVERTISED_ADDRESS",
                format!("http://127.0.0.1:{node}"),
            )
            .env("RESTATE_ADMIN__BIND_ADDRESS", format!("127.0.0.1:{admin}"))
            .env(
                "RESTATE_INGRESS__BIND_ADDRESS",
                format!("127.0.0.1:{ingress}"),
            )
            .env(
                "RESTATE_ADMIN__QUERY_ENGINE__PGSQL_BIND_ADDRESS",
                format!("127.0.0.1:{}", free_port()),
            )
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(StartError::Spawn)?;
        let server = RestateServer {
            process,
            base,
            admin,
            ingress,
            node,
        };
        server.wait_ready().await?;
        Ok(server)
    }

    /// The ingress's base URL (`http://127.0.0.1:<port>`): where invocations are sent.
    pub fn ingress_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.ingress)
    }

    /// The admin API's base URL (`http://127.0.0.1:<port>`): deployments, and the SQL query
    /// endpoint (`/query`) that tells an invocation's status.
    pub fn admin_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.admin)
    }

    /// Registers the Restate endpoint listening on loopback `port` as a deployment.
    pub async fn register(&self, port: u16) -> Result<(), StartError> {
        let url = format!("{}/deployments", self.admin_url());
        let body = serde_json::json!({ "uri": format!("http://127.0.0.1:{port}") });
        let response = reqwest::Client::new()
            .post(url)
            .json(&body)
            .send()
            .await
            .map_err(|error| StartError::Register(error.to_string()))?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        let text = response.text().await.unwrap_or_default();
        Err(StartError::Register(format!("{status} {text}")))
    }

    /// Kills the server (SIGKILL, as a crash) and hands back its base directory and
    /// `(admin, ingress, node)` ports, for [`start_on`](Self::start_on).
    pub fn kill(mut self) -> (PathBuf, (u16, u16, u16)) {
        self.stop();
        let ports = (self.admin, self.ingress, self.node);
        (std::mem::take(&mut self.base), ports)
    }

    fn stop(&mut self) {
        // Already gone is fine: either way no server is left behind.
        let _ = self.process.kill();
        let _ = self.process.wait();
    }

    async fn wait_ready(&self) -> Result<(), StartError> {
        let client = reqwest::Client::new();
        let admin = format!("http://127.0.0.1:{}/version", self.admin);
        let ingress = format!("{}/restate/health", self.ingress_url());
        for _ in 0..READY_POLLS {
            if answers(&client, &admin).await && answers(&client, &ingress).await {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(StartError::NotReady)
    }
}

impl Drop for RestateServer {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn answers(client: &reqwest::Client, url: &str) -> bool {
    client
        .get(url)
        .send()
        .await
        .is_ok_and(|response| response.status().is_success())
}

/// `RESTATE_SERVER_BIN`, or where the install script puts the binary (installing it first when
/// it is not there).
fn binary() -> Result<PathBuf, StartError> {
    if let Some(path) = std::env::var_os("RESTATE_SERVER_BIN") {
        return Ok(PathBuf::from(path));
    }
    let packages = crate::install::workspace_root().join(INSTALLED);
    if let Some(binary) = installed_binary(&packages) {
        return Ok(binary);
    }
    crate::install(crate::Program::RestateServer)?;
    installed_binary(&packages).ok_or(StartError::NotInstalled {
        looked_for: packages.join("restate-server-*/bin/restate-server"),
    })
}

/// The binary of the platform package npm installed in `packages` (`restate-server-linux-x64`,
/// `restate-server-linux-arm64`, `restate-server-darwin-arm64`, ...), as the install script
/// finds it.
fn installed_binary(packages: &Path) -> Option<PathBuf> {
    std::fs::read_dir(packages)
        .ok()?
        .filter_map(Result::ok)
        .filter(|entry| {
            let name = entry.file_name();
            name.to_string_lossy().starts_with("restate-server-")
        })
        .map(|entry| entry.path().join("bin/restate-server"))
        .find(|binary| binary.is_file())
}
