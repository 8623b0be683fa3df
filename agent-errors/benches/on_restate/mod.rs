//! The Restate side of the durable-run bench: a `restate-server` on free loopback ports (the
//! binary `scripts/install-restate-server.sh` installs, as the tests use), the bench's agent
//! served as the Restate service `Bench` from a thread of its own, and one run = one request to
//! the ingress, answered when the run is done.

use std::path::PathBuf;

use agent_errors::{Agent, RunOptions};
use agent_errors_test_support::{RestateServer, free_port};
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

/// A server, the agent's service registered with it, and a client of its ingress.
pub struct OnRestate {
    /// `None` only while dropping: the server goes before its base directory.
    server: Option<RestateServer>,
    base: PathBuf,
    ingress: String,
    client: reqwest::Client,
}

impl OnRestate {
    pub fn start(rt: &tokio::runtime::Runtime, agent: Agent) -> OnRestate {
        let base =
            std::env::temp_dir().join(format!("agent-errors-bench-restate-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let server = rt
            .block_on(RestateServer::start(base.clone()))
            .unwrap_or_else(|error| panic!("{error}"));
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
        // The endpoint's thread may not be listening yet: the admin API asks it for its
        // services, so a refusal here is retried.
        rt.block_on(async {
            for _ in 0..300 {
                if server.register(service).await.is_ok() {
                    return;
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            panic!("restate-server did not take the service within 30 s");
        });
        OnRestate {
            ingress: server.ingress_url(),
            server: Some(server),
            base,
            client: reqwest::Client::new(),
        }
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
        drop(self.server.take());
        let _ = std::fs::remove_dir_all(&self.base);
    }
}
