//! What a run is given: its context, built from the agent's parts and the run's options, and the
//! checks, before anything runs, that it holds every value the agent's tools need and a clock
//! to wait on.

use std::sync::Arc;

use crate::agent::{AgentInner, AgentOutput, RunError, RunOptions};
use crate::breaker::RunBreaker;
use crate::events::EventLog;
use crate::executor::{Journal, RunContext, RunSetup};
use crate::usage::RunMeter;

impl<O: AgentOutput> AgentInner<O> {
    /// The run's context, made in one go from its parts.
    pub(in crate::agent) fn context(
        &self,
        options: RunOptions,
        run_id: &str,
        journal: Arc<dyn Journal>,
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
}

/// Refuses a run on a Tokio runtime built without its timer (`enable_time`): every backoff and
/// every timeout of the run sleeps on it, and Tokio would panic at the first, in the middle of
/// the run. A run whose journal replays it waits on the engine's clock instead, and a run outside
/// any Tokio runtime is left to the executor it runs on.
///
/// A runtime's timer is found once per thread: a thread remembers the last runtime it found
/// one on, so the runs after the first on that runtime compare an id instead of probing.
pub(in crate::agent) fn check_timer(journal: &dyn Journal) -> Result<(), RunError> {
    if journal.replays() {
        return Ok(());
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return Ok(());
    };
    let id = runtime.id();
    if TIMED_RUNTIME.get() == Some(id) {
        return Ok(());
    }
    // Tokio offers no question for it: making a sleep (never polled, so never registered) is
    // what panics without a timer.
    let probe = std::panic::catch_unwind(|| drop(tokio::time::sleep(std::time::Duration::ZERO)));
    probe.map_err(|_| RunError::NoTimer)?;
    TIMED_RUNTIME.set(Some(id));
    Ok(())
}

thread_local! {
    /// The last runtime this thread found a timer on. Tokio gives each runtime a fresh id from
    /// a process-wide counter, so another runtime (one built without a timer among them) never
    /// matches it.
    static TIMED_RUNTIME: std::cell::Cell<Option<tokio::runtime::Id>> =
        const { std::cell::Cell::new(None) };
}
