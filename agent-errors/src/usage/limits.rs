//! Caps on what one run may use (model requests, tokens, tool calls, cost) and what a
//! model's tokens cost, and how a response that reports no usage is counted.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Usage;
use super::exceeded::{OnExceed, UsageLimit};

/// The default of [`UsageLimits::max_tool_calls_per_turn`]: far more calls than a model makes
/// in one turn on purpose, far fewer than a model that has lost its way can ask for.
pub const DEFAULT_MAX_TOOL_CALLS_PER_TURN: u32 = 128;

/// Caps on what one run may use. Every cap is off by default except the tool calls of one
/// model turn ([`DEFAULT_MAX_TOOL_CALLS_PER_TURN`]).
///
/// A run with a cap across the run counts on one meter every path it spends on:
/// - a **request** is every request sent to a model: the agent's own, `on_llm_error`'s retries,
///   each retry a model wrapper or the provider's transport makes inside one call
///   ([`PersistentRetry`](crate::llm::PersistentRetry), a
///   [`FallbackModel`](crate::llm::FallbackModel) calling its primary again), a fallback
///   model's request, and every request of a fixer agent ([`Agent::into_fixer`]) the run
///   calls: its run counts on the meter of the run whose call it repairs, under that run's
///   caps as well as its own;
/// - **tokens and cost** are those of every response, an answer a `FallbackModel` threw away
///   included. A response that reports no usage is counted as
///   [`missing_usage`](UsageLimits::missing_usage) says (by default estimated from its text,
///   see [`MissingUsage`]); the first of a run under a token or cost cap is an `usage_missing`
///   event and a `tracing` warning;
/// - a **tool call** is one run of a tool body: its first try, each retry, its run after a
///   fixer's repair, and a fallback tool's run (counted for the tool that runs) each count
///   one; a call refused before its body runs (an unknown tool, invalid arguments, a denial)
///   counts none.
///
/// The request cap is checked before each request on any of those paths (one that would go
/// past it is not sent); the token and cost caps after each response; the tool-call caps when
/// a turn's calls arrive (a turn that would go past one runs none of its calls) and again
/// before each tool body runs (a retry or fallback past the cap does not run, and the turn's
/// other calls are stopped). A run that goes past a cap, on whichever path, ends with
/// [`RunError::UsageLimit`](crate::RunError::UsageLimit), carrying what it used, and its
/// transcript answers every call it holds (calls of a refused turn with an error result saying
/// they were not run). Choose [`OnExceed::FinalAnswer`] for a cap to have the run ask the model
/// once more, without tools, for its best answer instead.
///
/// A run whose only cap is the per-turn one has no meter, and pays nothing for one.
///
/// [`Agent::into_fixer`]: crate::Agent::into_fixer
///
/// # Examples
///
/// ```
/// use agent_errors::run::{ModelPrice, OnExceed, UsageLimit, UsageLimits};
///
/// let limits = UsageLimits::new()
///     .max_requests(10)
///     .max_total_tokens(50_000)
///     .max_calls_of("search", 3)
///     .price("gpt-4o", ModelPrice::per_million_tokens(2.5, 10.0))
///     .max_cost(0.25)
///     .on_exceed(UsageLimit::Requests, OnExceed::FinalAnswer);
/// assert_eq!(limits.on_exceeding(&UsageLimit::Requests), OnExceed::FinalAnswer);
/// assert_eq!(limits.on_exceeding(&UsageLimit::TotalTokens), OnExceed::Error);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsageLimits {
    requests: Option<u32>,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    total_tokens: Option<u64>,
    tool_calls: Option<u32>,
    tool_calls_per_turn: Option<u32>,
    calls_of: BTreeMap<String, u32>,
    max_cost: Option<f64>,
    prices: BTreeMap<String, ModelPrice>,
    final_answer: Vec<UsageLimit>,
    /// Added after the caps themselves: a saved run without it estimates.
    #[serde(default)]
    missing_usage: MissingUsage,
}

impl Default for UsageLimits {
    fn default() -> Self {
        UsageLimits {
            tool_calls_per_turn: Some(DEFAULT_MAX_TOOL_CALLS_PER_TURN),
            ..UsageLimits::none()
        }
    }
}

impl UsageLimits {
    /// The default caps: only a turn's tool calls are capped.
    pub fn new() -> Self {
        UsageLimits::default()
    }

    /// No cap at all, not even on a turn's tool calls.
    ///
    /// ```
    /// use agent_errors::run::UsageLimits;
    ///
    /// assert_ne!(UsageLimits::none(), UsageLimits::new());
    /// ```
    pub fn none() -> Self {
        UsageLimits {
            requests: None,
            input_tokens: None,
            output_tokens: None,
            total_tokens: None,
            tool_calls: None,
            tool_calls_per_turn: None,
            calls_of: BTreeMap::new(),
            max_cost: None,
            prices: BTreeMap::new(),
            final_answer: Vec::new(),
            missing_usage: MissingUsage::Estimate,
        }
    }

    /// At most `requests` model requests in a run.
    #[must_use]
    pub fn max_requests(mut self, requests: u32) -> Self {
        self.requests = Some(requests);
        self
    }

    /// At most `tokens` input tokens in a run, summed over its responses.
    #[must_use]
    pub fn max_input_tokens(mut self, tokens: u64) -> Self {
        self.input_tokens = Some(tokens);
        self
    }

    /// At most `tokens` output tokens in a run, summed over its responses.
    #[must_use]
    pub fn max_output_tokens(mut self, tokens: u64) -> Self {
        self.output_tokens = Some(tokens);
        self
    }

    /// At most `tokens` input and output tokens together in a run.
    #[must_use]
    pub fn max_total_tokens(mut self, tokens: u64) -> Self {
        self.total_tokens = Some(tokens);
        self
    }

    /// At most `calls` tool calls in a run, every tool together. In this library's loop a tool
    /// call is one run of a tool body (a first try, each retry, a repaired run, a fallback
    /// tool's run); in rig's loop under a `rig::RigGuard` (feature `rig`), whose hook sees only
    /// what rig dispatches, it is one call the model asked for.
    #[must_use]
    pub fn max_tool_calls(mut self, calls: u32) -> Self {
        self.tool_calls = Some(calls);
        self
    }

    /// At most `calls` tool calls in one model turn ([`DEFAULT_MAX_TOOL_CALLS_PER_TURN`] by
    /// default): a turn asking for more runs none of them.
    #[must_use]
    pub fn max_tool_calls_per_turn(mut self, calls: u32) -> Self {
        self.tool_calls_per_turn = Some(calls);
        self
    }

    /// At most `calls` calls of the tool `tool` in a run.
    #[must_use]
    pub fn max_calls_of(mut self, tool: impl Into<String>, calls: u32) -> Self {
        self.calls_of.insert(tool.into(), calls);
        self
    }

    /// At most `cost` spent in a run, in the currency of the prices given with
    /// [`price`](UsageLimits::price). A response from a model without a price costs nothing
    /// (and is logged as a warning), so give a price for every model the agent may call. An
    /// agent's `build` refuses a cap or a price that is NaN, infinite or negative.
    #[must_use]
    pub fn max_cost(mut self, cost: f64) -> Self {
        self.max_cost = Some(cost);
        self
    }

    /// What the model named `model` (as [`ChatModel::name`](crate::ChatModel::name) says)
    /// costs per token. A response is priced as the model it says answered it
    /// ([`ChatResponse::model`](crate::ChatResponse::model): a
    /// [`FallbackModel`](crate::llm::FallbackModel)'s answer names which of its models gave
    /// it) when that one has a price, else as the model the run asked.
    #[must_use]
    pub fn price(mut self, model: impl Into<String>, price: ModelPrice) -> Self {
        self.prices.insert(model.into(), price);
        self
    }

    /// How a response that reports no usage counts against the token and cost caps
    /// ([`MissingUsage::Estimate`] by default).
    #[must_use]
    pub fn missing_usage(mut self, counted: MissingUsage) -> Self {
        self.missing_usage = counted;
        self
    }

    /// What the run does when it goes past `limit` ([`OnExceed::Error`] by default).
    #[must_use]
    pub fn on_exceed(mut self, limit: UsageLimit, then: OnExceed) -> Self {
        self.final_answer.retain(|l| *l != limit);
        if then == OnExceed::FinalAnswer {
            self.final_answer.push(limit);
        }
        self
    }

    /// What the run does when it goes past `limit`.
    pub fn on_exceeding(&self, limit: &UsageLimit) -> OnExceed {
        if self.final_answer.contains(limit) {
            OnExceed::FinalAnswer
        } else {
            OnExceed::Error
        }
    }

    /// Whether any cap holds across the whole run (the per-turn cap holds within a turn): a run
    /// without one needs no meter.
    #[inline]
    pub(crate) fn caps_run(&self) -> bool {
        self.requests.is_some()
            || self.tool_calls.is_some()
            || !self.calls_of.is_empty()
            || self.caps_tokens()
    }

    /// Whether a response's tokens count against a cap (a token cap, or the cost cap).
    #[inline]
    pub(crate) fn caps_tokens(&self) -> bool {
        self.input_tokens.is_some()
            || self.output_tokens.is_some()
            || self.total_tokens.is_some()
            || self.max_cost.is_some()
    }

    /// How a response that reports no usage is counted.
    pub(crate) fn counted_when_missing(&self) -> MissingUsage {
        self.missing_usage
    }

    /// The first cap a request would go past, with `made` requests already made.
    pub(crate) fn request_refused(&self, made: u32) -> Option<(UsageLimit, String)> {
        let max = self.requests?;
        (made >= max).then(|| (UsageLimit::Requests, max.to_string()))
    }

    /// The first token or cost cap `used` (and `cost`) went past.
    pub(crate) fn tokens_exceeded(&self, used: &Usage, cost: f64) -> Option<(UsageLimit, String)> {
        let over = |max: Option<u64>, used: u64| max.filter(|max| used > *max);
        if let Some(max) = over(self.input_tokens, used.input_tokens) {
            return Some((UsageLimit::InputTokens, max.to_string()));
        }
        if let Some(max) = over(self.output_tokens, used.output_tokens) {
            return Some((UsageLimit::OutputTokens, max.to_string()));
        }
        if let Some(max) = over(self.total_tokens, used.total()) {
            return Some((UsageLimit::TotalTokens, max.to_string()));
        }
        let max = self.max_cost.filter(|max| cost > *max)?;
        Some((UsageLimit::Cost, max.to_string()))
    }

    /// The first tool-call cap a turn of `calls` would go past, with `made` calls made before
    /// it and `made_of` calls of each capped tool.
    pub(crate) fn calls_refused<'a>(
        &self,
        calls: impl ExactSizeIterator<Item = &'a str> + Clone,
        made: u32,
        made_of: &BTreeMap<String, u32>,
    ) -> Option<(UsageLimit, String)> {
        if let Some(refused) = self.turn_refused(calls.len()) {
            return Some(refused);
        }
        let asked = u32::try_from(calls.clone().len()).unwrap_or(u32::MAX);
        if let Some(max) = self
            .tool_calls
            .filter(|max| made.saturating_add(asked) > *max)
        {
            return Some((UsageLimit::ToolCalls, max.to_string()));
        }
        for (tool, max) in &self.calls_of {
            let asked = calls.clone().filter(|name| name == tool).count();
            let asked = u32::try_from(asked).unwrap_or(u32::MAX);
            let before = made_of.get(tool).copied().unwrap_or(0);
            if before.saturating_add(asked) > *max {
                let limit = UsageLimit::ToolCallsOf { tool: tool.clone() };
                return Some((limit, max.to_string()));
            }
        }
        None
    }

    /// The per-turn cap, when a turn of `asked` calls would go past it: the one cap a run
    /// without a meter holds.
    #[inline]
    pub(crate) fn turn_refused(&self, asked: usize) -> Option<(UsageLimit, String)> {
        let asked = u32::try_from(asked).unwrap_or(u32::MAX);
        let max = self.tool_calls_per_turn.filter(|max| asked > *max)?;
        Some((UsageLimit::ToolCallsPerTurn, max.to_string()))
    }

    /// The caps a graceful stop was chosen for ([`on_exceed`](Self::on_exceed)) that these
    /// limits do not set: that stop could never happen.
    pub(crate) fn final_answers_for_unset_caps(&self) -> impl Iterator<Item = &UsageLimit> {
        self.final_answer.iter().filter(|limit| !self.sets(limit))
    }

    /// Whether `limit` is capped here.
    fn sets(&self, limit: &UsageLimit) -> bool {
        match limit {
            UsageLimit::Requests => self.requests.is_some(),
            UsageLimit::InputTokens => self.input_tokens.is_some(),
            UsageLimit::OutputTokens => self.output_tokens.is_some(),
            UsageLimit::TotalTokens => self.total_tokens.is_some(),
            UsageLimit::ToolCalls => self.tool_calls.is_some(),
            UsageLimit::ToolCallsPerTurn => self.tool_calls_per_turn.is_some(),
            UsageLimit::ToolCallsOf { tool } => self.calls_of.contains_key(tool),
            UsageLimit::Cost => self.max_cost.is_some(),
        }
    }

    /// The tools whose calls are capped one by one.
    pub(crate) fn capped_tools(&self) -> impl Iterator<Item = &str> {
        self.calls_of.keys().map(String::as_str)
    }

    /// Whether the run's cost is capped and `model` has no price: its tokens would cost nothing.
    pub(crate) fn leaves_unpriced(&self, model: &str) -> bool {
        self.max_cost.is_some() && !self.prices.contains_key(model)
    }

    /// The money figures that are not a finite, non-negative amount, each named as a user
    /// wrote it: a NaN cost cap is never passed, a negative price takes spending back.
    pub(crate) fn bad_money(&self) -> impl Iterator<Item = String> + '_ {
        let cap = self
            .max_cost
            .filter(|max| !is_amount(*max))
            .map(|max| format!("max_cost({max})"));
        let prices = self.prices.iter().filter(|(_, p)| !p.is_amount());
        cap.into_iter()
            .chain(prices.map(|(model, p)| format!("the price of `{model}` ({p:?})")))
    }

    /// Whether calls of `tool` are counted on their own.
    pub(crate) fn caps(&self, tool: &str) -> bool {
        self.calls_of.contains_key(tool)
    }

    /// What `used` cost on `model`, if it has a price: priced as the model that `said` it
    /// answered when that one has a price (a fallback chain's answer names which of its models
    /// gave it, and that one's tokens are what was paid for), else as `model`.
    pub(crate) fn cost_of(&self, model: &str, said: Option<&str>, used: Usage) -> Option<f64> {
        if self.max_cost.is_none() {
            return Some(0.0);
        }
        let priced = said.and_then(|said| self.prices.get(said));
        let price = priced.or_else(|| self.prices.get(model))?;
        Some(price.cost(used))
    }
}

/// What a model's tokens cost, per million (the way providers list their prices).
///
/// # Examples
///
/// ```
/// use agent_errors::llm::Usage;
/// use agent_errors::run::ModelPrice;
///
/// let price = ModelPrice::per_million_tokens(2.0, 8.0);
/// assert_eq!(price.cost(Usage::new(500_000, 250_000)), 3.0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ModelPrice {
    input_per_million: f64,
    output_per_million: f64,
}

impl ModelPrice {
    /// A price of `input` per million input tokens and `output` per million output tokens.
    pub fn per_million_tokens(input: f64, output: f64) -> Self {
        ModelPrice {
            input_per_million: input,
            output_per_million: output,
        }
    }

    /// Whether both figures are finite and not negative.
    fn is_amount(&self) -> bool {
        is_amount(self.input_per_million) && is_amount(self.output_per_million)
    }

    /// What `used` costs.
    pub fn cost(&self, used: Usage) -> f64 {
        let million = 1_000_000.0;
        (used.input_tokens as f64 * self.input_per_million
            + used.output_tokens as f64 * self.output_per_million)
            / million
    }
}

/// Whether `figure` is an amount of money: finite and not negative.
fn is_amount(figure: f64) -> bool {
    figure.is_finite() && figure >= 0.0
}

/// How a model response that reports no usage is counted against a run's token and cost caps.
///
/// Whichever is chosen, the first such response of a run is an `usage_missing` event and a
/// `tracing` warning, so a provider that stopped reporting usage is seen, not silently free.
///
/// # Examples
///
/// ```
/// use agent_errors::llm::Usage;
/// use agent_errors::run::{MissingUsage, UsageLimits};
///
/// // Count each such response as a generous 8,000 tokens in, 2,000 out.
/// let generous = UsageLimits::new()
///     .max_total_tokens(100_000)
///     .missing_usage(MissingUsage::Assume(Usage::new(8_000, 2_000)));
/// // Or refuse them: the first response without usage ends the run past the cap.
/// let strict = UsageLimits::new()
///     .max_total_tokens(100_000)
///     .missing_usage(MissingUsage::Assume(Usage::new(u64::MAX, 0)));
/// assert_ne!(generous, strict);
///
/// fn describe(counted: MissingUsage) -> String {
///     match counted {
///         MissingUsage::Estimate => "estimated from the text".to_owned(),
///         MissingUsage::Assume(usage) => format!("{} tokens each", usage.total()),
///         _ => "something newer".to_owned(), // the enum is non-exhaustive
///     }
/// }
/// assert_eq!(describe(MissingUsage::default()), "estimated from the text");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub enum MissingUsage {
    /// Estimated from the text: one token per 4 characters (rounded up) of what was sent (the
    /// messages, tool calls and results, and the tools on offer) and of what was answered.
    #[default]
    Estimate,
    /// Counted as this usage. A usage past a cap ends the run at the first response that
    /// reports none: `Usage::new(u64::MAX, 0)` refuses such responses outright.
    Assume(Usage),
}
