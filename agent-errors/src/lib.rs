//! A recovery layer for the tool calls of LLM agents.
//!
//! You say per tool, per kind of failure, what should happen (`retry(3)`, repair the arguments
//! with a fixer, fall back to another tool, drop the tool, show the model, end the run), and the
//! agent loop does it: every failure is classified by what it *is* (error types, HTTP status
//! codes) before what it *says*, only what can succeed on retry is retried, arguments are
//! repaired by fixers that are plain functions, the model sees only errors it can act on (short,
//! sanitized, secrets redacted), runs that cannot continue end before the model burns another
//! turn, and `on_llm_error` decides what happens when the model call itself fails.
//!
//! ```
//! use std::time::Duration;
//!
//! use agent_errors::prelude::*;
//! use agent_errors::testing::ScriptedModel;
//!
//! /// Count the top-level keys of a JSON object.
//! #[tool(on_error(invalid_args = fix(agent = "json_fixer"), execution = [retry(2), escalate]))]
//! async fn count_keys(json: String) -> Result<usize, serde_json::Error> {
//!     let object: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&json)?;
//!     Ok(object.len())
//! }
//!
//! /// Repairs trailing commas in the model's arguments.
//! #[fixer]
//! fn json_fixer(req: FixRequest) -> Result<Fix, FixerError> {
//!     Ok(Fix::args(req.raw_args.replace(",}", "}")))
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Offline stand-in for a model: a call with broken arguments, then an answer.
//! let model = ScriptedModel::new()
//!     .tool_call("count_keys", r#"{"json": "{\"name\": \"world\", \"age\": 30}",}"#)
//!     .text("2");
//! let agent = Agent::builder("json-analyst")
//!     .model(model)
//!     .tools(tools![count_keys])
//!     .fixers(fixers![json_fixer])
//!     .build()?;
//! assert_eq!(agent.run("How many keys? {name: world, age: 30,}").await?, "2");
//! # Ok(())
//! # }
//! ```
//!
//! Where to start: [`tool`](macro@tool) and [`policy!`] for policies, [`Agent`] for the loop,
//! [`Registry::execute`] to run calls inside an agent loop of your own, [`classify`] for how a
//! failure is read, [`checkpoint`] for durable runs, [`llm`] for model-call recovery. The
//! repository's README walks through every part; its `ARCHITECTURE.md` shows how the modules
//! stack.
#![warn(missing_docs)]
// docs.rs builds with `--cfg docsrs` on nightly: every feature-gated item gets a badge naming
// the feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod agent;
#[cfg(feature = "anthropic")]
pub mod anthropic;
mod arguments;
mod breaker;
mod budget;
mod chat;
pub mod checkpoint;
pub mod classify;
mod error;
mod escapes;
mod events;
mod executor;
mod explain;
mod extensions;
mod fix;
mod idempotency;
pub mod llm;
#[cfg(feature = "mcp")]
pub mod mcp;
mod model;
pub mod observe;
#[cfg(feature = "openai")]
pub mod openai;
mod policy;
#[cfg(any(feature = "openai", feature = "anthropic"))]
mod provider;
pub mod redact;
#[cfg(feature = "redis")]
mod redis;
mod registry;
pub mod retry;
pub mod sanitize;
pub mod stream;
#[cfg(feature = "testing")]
pub mod testing;
mod tool;
mod usage;

#[doc(hidden)]
pub mod __private;

#[cfg(fuzzing)]
#[doc(hidden)]
pub mod fuzz;

pub use agent_errors_macros::{
    crate_defaults, defaults, fixer, fixers, policy, tool, tools, toolset,
};

pub use agent::{
    Agent, AgentBuilder, AgentOutput, BrokenTranscript, Conversation, ESCALATE, FinishedRun,
    HistoryError, IntoLlmDecision, Json, ModelError, ModelFailure, NotJsonArguments, ResumeError,
    RunDelta, RunError, RunOptions, RunOutcome, THROW_EXCEPTION,
};
pub use breaker::{Admission, Admit, BreakerState, BreakerStore, MemoryStore, ServiceBreaker};
pub use budget::{BudgetError, RetryBudget};
pub use chat::{
    CallSource, ChatRequest, ChatResponse, FinishReason, Message, RequestOptions, ResponseFormat,
    ToolCall, ToolChoice, ToolResult, ToolSpec, Truncated,
};
pub use classify::{Classification, ErrorKind, HttpError, classify};
pub use error::{BoxError, BoxFuture, InvalidArguments, Severity, ToolError};
pub use events::{Event, EventLog, EventSink, RunReport};
pub use executor::{
    CallInterrupted, CallOutcome, Cancellation, CircuitOpen, DEFAULT_MAX_PERMISSION_DENIALS,
    Limits, Permission, PermissionContext, PermissionDenied, PermissionHook, RunContext,
    Terminated, TerminationReason, ToolPanic,
};
pub use explain::Explanation;
pub use extensions::{Ctx, Extensions, MissingContext};
pub use fix::{Fix, FixRequest, Fixer, FixerDef, FixerError};
pub use idempotency::IdempotencyKey;
pub use llm::LlmErrorDecision;
pub use model::ChatModel;
pub use observe::{EventStream, RunEvent, RunId};
pub use policy::{
    Action, FixAction, Ladder, Policy, PolicyKey, PolicyLayer, RetryAction, Shadowed,
};
#[cfg(feature = "redis")]
pub use redis::{RedisStore, RedisStoreBuilder, RedisStoreError, StoreHealth};
pub use registry::{ConfigError, ConfigProblem, Registry, RegistryBuilder};
pub use retry::{RetrySchedule, ZeroAttempts};
pub use stream::{ChatStream, StreamEvent};
pub use tool::{ToolDef, ToolFuture, ToolHandler};
pub use usage::Usage;

/// The names most programs need: `use agent_errors::prelude::*;`.
pub mod prelude {
    #[doc(no_inline)]
    pub use crate::{
        Agent, BoxError, ChatModel, Ctx, Fix, FixRequest, FixerError, HttpError, LlmErrorDecision,
        RunError, Severity, ToolDef, defaults, fixer, fixers, policy, tool, tools, toolset,
    };
}
