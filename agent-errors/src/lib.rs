#![doc = include_str!("../../README.md")]
#![warn(missing_docs)]

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
mod events;
mod executor;
mod explain;
mod extensions;
mod fix;
mod idempotency;
pub mod llm;
#[cfg(feature = "mcp")]
pub mod mcp;
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
    IntoLlmDecision, Json, ModelError, NotJsonArguments, ResumeError, RunDelta, RunError,
    RunOptions, RunOutcome, THROW_EXCEPTION,
};
pub use breaker::{Admission, Admit, BreakerState, BreakerStore, MemoryStore, ServiceBreaker};
pub use budget::{BudgetError, RetryBudget};
pub use chat::{
    BoxFuture, CallSource, ChatModel, ChatRequest, ChatResponse, FinishReason, Message,
    RequestOptions, ResponseFormat, ToolCall, ToolChoice, ToolResult, ToolSpec, Truncated, Usage,
};
pub use classify::{Classification, ErrorKind, HttpError, classify};
pub use error::{BoxError, InvalidArguments, Severity, ToolError};
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

/// The names most programs need: `use agent_errors::prelude::*;`.
pub mod prelude {
    #[doc(no_inline)]
    pub use crate::{
        Agent, BoxError, ChatModel, Ctx, Fix, FixRequest, FixerError, HttpError, LlmErrorDecision,
        RunError, Severity, ToolDef, defaults, fixer, fixers, policy, tool, tools, toolset,
    };
}
