//! A web service whose support agent refunds orders, and a refund above $100 waits for a
//! manager's signed answer, across a restart of the process.
//!
//! - `POST /refunds` `{"order": "B-2", "amount": 250}` runs the agent under a run id of its
//!   own. A refund up to $100 is made at once (200, the agent's answer); a larger one waits
//!   (202, the run id and its question). Nothing is held while it waits: the run is saved in
//!   the SQLite file and the process may stop.
//! - `GET /runs/{id}/pending` reads the questions of a waiting run from the store, exactly as
//!   they were saved: an approval screen shows these, never what a browser sends.
//! - `POST /runs/{id}/approve` (a manager, header `x-manager: <MANAGER_PASSWORD>`) signs an
//!   approval of the saved question with the service's key and hands back an opaque,
//!   URL-safe token, good for 15 minutes: what a link in the manager's email carries.
//! - `POST /runs/{id}/answer` `{"token": "..."}` resumes the run with the answer: the refund is
//!   made once, and the agent's answer comes back (200). An unsigned or altered token is
//!   refused and the run keeps waiting (202).
//!
//! Every error is answered with [`RunError::http_status`] and the error's text. Each request
//! and run is traced under the run's id (`gen_ai.conversation.id`).
//!
//! The agent runs on a small deterministic model so the example is offline; put any
//! [`ChatModel`] there (an OpenAI or Anthropic provider, `RigModel`).
//!
//! ```sh
//! cargo run -p agent-errors-examples --bin refund_service -- /tmp/refunds 127.0.0.1:3000
//! ```
//!
//! The crate's tests start this binary, stop it with SIGKILL while a refund waits, start it
//! again on the same directory and approve the refund over HTTP.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use agent_errors::approval::{Answer, AnswerKey, Decision, PendingApproval};
use agent_errors::call::{BoxFuture, IdempotencyKey};
use agent_errors::checkpoint::SqliteCheckpoints;
use agent_errors::prelude::*;
use agent_errors::{
    BoxError, ChatModel, ChatRequest, ChatResponse, Ctx, Message, RunError, RunOptions, ToolCall,
};
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};

/// Refunds above this many dollars wait for a manager.
const LIMIT: u64 = 100;

/// In production: a secret from your secret store (32 bytes or more), and real authentication.
const ANSWER_KEY: &[u8] = b"the refund service's own key, not a secret here";
const MANAGER_PASSWORD: &str = "let-me-approve";

/// Where the payment API writes its payments (the effects the tests count).
struct Payments {
    log: PathBuf,
}

/// Refunds `amount` dollars for `order`.
#[tool]
async fn refund(
    payments: Ctx<Arc<Payments>>,
    key: Ctx<IdempotencyKey>,
    order: String,
    amount: u64,
) -> Result<String, std::io::Error> {
    // The call's key is the payment API's idempotency key: a call made again pays once.
    pay_once(&payments.log, &key.to_string(), &order, amount)?;
    Ok(format!("refunded ${amount} for order {order}"))
}

/// The payment API: a payment under a key it has seen is not made again.
fn pay_once(log: &Path, key: &str, order: &str, amount: u64) -> std::io::Result<()> {
    let seen = std::fs::read_to_string(log).unwrap_or_default();
    if seen
        .lines()
        .any(|line| line.starts_with(&format!("{key} ")))
    {
        return Ok(());
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    writeln!(file, "{key} {order} {amount}")
}

/// A stand-in for a real model: asks for the refund the customer named, then says it is done.
struct SupportModel;

impl ChatModel for SupportModel {
    fn chat<'a>(
        &'a self,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChatResponse, BoxError>> {
        Box::pin(async move {
            let answered = request
                .messages
                .iter()
                .rev()
                .find_map(|message| match message {
                    Message::Tool(result) => Some(result.content.clone()),
                    _ => None,
                });
            if let Some(result) = answered {
                return Ok(ChatResponse::text(format!("Done: {result}.")));
            }
            let asked = request.messages.iter().find_map(|message| match message {
                Message::User { content } => Some(content.clone()),
                _ => None,
            });
            let arguments = asked.unwrap_or_default();
            let call = ToolCall::new("call_1", "refund", arguments);
            Ok(ChatResponse::tool_calls(vec![call]))
        })
    }

    fn name(&self) -> &str {
        "support-model"
    }
}

/// The support agent: refunds above the limit need a person, who answers later, signed.
fn agent(dir: &Path) -> Result<Agent, BoxError> {
    let store = SqliteCheckpoints::open(dir.join("runs.db"))?;
    let above_limit = |call: &ToolCall| {
        let arguments: Value = serde_json::from_str(&call.arguments).unwrap_or_default();
        &*call.name == "refund"
            && arguments["amount"]
                .as_u64()
                .is_none_or(|amount| amount > LIMIT)
    };
    let agent = Agent::builder("support")
        .model(SupportModel)
        .tools(tools![refund])
        .require_approval(above_limit)
        .answer_key(AnswerKey::new(ANSWER_KEY)?)
        .checkpoints(store)
        .build()?;
    Ok(agent)
}

type Reply = (StatusCode, Json<Value>);

/// The HTTP answer for how a run ended.
fn reply(run_id: &str, result: Result<String, RunError>) -> Reply {
    match result {
        Ok(answer) => (
            StatusCode::OK,
            Json(json!({"run_id": run_id, "answer": answer})),
        ),
        Err(error) => {
            let status = StatusCode::from_u16(error.http_status())
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let pending = match &error {
                RunError::WaitingForPerson { pending } => json!(pending),
                _ => Value::Null,
            };
            let body = json!({"run_id": run_id, "error": error.to_string(), "pending": pending});
            (status, Json(body))
        }
    }
}

/// What every run of the service is given.
#[derive(Clone)]
struct Service {
    agent: Arc<Agent>,
    payments: Arc<Payments>,
}

impl Service {
    fn options(&self) -> RunOptions {
        RunOptions::new().context(Arc::clone(&self.payments))
    }
}

async fn start_refund(State(service): State<Service>, Json(body): Json<Value>) -> Reply {
    let order = body["order"].as_str().unwrap_or("unknown");
    let run_id = format!("refund-{order}");
    let options = service.options().run_id(run_id.as_str());
    let agent = &service.agent;
    let outcome = agent.run_with(body.to_string(), options).await;
    reply(&run_id, outcome.result)
}

async fn pending(State(service): State<Service>, UrlPath(run_id): UrlPath<String>) -> Reply {
    match service.agent.pending_approvals(&run_id).await {
        Ok(pending) => (StatusCode::OK, Json(json!(pending))),
        Err(error) => reply(&run_id, Err(error)),
    }
}

/// A manager approves what the store says the run waits on, and gets a signed token.
async fn approve(
    State(service): State<Service>,
    UrlPath(run_id): UrlPath<String>,
    headers: HeaderMap,
) -> Reply {
    let manager = headers
        .get("x-manager")
        .and_then(|value| value.to_str().ok());
    if manager != Some(MANAGER_PASSWORD) {
        return (
            StatusCode::UNAUTHORIZED,
            Json(json!({"error": "managers only"})),
        );
    }
    let pending: Vec<PendingApproval> = match service.agent.pending_approvals(&run_id).await {
        Ok(pending) => pending,
        Err(error) => return reply(&run_id, Err(error)),
    };
    let key = AnswerKey::new(ANSWER_KEY).expect("a long enough key");
    let in_15_minutes = SystemTime::now() + Duration::from_secs(15 * 60);
    let tokens: Vec<String> = pending
        .iter()
        .map(|question| {
            let answer = Answer::to(question, Decision::Approve).expires_at(in_15_minutes);
            answer.signed(&key).to_token()
        })
        .collect();
    (
        StatusCode::OK,
        Json(json!({"run_id": run_id, "tokens": tokens})),
    )
}

/// The answer a link carried: the run goes on with it.
async fn answer(
    State(service): State<Service>,
    UrlPath(run_id): UrlPath<String>,
    Json(body): Json<Value>,
) -> Reply {
    let token = body["token"].as_str().unwrap_or_default();
    let answer = match Answer::from_token(token) {
        Ok(answer) => answer,
        Err(error) => {
            return (
                StatusCode::BAD_REQUEST,
                Json(json!({"error": error.to_string()})),
            );
        }
    };
    let options = service.options().answered(answer);
    let outcome = service.agent.resume(run_id.as_str(), options).await;
    reply(&run_id, outcome.result)
}

fn router(agent: Agent, dir: &Path) -> Router {
    let payments = Arc::new(Payments {
        log: dir.join("payments.log"),
    });
    let service = Service {
        agent: Arc::new(agent),
        payments,
    };
    Router::new()
        .route("/refunds", post(start_refund))
        .route("/runs/{run_id}/pending", get(pending))
        .route("/runs/{run_id}/approve", post(approve))
        .route("/runs/{run_id}/answer", post(answer))
        .with_state(service)
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().unwrap_or_else(|| "refunds".to_owned()));
    let address = args.next().unwrap_or_else(|| "127.0.0.1:3000".to_owned());
    std::fs::create_dir_all(&dir)?;
    let listener = tokio::net::TcpListener::bind(&address).await?;
    // The tests read the address a port 0 was given.
    println!("LISTENING {}", listener.local_addr()?);
    axum::serve(listener, router(agent(&dir)?, &dir)).await?;
    Ok(())
}
