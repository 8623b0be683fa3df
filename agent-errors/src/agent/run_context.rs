//! What a run is given: its context, built from the agent's parts and the run's options, and the
//! check, before anything runs, that it holds every value the agent's tools need.

use std::sync::Arc;

use super::{AgentInner, AgentOutput, RunError, RunOptions};
use crate::breaker::RunBreaker;
use crate::events::EventLog;
use crate::executor::{CallRecorder, RunContext, RunSetup};
use crate::usage::RunMeter;

impl<O: AgentOutput> AgentInner<O> {
    /// The run's context, made in one go from its parts.
    pub(super) fn context(
        &self,
        options: RunOptions,
        run_id: &str,
        recorder: Arc<dyn CallRecorder>,
        meter: RunMeter,
    ) -> RunContext {
        let (observer, run) = self.observer.for_run(options.feed);
        RunContext::for_run(RunSetup {
            breaker: RunBreaker::new(self.breaker_threshold),
            service: Some(self.service_breaker.clone()),
            retry_budget: self.retry_budget.clone(),
            permission: self.permission.clone(),
            cancel: options.cancellation,
            extensions: options.extensions,
            limits: self.limits,
            events: EventLog::observed(observer, run),
            run_id: Some(run_id.into()),
            recorder,
            journal: options.journal,
            approvals: self.approvals.for_run(options.answers),
            meter,
        })
    }

    /// Refuses a run missing a context value one of the agent's tools needs: a developer's
    /// error, told to the caller before anything runs.
    pub(super) fn check_context(
        &self,
        given: &crate::extensions::Extensions,
    ) -> Result<(), RunError> {
        if !self.registry.needs_context() {
            return Ok(());
        }
        for tool in self.registry.tools() {
            if let Some((_, type_name)) = tool
                .required_context()
                .iter()
                .find(|(id, _)| !given.holds(*id))
            {
                return Err(RunError::MissingContext {
                    tool: tool.name().to_owned(),
                    type_name,
                });
            }
        }
        Ok(())
    }
}
