#![doc = include_str!("../../README.md")]
#![warn(missing_docs)]

mod agent;
mod breaker;
mod chat;
pub mod classify;
mod error;
mod events;
mod executor;
mod fix;
pub mod llm;
pub mod observe;
#[cfg(feature = "openai")]
pub mod openai;
mod policy;
mod registry;
pub mod retry;
pub mod sanitize;
#[cfg(feature = "testing")]
pub mod testing;
mod tool;

#[doc(hidden)]
pub mod __private;

pub use agent_errors_macros::{defaults, fixer, fixers, policy, tool, tools};

pub use agent::{
    Agent, AgentBuilder, AgentOutput, ESCALATE, IntoLlmDecision, Json, ModelError,
    NotJsonArguments, RunError, RunOptions, RunOutcome, THROW_EXCEPTION,
};
pub use breaker::{BreakerState, ServiceBreaker};
pub use chat::{
    BoxFuture, CallSource, ChatModel, ChatRequest, ChatResponse, Message, ToolCall, ToolResult,
    ToolSpec,
};
pub use classify::{Classification, ErrorKind, HttpError, classify};
pub use error::{BoxError, Severity, ToolError};
pub use events::{Event, EventLog, EventSink, RunReport};
pub use executor::{
    CallOutcome, Cancellation, CircuitOpen, Limits, Permission, PermissionHook, RunContext,
    Terminated, TerminationReason, ToolPanic,
};
pub use fix::{Fix, FixRequest, Fixer, FixerDef, FixerError};
pub use llm::LlmErrorDecision;
pub use observe::{EventStream, RunEvent, RunId};
pub use policy::{
    Action, Explanation, FixAction, Ladder, Policy, PolicyKey, PolicyLayer, RetryAction,
};
pub use registry::{ConfigError, ConfigProblem, Registry, RegistryBuilder};
pub use retry::{RetrySchedule, ZeroAttempts};
pub use tool::{ToolDef, ToolFuture, ToolHandler};

/// The names most programs need: `use agent_errors::prelude::*;`.
pub mod prelude {
    #[doc(no_inline)]
    pub use crate::{
        Agent, BoxError, ChatModel, Fix, FixRequest, FixerError, HttpError, LlmErrorDecision,
        RunError, Severity, ToolDef, defaults, fixer, fixers, policy, tool, tools,
    };
}
