//! What going past a cap looks like: which cap ([`UsageLimit`]), what the run does then
//! ([`OnExceed`]), what it had used ([`RunUsage`]) and the error it ends with
//! ([`UsageLimitExceeded`]).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::Usage;

/// One of the caps of [`UsageLimits`](super::UsageLimits).
///
/// # Examples
///
/// ```
/// use agent_errors::{Agent, RunError};
/// use agent_errors::run::{UsageLimit, UsageLimits};
/// use agent_errors::testing::{ScriptedModel, echo_tool};
///
/// fn explain(error: &RunError) -> String {
///     let Some(exceeded) = error.usage_limit() else {
///         return error.to_string();
///     };
///     match &exceeded.limit {
///         UsageLimit::Requests => "too many model requests".to_owned(),
///         UsageLimit::InputTokens | UsageLimit::OutputTokens | UsageLimit::TotalTokens => {
///             format!("too many tokens: {}", exceeded.usage.tokens.total())
///         }
///         UsageLimit::ToolCalls | UsageLimit::ToolCallsPerTurn => "too many tool calls".to_owned(),
///         UsageLimit::ToolCallsOf { tool } => format!("too many calls of {tool}"),
///         UsageLimit::Cost => format!("spent {:.2}", exceeded.usage.cost),
///         _ => error.to_string(),
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let model = ScriptedModel::new().tool_calls([("search", "{}"), ("search", "{}")]);
/// let agent = Agent::builder("capped")
///     .model(model)
///     .tool(echo_tool("search"))
///     .usage_limits(UsageLimits::new().max_calls_of("search", 1))
///     .build()?;
/// let error = agent.run("find it").await.unwrap_err();
/// assert_eq!(explain(&error), "too many calls of search");
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[non_exhaustive]
pub enum UsageLimit {
    /// Model requests in a run.
    Requests,
    /// Input tokens in a run.
    InputTokens,
    /// Output tokens in a run.
    OutputTokens,
    /// Input and output tokens in a run.
    TotalTokens,
    /// Tool calls in a run.
    ToolCalls,
    /// Tool calls in one model turn.
    ToolCallsPerTurn,
    /// Calls of one tool in a run.
    ToolCallsOf {
        /// The tool.
        tool: String,
    },
    /// What the run's tokens cost.
    Cost,
}

impl UsageLimit {
    /// What the model is told when a run capped here asks it for its final answer, in either
    /// loop (ours, or rig's under a guard).
    pub(crate) fn final_answer_prompt(&self) -> String {
        format!(
            "This run has reached its limit on {self}. Do not call any tools. Answer now with the \
             best answer you can give from what you have so far."
        )
    }
}

impl fmt::Display for UsageLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UsageLimit::Requests => f.write_str("model requests"),
            UsageLimit::InputTokens => f.write_str("input tokens"),
            UsageLimit::OutputTokens => f.write_str("output tokens"),
            UsageLimit::TotalTokens => f.write_str("total tokens"),
            UsageLimit::ToolCalls => f.write_str("tool calls"),
            UsageLimit::ToolCallsPerTurn => f.write_str("tool calls per turn"),
            UsageLimit::ToolCallsOf { tool } => write!(f, "calls of `{tool}`"),
            UsageLimit::Cost => f.write_str("cost"),
        }
    }
}

/// What a run does when it goes past one of its [`UsageLimits`](super::UsageLimits).
///
/// # Examples
///
/// ```
/// use agent_errors::run::OnExceed;
///
/// fn describe(then: OnExceed) -> &'static str {
///     match then {
///         OnExceed::Error => "the run ends with RunError::UsageLimit",
///         OnExceed::FinalAnswer => "the model is asked once more, without tools",
///         _ => "something newer",
///     }
/// }
/// assert_eq!(describe(OnExceed::default()), "the run ends with RunError::UsageLimit");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OnExceed {
    /// End the run with [`RunError::UsageLimit`](crate::RunError::UsageLimit).
    #[default]
    Error,
    /// Ask the model once more, without tools, for the best answer it has so far, and end the
    /// run with that answer. The request is counted and is made once: if it fails, or the
    /// model answers with tool calls anyway, the run ends with the error.
    FinalAnswer,
}

/// What a run used, as its meter counted it (see [`UsageLimits`](super::UsageLimits) for what counts): model
/// requests, tokens, tool calls and their cost. A run that goes past a cap carries it in
/// [`UsageLimitExceeded::usage`]. A run's report ([`RunReport`](crate::RunReport)) keeps the
/// loop's own counts: its own requests, the usage its responses reported and the tool calls the
/// model made. A run with no cap across the run has no meter: a per-turn cap's error carries
/// those instead.
///
/// # Examples
///
/// ```
/// use agent_errors::{Agent, RunOptions};
/// use agent_errors::run::UsageLimits;
/// use agent_errors::testing::{ScriptedModel, echo_tool};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let model = ScriptedModel::new().tool_call("lookup", r#"{"text": "x"}"#).text("never asked");
/// let agent = Agent::builder("capped").model(model).tool(echo_tool("lookup")).build()?;
/// let options = RunOptions::new().usage_limits(UsageLimits::new().max_requests(1));
/// let error = agent.run_with("go", options).await.result.unwrap_err();
/// let used = &error.usage_limit().expect("the request cap ended it").usage;
/// assert_eq!((used.requests, used.tool_calls), (1, 1));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RunUsage {
    /// Model requests sent, on every path of the run.
    pub requests: u32,
    /// Tokens of the responses: as reported, or counted as [`MissingUsage`](super::MissingUsage) says.
    pub tokens: Usage,
    /// Runs of tool bodies: first tries, retries, repaired runs and fallbacks.
    pub tool_calls: u32,
    /// Calls of each tool that has a cap of its own.
    pub calls_of: BTreeMap<String, u32>,
    /// What the tokens cost, when the limits gave prices (0 otherwise).
    pub cost: f64,
}

/// A run went past one of its [`UsageLimits`](super::UsageLimits): which, and what the run had used. Reached
/// through [`RunError::usage_limit`](crate::RunError::usage_limit).
///
/// # Examples
///
/// ```
/// use agent_errors::Agent;
/// use agent_errors::run::{UsageLimit, UsageLimits};
/// use agent_errors::testing::ScriptedModel;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let model = ScriptedModel::new().tool_calls([("a", "{}"), ("b", "{}"), ("c", "{}")]);
/// let agent = Agent::builder("capped")
///     .model(model)
///     .usage_limits(UsageLimits::new().max_tool_calls_per_turn(2))
///     .build()?;
/// let error = agent.run("go").await.unwrap_err();
/// let exceeded = error.usage_limit().expect("the per-turn cap ended it");
/// assert_eq!(exceeded.limit, UsageLimit::ToolCallsPerTurn);
/// assert_eq!(exceeded.to_string(), "the run went past its limit on tool calls per turn: at most 2");
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, thiserror::Error)]
#[error("the run went past its limit on {limit}: at most {allowed}")]
#[non_exhaustive]
pub struct UsageLimitExceeded {
    /// The cap.
    pub limit: UsageLimit,
    /// What the run had used when it stopped.
    pub usage: RunUsage,
    /// The cap, in words.
    allowed: String,
}

impl UsageLimitExceeded {
    pub(crate) fn new(limit: UsageLimit, allowed: String, usage: RunUsage) -> Self {
        UsageLimitExceeded {
            limit,
            usage,
            allowed,
        }
    }
}
