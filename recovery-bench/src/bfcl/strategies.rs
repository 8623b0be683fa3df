//! The strategies run on BFCL: each builds this library's agent over the MCP client's tools.

use std::sync::Arc;
use std::time::Duration;

use agent_errors::breaker::ServiceBreaker;
use agent_errors::build::ReconcilerDef;
use agent_errors::call::OutputCheck;
use agent_errors::{Agent, ErrorKind, ToolDef, policy};

use super::model::ReplayModel;
use super::server::RECONCILER;

/// One way to configure the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BfclStrategy {
    /// Every failure shown to the model, nothing retried by the layer.
    NoRecovery,
    /// Every failure retried, three calls in all, then shown to the model.
    NaiveRetry,
    /// Nothing configured but the model and the tools.
    Defaults,
    /// A short policy written from the docs.
    Tuned,
    /// The recommended preset, one line: the tools declared keyed only when the server
    /// deduplicates by key, as a user would declare it of their server.
    Preset,
    /// The preset, and every tool that changes state reconciled: asked of the server, by the
    /// call's key, whether an uncertain call was applied.
    Reconciled,
}

impl BfclStrategy {
    pub(crate) const EVERY: [BfclStrategy; 6] = [
        BfclStrategy::NoRecovery,
        BfclStrategy::NaiveRetry,
        BfclStrategy::Defaults,
        BfclStrategy::Tuned,
        BfclStrategy::Preset,
        BfclStrategy::Reconciled,
    ];

    /// The strategy the goal is about.
    pub(crate) fn judged() -> BfclStrategy {
        BfclStrategy::Preset
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            BfclStrategy::NoRecovery => "no recovery",
            BfclStrategy::NaiveRetry => "naive retry",
            BfclStrategy::Defaults => "defaults",
            BfclStrategy::Tuned => "tuned",
            BfclStrategy::Preset => "preset",
            BfclStrategy::Reconciled => "preset, reconciled",
        }
    }

    /// The agent for one task run; `dedup` is whether the server applies a key once, and
    /// `reconciler` asks the server whether a key was applied.
    pub(crate) fn agent(
        self,
        tools: Vec<ToolDef>,
        model: ReplayModel,
        dedup: bool,
        reconciler: ReconcilerDef,
    ) -> Result<Agent, Box<dyn std::error::Error>> {
        let builder = Agent::builder("bfcl").model(model);
        let agent =
            match self {
                BfclStrategy::NoRecovery => builder
                    .tools(tools)
                    .on_any_tool_error(policy!(execution = escalate, invalid_args = escalate))
                    .build()?,
                BfclStrategy::NaiveRetry => builder
                    .tools(tools)
                    .on_any_tool_error(policy!(
                        execution = [retry(3), escalate],
                        invalid_args = escalate
                    ))
                    .build()?,
                BfclStrategy::Defaults => builder.tools(tools).build()?,
                BfclStrategy::Tuned => builder
                    .tools(tools.into_iter().map(|t| {
                        t.with_output_check(OutputCheck::error_member(ErrorKind::Transient))
                    }))
                    .on_any_tool_error(policy!(
                        transient = [retry(3), escalate],
                        timeout = [retry(3), escalate],
                        quota = [retry(3), escalate],
                        server_error = [retry(3), escalate]
                    ))
                    .service_breaker(Arc::new(ServiceBreaker::failure_rate(
                        50,
                        100,
                        20,
                        Duration::from_secs(30),
                    )?))
                    .build()?,
                BfclStrategy::Preset => builder
                    .tools(tools.into_iter().map(|t| t.keyed(dedup)))
                    .recommended()
                    .build()?,
                BfclStrategy::Reconciled => builder
                    .tools(tools.into_iter().map(|t| match t.is_idempotent() {
                        true => t,
                        false => t.keyed(dedup).with_reconcile(RECONCILER),
                    }))
                    .reconciler(reconciler)
                    .recommended()
                    .build()?,
            };
        Ok(agent)
    }
}
