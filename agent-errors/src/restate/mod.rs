//! Agent runs as Restate handlers: every model request and every tool attempt is a step of the
//! invocation's journal, and every wait (a retry's backoff, a `Retry-After`) is a durable
//! `ctx.sleep`. A run whose service dies anywhere is replayed by Restate on any process serving
//! the agent: finished steps hand back their journaled outcomes and never run again, and the
//! run's decisions (retries spent, breaker trips, repairs, usage) come out the same because
//! they are made from those outcomes.
//!
//! What runs inside what, and what a bad case costs:
//! - Restate retries the invocation (a crashed or disconnected service) from its journal; it
//!   never retries a step: a step's outcome, failure included, is journaled as a value, and the
//!   tool's policy ladder decides what happens next, exactly as in a run without Restate.
//! - Inside a step run only the model request (with the provider's own transport retries, if
//!   the provider has any) or one tool attempt (under its timeout and service breaker).
//! - So a tool call costs at most its policy's attempts (`retry(n)`: n, the first included), bounded by the run's
//!   retry allowance, however often the service crashes; only an attempt that was running when
//!   the service died (its outcome never journaled) is made again, with the same
//!   [`IdempotencyKey`](crate::call::IdempotencyKey). A model request likewise costs its
//!   `on_llm_error` attempts, each times the provider's transport attempts.
//! - A run that ends with an error ends the invocation with a terminal error
//!   ([`terminal_error`]): Restate does not start it again.
//!
//! What holds a waiting run: nothing, once Restate suspends the invocation. Restate suspends an
//! invocation that has sent nothing for the service's *inactivity timeout*, which is one minute
//! by default: until then a run waiting out a `Retry-After` or waiting for a person stays
//! `running`, held in the serving process's memory. Bind the service with [`service_options`]
//! (an inactivity timeout of [`INACTIVITY_TIMEOUT`], 5 s) so that such a run is suspended
//! within seconds; a step that runs longer than that (a slow tool or model request) is still
//! finished and journaled first, within the server's abort timeout (10 minutes by default),
//! after which Restate resumes the invocation from its journal.
//!
//! The run's id is the invocation's id, so each call's idempotency key (`<invocation id>:<call
//! id>`) is the same on every replay. Two requests with the same `idempotency-key` header are
//! one invocation, so one run: Restate answers the second with the first's result.

mod approver;
mod journal;

use std::sync::Arc;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use restate_sdk::prelude::{Context, TerminalError};
use tokio::sync::mpsc;

use crate::agent::Seam;
use crate::agent::{Agent, AgentOutput, RunError, RunOptions};

pub use approver::AwakeableApprover;
use journal::{ChannelJournal, serve};

/// Runs `agent` on `input` as this Restate invocation, every model request and tool attempt a
/// journaled step and every wait a durable sleep; `options` as for
/// [`Agent::run_with`](crate::Agent::run_with) (its run id is replaced by the invocation's).
///
/// Call it from a handler of a Restate service and end the invocation with what it returns,
/// an error as [`terminal_error`] (so Restate does not run it again: the policies already
/// decided).
///
/// Restate's journal is the run's one journal: an agent built with a checkpoint store
/// ([`AgentBuilder::checkpoints`](crate::AgentBuilder::checkpoints)) saves no checkpoints for a
/// run on Restate (Restate replays it from its own journal; a store would refuse the replayed
/// run's id as taken), and keeps saving them for the runs it makes elsewhere.
///
/// # Examples
///
/// ```
/// use agent_errors::prelude::*;
/// use agent_errors::testing::ScriptedModel;
/// use agent_errors::{Agent, RunOptions};
/// use restate_sdk::prelude::*;
///
/// /// Adds two numbers.
/// #[tool]
/// async fn add(a: i64, b: i64) -> i64 {
///     a + b
/// }
///
/// struct Assistant {
///     agent: Agent,
/// }
///
/// #[restate_sdk::service]
/// impl Assistant {
///     #[handler]
///     async fn ask(&self, ctx: Context<'_>, question: String) -> HandlerResult<String> {
///         agent_errors::restate::run(&ctx, &self.agent, question, RunOptions::new())
///             .await
///             .map_err(|error| agent_errors::restate::terminal_error(&error).into())
///     }
/// }
///
/// /// Serves the agent for a Restate server to call (register it with the server's admin API).
/// async fn serve(endpoint: Endpoint) -> Result<(), Box<dyn std::error::Error>> {
///     HttpServer::new(endpoint).listen_and_serve("127.0.0.1:9080".parse()?).await;
///     Ok(())
/// }
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let model = ScriptedModel::new().tool_call("add", r#"{"a": 2, "b": 3}"#).text("5");
/// let agent = Agent::builder("assistant").model(model).tools(tools![add]).build()?;
/// let endpoint = Endpoint::builder().bind(Assistant { agent }).build();
/// # let _ = serve;
/// # drop(endpoint);
/// # Ok(())
/// # }
/// ```
pub async fn run<O: AgentOutput>(
    ctx: &Context<'_>,
    agent: &Agent<O>,
    input: impl Into<String>,
    options: RunOptions,
) -> Result<O, RunError> {
    let (journal, channel, mut steps) = ChannelJournal::new();
    let mut options = options.run_id(ctx.invocation_id()).context(channel);
    options.journal = Some(Seam::of(Arc::new(journal)));
    let mut run = std::pin::pin!(agent.run_with(input, options));
    // The run asks for steps through a channel; they are taken up here, on the handler's
    // context, in the order asked. The run's future goes on while they run (a step runs the
    // run's own work).
    let mut serving = FuturesUnordered::new();
    loop {
        tokio::select! {
            biased;
            outcome = &mut run => return outcome.result,
            Some(step) = steps.recv() => serving.push(serve(ctx, step)),
            Some(()) = serving.next(), if !serving.is_empty() => {}
        }
    }
}

/// `error` as the terminal error a Restate handler ends with: Restate does not retry the
/// invocation (the run's policies already decided), and the message is the error's, redacted.
///
/// # Examples
///
/// ```
/// use agent_errors::RunError;
///
/// let terminal = agent_errors::restate::terminal_error(&RunError::Cancelled);
/// assert!(terminal.message().contains("cancelled"));
/// ```
pub fn terminal_error(error: &RunError) -> TerminalError {
    TerminalError::new(crate::redact::redact(&error.to_string()).into_owned())
}

/// How long an invocation bound with [`service_options`] may send nothing before Restate
/// suspends it: a run waiting out a `Retry-After` or waiting for a person is suspended after
/// this, instead of after the server's default of one minute.
///
/// # Examples
///
/// ```
/// assert_eq!(agent_errors::restate::INACTIVITY_TIMEOUT.as_secs(), 5);
/// ```
pub const INACTIVITY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The options to bind an agent's Restate service with: an inactivity timeout of
/// [`INACTIVITY_TIMEOUT`], so that a run that waits (a `Retry-After`, a person) is suspended
/// within seconds and held by no process. Add your own settings to it; or, with the service
/// macro, say `#[restate_sdk::service(inactivity_timeout = "5s")]`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use agent_errors::Agent;
/// use agent_errors::testing::ScriptedModel;
/// use restate_sdk::prelude::*;
///
/// struct Assistant {
///     agent: Agent,
/// }
///
/// #[restate_sdk::service]
/// impl Assistant {
///     #[handler]
///     async fn ask(&self, ctx: Context<'_>, question: String) -> HandlerResult<String> {
///         agent_errors::restate::run(&ctx, &self.agent, question, agent_errors::RunOptions::new())
///             .await
///             .map_err(|error| agent_errors::restate::terminal_error(&error).into())
///     }
/// }
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let agent = Agent::builder("assistant").model(ScriptedModel::new().text("hi")).build()?;
/// let options = agent_errors::restate::service_options()
///     .retry_policy_max_interval(Duration::from_secs(10));
/// let endpoint = Endpoint::builder()
///     .bind(Assistant { agent }.into_service_definition().options(options))
///     .build();
/// # drop(endpoint);
/// # Ok(())
/// # }
/// ```
pub fn service_options() -> restate_sdk::prelude::ServiceOptions {
    restate_sdk::prelude::ServiceOptions::new().inactivity_timeout(INACTIVITY_TIMEOUT)
}

/// Keeps the channel type in one place for [`run`] and the journal.
type Steps = mpsc::UnboundedReceiver<journal::StepRequest>;
