//! The Restate side of the durable-run bench: a `restate-server` on free loopback ports (the
//! binary `scripts/install-restate-server.sh` installs, as the tests use), the bench's agent
//! served as the Restate service `Bench` from a thread of its own, and one run = one request to
//! the ingress, answered when the run is done.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use agent_errors::{Agent, RunOptions};
use restate_sdk::prelude::*;

struct Bench {
    agent: Agent,
}

#[restate_sdk::service]
impl Bench {
    #[handler]
    async fn ask(&self, ctx: Context<'_>, question: String) -> HandlerResult<String> {
        agent_errors::restate::run(&ctx, &self.agent, question, RunOptions::new())
            .await
            .map_err(|error| agent_errors::restate::terminal_error(&error).into())
    }
}

fn server_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("RESTATE_SERVER_BIN") {
        return PathBuf::from(path);
    }
    let binary = Path::new(env!("CARGO_MANIFEST_DIR")).join(
        "../test-servers/restate-server/node_modules/@restatedev/restate-server-linux-x64/bin/restate-server",
    );
    assert!(
        binary.exists(),
        "restate-server is not installed (looked for {}): run `bash scripts/install-restate-server.sh`",
        binary.display()
    );
    binary
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// A server, the agent's service registered with it, and a client of its ingress.
pub struct OnRestate {
    server: Child,
    base: PathBuf,
    ingress: String,
    client: reqwest::Client,
}

impl OnRestate {
    pub fn start(rt: &tokio::runtime::Runtime, agent: Agent) -> OnRestate {
        let (admin, ingress, node) = (free_port(), free_port(), free_port());
        let base =
            std::env::temp_dir().join(format!("agent-errors-bench-restate-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let server = Command::new(server_binary())
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
            .expect("restate-server starts");
        let service = free_port();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            rt.block_on(async move {
                let endpoint = Endpoint::builder().bind(Bench { agent }).build();
                let listener = tokio::net::TcpListener::bind(("127.0.0.1", service))
                    .await
                    .expect("the service's port");
                HttpServer::new(endpoint).serve(listener).await;
            });
        });
        let on = OnRestate {
            server,
            base,
            ingress: format!("http://127.0.0.1:{ingress}"),
            client: reqwest::Client::new(),
        };
        rt.block_on(on.register(admin, service));
        on
    }

    async fn register(&self, admin: u16, service: u16) {
        let health = format!("{}/restate/health", self.ingress);
        let deployments = format!("http://127.0.0.1:{admin}/deployments");
        let body = serde_json::json!({ "uri": format!("http://127.0.0.1:{service}") });
        for _ in 0..300 {
            let up = self
                .client
                .get(&health)
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if up {
                let registered = self.client.post(&deployments).json(&body).send().await;
                if registered.is_ok_and(|r| r.status().is_success()) {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("restate-server did not take the service within 30 s");
    }

    /// One run, start to answer.
    pub async fn run(&self, question: &str) -> String {
        let url = format!("{}/Bench/ask", self.ingress);
        let response = self
            .client
            .post(url)
            .json(&question)
            .send()
            .await
            .expect("ingress");
        assert!(response.status().is_success(), "{}", response.status());
        response.text().await.expect("the answer")
    }
}

impl Drop for OnRestate {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
        let _ = std::fs::remove_dir_all(&self.base);
    }
}
