//! An agent served as a Restate service: every model request and tool attempt is a journaled
//! step, every backoff a durable sleep, and a refund waits for a person on an awakeable. Kill
//! this process at any point and start it again: Restate replays the run, finished steps are
//! not done again, and the run goes on where it was.
//!
//! Needs a Restate server (`restate-server`, BSL-licensed, from npm; this library depends only
//! on the MIT-licensed SDK). In four terminals:
//!
//! ```text
//! bash scripts/install-restate-server.sh        # prints the server binary's path
//! <that path> --base-dir /tmp/restate-demo      # ingress :8080, admin :9070
//! cargo run -p agent-errors-examples --features restate --bin restate_agent
//! curl -X POST localhost:9070/deployments -H 'content-type: application/json' \
//!      -d '{"uri": "http://localhost:9080"}'
//! curl -X POST localhost:8080/Support/ask -H 'content-type: application/json' \
//!      -d '"refund order A17"'
//! ```
//!
//! The service prints the `curl` that approves the refund; the request above answers once it
//! is approved (or denied). `PORT` sets the service's port (9080).
//!
//! The model is a stand-in that answers from the conversation alone (it looks the order up,
//! then refunds it, then reports), so a replayed run and a new one behave the same offline.

use std::sync::atomic::{AtomicU32, Ordering};

use agent_errors::prelude::*;
use agent_errors::restate::AwakeableApprover;
use agent_errors::{Agent, BoxError, ChatModel, ChatRequest, ChatResponse, RunOptions, ToolCall};
use agent_errors::{Message, call::BoxFuture};
use restate_sdk::prelude::*;

static LOOKUPS: AtomicU32 = AtomicU32::new(0);

/// Looks an order up. The order service is flaky: every other call answers 503.
#[tool(on_error(execution = retry(3)))]
async fn lookup_order(id: String) -> Result<String, HttpError> {
    if LOOKUPS.fetch_add(1, Ordering::SeqCst) % 2 == 0 {
        println!("  lookup_order({id}): 503, retried after a durable sleep");
        return Err(HttpError::new(503, "order service busy"));
    }
    Ok(format!("order {id}: 12.99 EUR, delivered"))
}

/// Refunds an order. Waits for a person's approval before it runs.
#[tool(approval = required)]
async fn refund(id: String, cents: u64) -> String {
    println!("  refund({id}, {cents}): done");
    format!("refunded {cents} cents on order {id}")
}

/// Looks the order up, then refunds it, then reports: one step per tool result so far.
struct StandIn;

impl ChatModel for StandIn {
    fn chat<'a>(
        &'a self,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChatResponse, BoxError>> {
        let results: Vec<&str> = request
            .messages
            .iter()
            .filter_map(|m| match m {
                Message::Tool(result) => Some(result.content.as_str()),
                _ => None,
            })
            .collect();
        let call = |name: &str, args: &str| {
            ChatResponse::tool_calls(vec![ToolCall::new(
                format!("call_{}", results.len()),
                name,
                args,
            )])
        };
        let response = match results.as_slice() {
            [] => call("lookup_order", r#"{"id": "A17"}"#),
            [_] => call("refund", r#"{"id": "A17", "cents": 1299}"#),
            [found, refunded] => ChatResponse::text(format!("{found}; {refunded}")),
            _ => ChatResponse::text("done"),
        };
        Box::pin(async move { Ok(response) })
    }
}

struct Support {
    agent: Agent,
}

#[restate_sdk::service]
impl Support {
    #[handler]
    async fn ask(&self, ctx: Context<'_>, request: String) -> HandlerResult<String> {
        agent_errors::restate::run(&ctx, &self.agent, request, RunOptions::new())
            .await
            .map_err(|error| agent_errors::restate::terminal_error(&error).into())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let approver = AwakeableApprover::new(|awakeable, pending| {
        println!("{pending} waits for a person. Approve it with:");
        println!(
            "  curl -X POST localhost:8080/restate/awakeables/{awakeable}/resolve \
             -H 'content-type: application/json' -d '\"Approve\"'"
        );
        println!("or deny it with -d '{{\"Deny\": \"not this one\"}}'");
    });
    let agent = Agent::builder("support")
        .model(StandIn)
        .tools(tools![lookup_order, refund])
        .approver(approver)
        .build()?;
    let endpoint = Endpoint::builder().bind(Support { agent }).build();
    let port = std::env::var("PORT").unwrap_or_else(|_| "9080".into());
    let address = format!("127.0.0.1:{port}").parse()?;
    println!("serving the Support service on {address}");
    HttpServer::new(endpoint).listen_and_serve(address).await;
    Ok(())
}
