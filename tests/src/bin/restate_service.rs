//! One process serving an agent as a Restate service, for the Restate tests: the test kills it
//! (and the server) mid-run and starts it again on the same port.
//!
//! `restate_service <port> <charge|charge-stored|flaky|rate-limited|transfer> <dir> <gate>`
//!
//! The service is `Assistant`, its handler `ask`. Its model answers from the request alone (a
//! restarted process must answer a replayed run the same way), and logs each request it
//! answers to `<dir>/model.log` (`<messages in the request> <answer> <unix ms>`):
//! - `charge`: the model asks for `charge` (a side effect: a line in `<dir>/charge.log` with the
//!   call's idempotency key), then answers with the tool's result.
//! - `charge-stored`: `charge`, by an agent that also has a checkpoint store
//!   (`<dir>/checkpoints.db`, SQLite).
//! - `flaky`: the model asks for `flaky`, which fails with a 503 every time under `retry(3)`
//!   (a line per attempt in `<dir>/flaky.log`), then answers with what it was told.
//! - `transfer`: the model asks for `transfer`, which requires a person's approval: the process
//!   prints `AWAKEABLE <id> <the question as JSON>` for the person to answer (the tool logs to
//!   `<dir>/transfer.log`, and the arguments it ran with to `<dir>/transfer.args`). With
//!   `ANSWER_KEY` set, the agent takes only answers signed with that key.
//! - `rate-limited`: the model's first request fails with a 429 and `Retry-After: 1`; later ones
//!   answer `after the wait`.
//!
//! `<gate>` holds the model's answer to a request that comes after a tool result: `hang` never
//! answers it (the test kills this process there), `release` answers once `<dir>/release`
//! exists, `open` answers at once. Prints `LISTENING` once it serves, `MODEL_WAITING` when the
//! gate holds a request, and (through the library's tracing) `durable sleep` when a wait begins.

use std::io::Write;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use agent_errors::approval::AnswerKey;
use agent_errors::call::{BoxFuture, Extensions, IdempotencyKey, ToolFuture, ToolHandler};
use agent_errors::checkpoint::SqliteCheckpoints;
use agent_errors::policy::{Action, Policy, PolicyKey, RetryAction};
use agent_errors::restate::AwakeableApprover;
use agent_errors::{
    Agent, BoxError, ChatModel, ChatRequest, ChatResponse, HttpError, LlmErrorDecision, Message,
    RunOptions, ToolCall, ToolDef, ToolError,
};
use restate_sdk::prelude::*;

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn append(path: &Path, line: &str) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    writeln!(file, "{line}")?;
    file.sync_all()
}

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Gate {
    Hang,
    Release,
    Open,
}

struct Model {
    scenario: String,
    dir: PathBuf,
    gate: Gate,
}

impl Model {
    fn answer(&self, request: &ChatRequest) -> Result<ChatResponse, BoxError> {
        let told = request.messages.iter().rev().find_map(|m| match m {
            Message::Tool(result) => Some(result.content.clone()),
            _ => None,
        });
        let tool = match self.scenario.as_str() {
            "charge" | "charge-stored" => "charge",
            "flaky" => "flaky",
            "transfer" => "transfer",
            _ => {
                let earlier =
                    std::fs::read_to_string(self.dir.join("model.log")).unwrap_or_default();
                if earlier.is_empty() {
                    let busy = HttpError::new(429, "slow down").with_header("retry-after", "1");
                    return Err(busy.into());
                }
                return Ok(ChatResponse::text("after the wait"));
            }
        };
        Ok(match told {
            None => ChatResponse::tool_calls(vec![ToolCall::new("call_1", tool, "{}")]),
            Some(told) => ChatResponse::text(format!("told: {told}")),
        })
    }
}

impl ChatModel for Model {
    fn chat<'a>(
        &'a self,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChatResponse, BoxError>> {
        Box::pin(async move {
            let after_tool = request
                .messages
                .iter()
                .any(|m| matches!(m, Message::Tool(_)));
            if after_tool && self.gate != Gate::Open {
                say("MODEL_WAITING");
                if self.gate == Gate::Hang {
                    std::future::pending::<()>().await;
                }
                while !self.dir.join("release").exists() {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            let answer = self.answer(request);
            let said = match &answer {
                Ok(response) => response.text.clone().unwrap_or_else(|| "tool call".into()),
                Err(error) => error.to_string(),
            };
            let line = format!("{} {said} {}", request.messages.len(), now_ms());
            append(&self.dir.join("model.log"), &line)?;
            answer
        })
    }
}

/// A tool that logs each call (its idempotency key) and then answers or fails.
struct Logged {
    log: PathBuf,
    fails: bool,
}

impl ToolHandler for Logged {
    fn call(&self, raw_args: &str) -> Result<ToolFuture, ToolError> {
        self.call_with(raw_args, &Extensions::new())
    }

    fn call_with(&self, args: &str, extensions: &Extensions) -> Result<ToolFuture, ToolError> {
        let key = extensions
            .get::<IdempotencyKey>()
            .map(ToString::to_string)
            .unwrap_or_default();
        let (log, fails) = (self.log.clone(), self.fails);
        let args = args.to_owned();
        Ok(Box::pin(async move {
            append(&log, &key)?;
            append(&log.with_extension("args"), &args)?;
            if fails {
                return Err(BoxError::from(HttpError::new(503, "busy")));
            }
            Ok(format!("charged 250 with key {key}"))
        }))
    }
}

fn tool(dir: &Path, name: &'static str, fails: bool) -> ToolDef {
    let schema = serde_json::json!({"type": "object", "properties": {}});
    let handler = Logged {
        log: dir.join(format!("{name}.log")),
        fails,
    };
    let retry = Action::Retry(RetryAction {
        max_attempts: NonZeroU32::new(3).expect("3 is not zero"),
        initial: Some(Duration::from_millis(200)),
        max: None,
        when_safe: false,
    });
    ToolDef::from_handler(name, format!("The {name} tool."), schema, handler)
        .with_policy(Policy::new().on(PolicyKey::Execution, retry))
}

struct Assistant {
    agent: Agent,
}

#[restate_sdk::service]
impl Assistant {
    #[handler]
    async fn ask(&self, ctx: Context<'_>, question: String) -> HandlerResult<String> {
        agent_errors::restate::run(&ctx, &self.agent, question, RunOptions::new())
            .await
            .map_err(|error| agent_errors::restate::terminal_error(&error).into())
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_writer(std::io::stdout)
        .with_ansi(false)
        .init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [port, scenario, dir, gate] = args.as_slice() else {
        return Err(
            "usage: restate_service <port> <charge|charge-stored|flaky|rate-limited> <dir> <gate>"
                .into(),
        );
    };
    let dir = PathBuf::from(dir);
    let gate = match gate.as_str() {
        "hang" => Gate::Hang,
        "release" => Gate::Release,
        _ => Gate::Open,
    };
    let model = Model {
        scenario: scenario.clone(),
        dir: dir.clone(),
        gate,
    };
    let builder = Agent::builder("assistant");
    let builder = match std::env::var("ANSWER_KEY") {
        Ok(key) => builder.answer_key(AnswerKey::new(key)?),
        Err(_) => builder,
    };
    let agent = builder
        .model(model)
        .tool(tool(&dir, "charge", false))
        .tool(tool(&dir, "flaky", true))
        .tool(tool(&dir, "transfer", false).requires_approval(true))
        .approver(AwakeableApprover::new(|awakeable, pending| {
            let question = serde_json::to_string(pending).unwrap_or_default();
            say(&format!("AWAKEABLE {awakeable} {question}"));
        }))
        .on_llm_error(|_: &(dyn std::error::Error + Send + Sync + 'static), _| {
            LlmErrorDecision::retry(3, Duration::from_millis(100))
        });
    // An agent that also has a checkpoint store, kept in a file across the service's restarts.
    let agent = match scenario.as_str() {
        "charge-stored" => agent.checkpoints(SqliteCheckpoints::open(dir.join("checkpoints.db"))?),
        _ => agent,
    }
    .build()?;
    // The library's options (a waiting run is suspended within seconds); Restate tries a dead
    // service again soon: the tests restart it within a second.
    let options = agent_errors::restate::service_options()
        .retry_policy_initial_interval(Duration::from_millis(100))
        .retry_policy_max_interval(Duration::from_millis(500));
    let endpoint = Endpoint::builder()
        .bind(
            Assistant { agent }
                .into_service_definition()
                .options(options),
        )
        .build();
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port.parse::<u16>()?)).await?;
    say("LISTENING");
    HttpServer::new(endpoint).serve(listener).await;
    Ok(())
}
