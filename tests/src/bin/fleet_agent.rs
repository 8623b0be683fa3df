//! One process of a fleet, for the multi-process tests: an agent's executor with a breaker and
//! a retry budget shared on Redis, calling a loopback upstream. Driven line by line on stdin:
//!
//! - `call <id>`: one tool call; answers `ok`, `failed <attempts>`, `rejected` or `error`;
//! - `quit`: exits.
//!
//! Settings come from the environment (`FLEET_*`, see [`Settings`]). Prints `ready` once its
//! store shares state through Redis.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use agent_errors::{
    HttpError, Registry, RunContext, ToolCall, ToolDef,
    breaker::ServiceBreaker,
    call::CallOutcome,
    policy::{Action, Policy, PolicyKey, RetryAction},
    redis::{RedisStore, StoreHealth},
    retry::RetryBudget,
    run::TerminationReason,
};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// The process's settings, from `FLEET_*` variables.
struct Settings {
    redis: String,
    upstream: String,
    name: String,
    prefix: String,
    threshold: u32,
    cooldown: Duration,
    cache_ttl: Duration,
    attempts: u32,
}

fn var(name: &str) -> Result<String, String> {
    std::env::var(name).map_err(|_| format!("{name} is not set"))
}

fn millis(name: &str) -> Result<Duration, String> {
    let ms = var(name)?.parse().map_err(|e| format!("{name}: {e}"))?;
    Ok(Duration::from_millis(ms))
}

impl Settings {
    fn from_env() -> Result<Self, String> {
        let number = |name: &str| -> Result<u32, String> {
            var(name)?.parse().map_err(|e| format!("{name}: {e}"))
        };
        Ok(Settings {
            redis: var("FLEET_REDIS_URL")?,
            upstream: var("FLEET_UPSTREAM")?,
            name: var("FLEET_NAME")?,
            prefix: var("FLEET_PREFIX")?,
            threshold: number("FLEET_THRESHOLD")?,
            cooldown: millis("FLEET_COOLDOWN_MS")?,
            cache_ttl: millis("FLEET_CACHE_TTL_MS")?,
            attempts: number("FLEET_ATTEMPTS")?,
        })
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct FetchArgs {
    call: u64,
}

/// `GET /<name>/<call>` on the upstream: a 2xx is success, anything else an `HttpError`.
async fn fetch(upstream: Arc<str>, name: Arc<str>, call: u64) -> Result<String, HttpError> {
    let exchange = async {
        let mut stream = TcpStream::connect(&*upstream).await?;
        let request =
            format!("GET /{name}/{call} HTTP/1.1\r\nHost: upstream\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await?;
        Ok::<_, std::io::Error>(response)
    };
    let response = exchange
        .await
        .map_err(|e| HttpError::new(503, format!("upstream unreachable: {e}")))?;
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .unwrap_or(502);
    if (200..300).contains(&status) {
        Ok("fetched".to_owned())
    } else {
        Err(HttpError::new(status, "upstream failed"))
    }
}

fn registry(s: &Settings) -> Result<Registry, String> {
    let (upstream, name): (Arc<str>, Arc<str>) =
        (s.upstream.as_str().into(), s.name.as_str().into());
    let retry = RetryAction {
        max_attempts: NonZeroU32::new(s.attempts).ok_or("FLEET_ATTEMPTS must be at least 1")?,
        initial: Some(Duration::from_millis(2)),
        max: Some(Duration::from_millis(5)),
        when_safe: false,
    };
    let tool = ToolDef::new(
        "fetch",
        "Fetches from the upstream.",
        move |a: FetchArgs| fetch(upstream.clone(), name.clone(), a.call),
    )
    .with_breaker_key("upstream")
    .with_policy(Policy::new().on(PolicyKey::Execution, [Action::Retry(retry)]));
    Registry::builder()
        .tool(tool)
        .build()
        .map_err(|e| e.to_string())
}

fn answer(outcome: &CallOutcome) -> String {
    if let Some(result) = outcome.result() {
        return if result.is_error { "error" } else { "ok" }.to_owned();
    }
    match outcome.stop().map(|t| &t.reason) {
        Some(TerminationReason::CircuitOpen) => "rejected".to_owned(),
        Some(TerminationReason::RetriesExhausted { attempts }) => format!("failed {attempts}"),
        other => format!("stopped {other:?}"),
    }
}

async fn serve(s: Settings) -> Result<(), String> {
    let threshold = NonZeroU32::new(s.threshold).ok_or("FLEET_THRESHOLD must be at least 1")?;
    let store = RedisStore::builder(s.redis.as_str())
        .prefix(s.prefix.as_str())
        .threshold(threshold)
        .cooldown(s.cooldown)
        .cache_ttl(s.cache_ttl)
        .probe_lease(Duration::from_secs(30))
        .command_timeout(Duration::from_millis(500))
        .connect()
        .await
        .map_err(|e| e.to_string())?;
    if store.health() != StoreHealth::Shared {
        return Err("Redis did not answer".to_owned());
    }
    let breaker = Arc::new(ServiceBreaker::with_store(store.clone()));
    let budget = RetryBudget::new(0.2, Duration::from_secs(60)).map_err(|e| e.to_string())?;
    let budget = Arc::new(budget.shared_on(&store));
    let registry = registry(&s)?;
    println!("ready");
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await.map_err(|e| e.to_string())? {
        let mut words = line.split_whitespace();
        match (
            words.next(),
            words.next().and_then(|w| w.parse::<u64>().ok()),
        ) {
            (Some("call"), Some(id)) => {
                let ctx = RunContext::new()
                    .with_service_breaker(Arc::clone(&breaker))
                    .with_retry_budget(Arc::clone(&budget));
                let call = ToolCall::new(format!("c{id}"), "fetch", format!(r#"{{"call":{id}}}"#));
                println!("{}", answer(&registry.execute(&ctx, &call).await));
            }
            (Some("quit"), _) => break,
            _ => println!("unknown command: {line}"),
        }
    }
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    let served = match Settings::from_env() {
        Ok(settings) => serve(settings).await,
        Err(e) => Err(e),
    };
    match served {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fleet_agent: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
