#![doc = include_str!("../../README.md")]
#![warn(missing_docs)]

pub mod agent;
pub mod breaker;
pub mod classify;
pub mod error;
pub mod events;
pub mod fix;
pub mod llm;
#[cfg(feature = "openai")]
pub mod openai;
pub mod pipeline;
pub mod policy;
pub mod redact;
pub mod registry;
pub mod retry;
pub mod sanitize;
pub mod testing;
pub mod tool;

#[doc(hidden)]
pub mod __private;

pub use agent_errors_macros::{defaults, fixer, fixers, policy, tool, tools};

pub use agent::{Agent, AgentBuilder, AgentOutput, Json, RunError, RunOptions, RunOutcome};
pub use classify::{Classification, Classifier, ErrorKind, HttpError, classify};
pub use error::{BoxError, Severity, ToolError};
pub use events::{Event, RunReport};
pub use fix::{Fix, FixRequest, FixerDef, FixerError};
pub use llm::{
    ChatModel, ChatRequest, ChatResponse, LlmErrorDecision, Message, ToolCall, ToolResult,
};
pub use pipeline::{CallOutcome, Cancellation, Permission, RunContext, Terminated};
pub use policy::{Action, Explanation, Ladder, Layer, Policy, PolicyKey};
pub use registry::{ConfigError, Registry};
pub use retry::RetrySchedule;
pub use tool::ToolDef;

/// The names most programs need: `use agent_errors::prelude::*;`.
pub mod prelude {
    pub use crate::breaker::ServiceBreaker;
    pub use crate::pipeline::{Limits, Permission};
    pub use crate::{
        Action, BoxError, CallOutcome, ChatModel, ErrorKind, Fix, FixRequest, FixerError,
        HttpError, LlmErrorDecision, Policy, PolicyKey, Registry, RunContext, Severity, ToolCall,
        ToolError, defaults, fixer, fixers, policy, tool, tools,
    };
    pub use crate::{Agent, Cancellation, FixerDef, Json, RunError, RunOptions, ToolDef};
}
