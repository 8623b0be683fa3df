//! Tokens a model call used: counted by providers, summed by the agent loop, shown in events;
//! and the caps a run's usage is held to.

mod exceeded;
mod limits;
mod meter;

pub use exceeded::{OnExceed, RunUsage, UsageLimit, UsageLimitExceeded};
pub use limits::{DEFAULT_MAX_TOOL_CALLS_PER_TURN, MissingUsage, ModelPrice, UsageLimits};
pub(crate) use meter::{Answerer, RunMeter};

use serde::{Deserialize, Serialize};

/// Tokens a model call used.
///
/// # Examples
///
/// ```
/// use agent_errors::ChatResponse;
/// use agent_errors::llm::Usage;
///
/// let mut spent = Usage::default();
/// for response in [ChatResponse::text("a").with_usage(Usage::new(1200, 40))] {
///     spent += response.usage.unwrap_or_default();
/// }
/// assert_eq!(spent.total(), 1240);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens read: the prompt, the conversation and the tool definitions.
    pub input_tokens: u64,
    /// Tokens written: the answer.
    pub output_tokens: u64,
}

impl Usage {
    /// Usage of this many input and output tokens.
    pub fn new(input_tokens: u64, output_tokens: u64) -> Self {
        Usage {
            input_tokens,
            output_tokens,
        }
    }

    /// Input and output together.
    pub fn total(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, other: Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
    }
}
