//! What a run is given: its context, built from the agent's parts and the run's options, and the
//! checks, before anything runs, that it holds every value the agent's tools need and a clock
//! to wait on.

use crate::agent::{AgentInner, AgentOutput, RunError, RunOptions};
use crate::breaker::RunBreaker;
use crate::checkpoint::CheckpointError;
use crate::events::EventLog;
use crate::executor::{Held, RunContext, RunSetup};
use crate::registry::{ConfigError, caps_that_never_apply};
use crate::usage::RunMeter;

impl<O: AgentOutput> AgentInner<O> {
    /// The run's context, made in one go from its parts.
    pub(in crate::agent) fn context(
        &self,
        options: RunOptions,
        run_id: &str,
        journal: Held,
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
            journal,
            approvals: self.approvals.for_run(options.answers),
            meter,
        })
    }

    /// Refuses a run missing a context value one of the agent's tools needs: a developer's
    /// error, told to the caller before anything runs.
    pub(in crate::agent) fn check_context(
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

    /// Refuses usage limits given to one run ([`RunOptions::usage_limits`]) that could never
    /// apply, as the builder refuses the agent's.
    pub(in crate::agent) fn check_run_limits(&self, options: &RunOptions) -> Result<(), RunError> {
        let Some(limits) = &options.usage_limits else {
            return Ok(());
        };
        let models = std::iter::once(self.model.name());
        let called = |tool: &str| self.knows(tool);
        let problems = caps_that_never_apply(limits, &self.registry, called, models);
        if problems.is_empty() {
            return Ok(());
        }
        Err(RunError::InvalidUsageLimits(ConfigError::new(problems)))
    }
}

/// Refuses a run on a Tokio runtime built without its timer (`enable_time`): every backoff and
/// every timeout of the run sleeps on it, and Tokio would panic at the first, in the middle of
/// the run. A run whose journal replays it waits on the engine's clock instead, and a run outside
/// any Tokio runtime is left to the executor it runs on. The probe's panic is kept quiet: the
/// run ends with [`RunError::NoTimer`], and nothing is printed.
pub(in crate::agent) fn check_timer(journal: &Held) -> Result<(), RunError> {
    if journal.can_wait() {
        return Ok(());
    }
    Err(RunError::NoTimer)
}

/// A new run whose first save found a run under its id: the id was used before, and the run
/// says so (resume it) instead of naming the store's sequences.
pub(in crate::agent) fn name_a_taken_id<O>(result: &mut Result<O, RunError>) {
    if let Err(RunError::Checkpoint(CheckpointError::Conflict {
        expected: None,
        found: Some(_),
        run_id,
    })) = result
    {
        let run_id = crate::redact::redact(run_id).into_owned();
        *result = Err(RunError::RunExists { run_id });
    }
}
