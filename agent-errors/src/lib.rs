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
//! [`guide`] walks through every part, a chapter per task; the repository's `ARCHITECTURE.md`
//! shows how the modules stack.
#![warn(missing_docs)]
#![deny(unreachable_pub)]
// docs.rs builds with `--cfg docsrs` on nightly: every feature-gated item gets a badge naming
// the feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod agent;
#[cfg(feature = "anthropic")]
#[cfg_attr(docsrs, doc(cfg(feature = "anthropic")))]
pub mod anthropic;
pub mod approval;
mod arguments;
pub mod breaker;
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
pub mod guide;
mod idempotency;
pub mod llm;
#[cfg(feature = "mcp")]
#[cfg_attr(docsrs, doc(cfg(feature = "mcp")))]
pub mod mcp;
mod model;
pub mod observe;
#[cfg(feature = "openai")]
#[cfg_attr(docsrs, doc(cfg(feature = "openai")))]
pub mod openai;
mod output_check;
pub mod policy;
#[cfg(feature = "_provider")]
#[cfg_attr(docsrs, doc(cfg(any(feature = "openai", feature = "anthropic"))))]
pub mod provider;
mod reconcile;
pub mod redact;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis;
mod registry;
#[cfg(feature = "restate")]
#[cfg_attr(docsrs, doc(cfg(feature = "restate")))]
pub mod restate;
pub mod retry;
#[cfg(feature = "rig")]
#[cfg_attr(docsrs, doc(cfg(feature = "rig")))]
pub mod rig;
pub mod sanitize;
pub mod stream;
mod structured;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;
mod tool;
mod usage;

#[doc(hidden)]
pub mod __private;

#[cfg(fuzzing)]
#[doc(hidden)]
pub mod fuzz;

/// The `schemars` this crate builds tool schemas with (1.x), for a hand-written tool's
/// arguments without a `schemars` dependency of your own (and so without a mismatched major
/// version). Its derive then needs to be told where it is:
///
/// ```
/// use agent_errors::ToolDef;
///
/// #[derive(serde::Deserialize, agent_errors::schemars::JsonSchema)]
/// #[schemars(crate = "agent_errors::schemars")]
/// struct Lookup {
///     city: String,
/// }
///
/// let tool = ToolDef::new("lookup", "Looks a city up.", |args: Lookup| async move {
///     Ok::<_, std::io::Error>(args.city)
/// });
/// assert!(tool.spec().parameters.to_string().contains("city"));
/// ```
pub use schemars;

pub use agent_errors_macros::{
    crate_defaults, defaults, fixer, fixers, policy, tool, tools, toolset,
};

// The few types nearly every program names. Everything else lives in the module of its concern,
// and every public item has exactly one path (the prelude's `no_inline` re-exports aside).
pub use agent::{Agent, AgentBuilder, Conversation, RunError, RunOptions, RunOutcome};
pub use chat::{ChatRequest, ChatResponse, Message, ToolCall, ToolResult};
pub use classify::http::HttpError;
pub use classify::kind::ErrorKind;
pub use error::{BoxError, Severity, ToolError};
pub use events::{Event, RunReport};
pub use executor::{Cancellation, Limits, RunContext};
pub use extensions::Ctx;
pub use fix::{Fix, FixRequest, FixerError};
pub use llm::decision::LlmErrorDecision;
pub use model::ChatModel;
pub use registry::Registry;
pub use tool::ToolDef;

/// Running an agent: what a run returns, streams and saves, and how it ends early.
pub mod run {
    pub use crate::agent::{
        AgentOutput, BrokenTranscript, ESCALATE, FinishedRun, HistoryError, IntoLlmDecision, Json,
        ModelError, ModelFailure, NotJsonArguments, OutputPolicy, OutputValidator, ResumeError,
        RunDelta, THROW_EXCEPTION,
    };
    pub use crate::executor::{Terminated, TerminationReason};
    pub use crate::structured::{AnswerProblem, InvalidAnswer};
    pub use crate::usage::{
        DEFAULT_MAX_TOOL_CALLS_PER_TURN, MissingUsage, ModelPrice, OnExceed, RunUsage, UsageLimit,
        UsageLimitExceeded, UsageLimits,
    };
}

/// One tool call: how a tool is called, what it can reach, and how the call ends.
pub mod call {
    pub use crate::error::{BoxFuture, InvalidArguments, ToolArgs, UnknownSeverity};
    pub use crate::executor::{
        CallInterrupted, CallOutcome, CircuitOpen, Cleared, MayHaveTakenEffect, ToolPanic,
    };
    pub use crate::extensions::{Extensions, MissingContext};
    pub use crate::idempotency::{EffectKeyError, IdempotencyKey};
    pub use crate::output_check::{OutputCheck, OutputRejected};
    pub use crate::reconcile::{ReconcileRequest, Reconciled};
    pub use crate::tool::{ToolFuture, ToolHandler};
}

/// Building a registry or an agent: the registry's builder, the fixers it holds, what a build
/// refuses, and which policy layer decides each key.
pub mod build {
    pub use crate::explain::{ConfigWarning, Explanation};
    pub use crate::fix::{Fixer, FixerDef};
    pub use crate::reconcile::{Reconciler, ReconcilerDef};
    pub use crate::registry::{ConfigError, ConfigProblem, RegistryBuilder};
}

/// Asking before a tool runs: a hook that allows, denies or rewrites each call.
pub mod permission {
    pub use crate::executor::{
        DEFAULT_MAX_PERMISSION_DENIALS, Permission, PermissionContext, PermissionDenied,
        PermissionHook,
    };
}

/// The names most programs need: `use agent_errors::prelude::*;`.
pub mod prelude {
    #[doc(no_inline)]
    pub use crate::{
        Agent, BoxError, ChatModel, Ctx, Fix, FixRequest, FixerError, HttpError, LlmErrorDecision,
        RunError, Severity, ToolDef,
    };
    // The macros by their own crate's path: `crate::policy` would bring the `policy` module too.
    #[doc(no_inline)]
    pub use agent_errors_macros::{defaults, fixer, fixers, policy, tool, tools, toolset};
}
