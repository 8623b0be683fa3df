//! Validating an agent's configuration and assembling the agent: every problem is listed at
//! once, and an agent is made only from a configuration with none.
//!
//! What a build refuses in an agent's usage limits: a cap that could never apply, which would
//! otherwise compile, run and cap nothing.

use super::AgentBuilder;
use crate::agent::builtins::Builtins;
use crate::agent::{Agent, AgentInner, AgentOutput, offer};
use crate::breaker::ServiceBreaker;
use crate::executor::Approvals;
use crate::model::ChatModel;
use crate::observe::{AgentMeters, DEFAULT_EVENT_CAPACITY, Feed, Observer};
use crate::registry::{ConfigError, ConfigProblem, Registry};
use crate::usage::UsageLimits;
use std::num::NonZeroU32;
use std::sync::Arc;

impl<O: AgentOutput> AgentBuilder<O> {
    /// Validates the configuration; lists every problem when it refuses: no model, a zero turn
    /// cap or breaker threshold, a tool named like a built-in, a call that needs approval on an
    /// agent with neither an approver nor a checkpoint store, a usage cap that could never
    /// apply (on the calls of a tool the agent does not have, or on cost with no price for its
    /// model), and everything the registry checks (unknown fixers or fallbacks, duplicate
    /// names, `degrade` on a required tool).
    pub fn build(mut self) -> Result<Agent<O>, ConfigError> {
        let mut problems = self.setting_problems();
        let registry = match std::mem::take(&mut self.registry).build() {
            Ok(registry) => Some(registry),
            Err(e) => {
                problems.extend_from_slice(e.problems());
                None
            }
        };
        if let Some(registry) = &registry {
            let waits = self.checkpoints.is_some();
            problems.extend(nobody_to_approve(&self.approvals, waits, registry));
            if let Some(model) = &self.model {
                let (limits, builtins) = (&self.usage_limits, self.builtins);
                let fallback = self.answers.fallback_model().map(|model| model.name());
                let models = std::iter::once(model.name()).chain(fallback);
                problems.extend(caps_that_never_apply(limits, registry, builtins, models));
            }
        }
        let threshold = NonZeroU32::new(self.breaker_threshold);
        match (self.model.take(), registry, threshold) {
            (Some(model), Some(registry), Some(threshold)) if problems.is_empty() => {
                Ok(self.assemble(model, registry, threshold))
            }
            _ => Err(ConfigError::new(problems)),
        }
    }

    /// What is wrong with the agent's own settings, the registry's aside.
    fn setting_problems(&self) -> Vec<ConfigProblem> {
        let mut problems = Vec::new();
        if self.model.is_none() {
            problems.push(ConfigProblem::MissingModel);
        }
        if self.max_turns == 0 {
            problems.push(ConfigProblem::ZeroLimit {
                setting: "max_turns",
            });
        }
        if self.breaker_threshold == 0 {
            problems.push(ConfigProblem::ZeroLimit {
                setting: "breaker_threshold",
            });
        }
        let reserved = self.reserved_names_used.iter().cloned();
        problems.extend(reserved.map(ConfigProblem::ReservedToolName));
        problems
    }

    /// The agent of a configuration without problems.
    fn assemble(
        self,
        model: Arc<dyn ChatModel>,
        registry: Registry,
        breaker_threshold: NonZeroU32,
    ) -> Agent<O> {
        let offered = offer(&registry, self.builtins);
        let meters = AgentMeters::new(&self.name, model.name());
        let mut options = self.options;
        if options.response_format.is_none() {
            options.response_format = O::response_format();
        }
        let answers = self.answers.compiled(options.response_format.as_ref());
        let feed = Feed::new(DEFAULT_EVENT_CAPACITY);
        let observer = Arc::new(Observer::new(Arc::clone(&model), &feed));
        // An agent with the recommended preset for any tool gets the preset's breaker.
        let recommended = registry.uses_recommended();
        let service_breaker = self.service_breaker.unwrap_or_else(|| {
            Arc::new(if recommended {
                ServiceBreaker::recommended()
            } else {
                ServiceBreaker::default()
            })
        });
        Agent {
            inner: Arc::new(AgentInner {
                name: self.name,
                model,
                registry,
                offered,
                llm_error: self.llm_error,
                max_turns: self.max_turns,
                breaker_threshold,
                service_breaker,
                retry_budget: self.retry_budget,
                permission: self.permission,
                approvals: self.approvals,
                system_prompt: self.system_prompt,
                builtins: self.builtins,
                limits: self.limits,
                source: self.source,
                options,
                feed,
                observer,
                meters,
                checkpoints: self.checkpoints,
                snapshot_every: self.snapshot_every,
                usage_limits: Arc::new(self.usage_limits),
                answers,
            }),
        }
    }
}

/// What needs a person's approval on an agent that can neither ask (no approver) nor wait (no
/// checkpoint store): its runs would end waiting for an answer nobody can give.
fn nobody_to_approve(
    approvals: &Approvals,
    waits: bool,
    registry: &Registry,
) -> Vec<ConfigProblem> {
    if approvals.approver.is_some() || waits {
        return Vec::new();
    }
    let tools = registry
        .tools()
        .iter()
        .filter(|tool| tool.is_approval_required())
        .map(|tool| format!("tool `{}`", tool.name()));
    let rule = approvals
        .rule
        .is_some()
        .then(|| "the agent's `require_approval` rule".to_owned());
    tools
        .chain(rule)
        .map(|what| ConfigProblem::NobodyToApprove { what })
        .collect()
}

/// The caps of `limits` that could never apply to an agent with `registry`'s tools (and the
/// built-in tools it offers) on the models named `models` (its model, and the one its output
/// policy falls back to): the checks a rig guard's limits and a run's own get too.
pub(super) fn caps_that_never_apply<'a>(
    limits: &UsageLimits,
    registry: &Registry,
    builtins: Builtins,
    models: impl IntoIterator<Item = &'a str>,
) -> Vec<ConfigProblem> {
    let called = |tool: &str| registry.tool(tool).is_some() || builtins.enabled(tool);
    crate::registry::caps_that_never_apply(limits, registry, called, models)
}
