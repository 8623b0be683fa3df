//! The state one run shares between its tool calls, one concern per file: its limits
//! (`limits`), how it stops (`halt`), what it calls out to (`hooks`: breakers, budget,
//! permission, classifier, journal) and what it has learnt (`recovery`). [`RunContext`] holds
//! one of each, with the run's id, values and events.

mod approvals;
mod halt;
mod hooks;
mod limits;
pub(super) mod recovery;

use std::fmt;
use std::num::NonZeroU32;
use std::sync::{Arc, OnceLock};

use crate::breaker::{RunBreaker, ServiceBreaker};
use crate::budget::RetryBudget;
use crate::classify::Classifier;
use crate::events::{EventLog, EventSink};
use crate::extensions::Extensions;
use crate::retry::RetryAllowance;
use crate::usage::RunMeter;

use super::cancel::Cancellation;
use super::journal::{Held, NoJournal};
use super::limits::Limits;
use super::permission::{PermissionContext, PermissionHook};

pub(crate) use approvals::Approvals;
pub(crate) use halt::Halt;
pub(crate) use hooks::Hooks;
pub(crate) use limits::RunLimits;
pub(crate) use recovery::{Recovery, RecoveryState, Trip};

/// The state of one run that the executor reads and writes: events, dropped tools, the per-run
/// breaker, cancellation, the permission hook and the limits.
///
/// Make one per run and pass it to every [`Registry::execute`](crate::Registry::execute) of
/// that run: this is how the recovery layer works inside an agent loop of your own.
///
/// # Examples
///
/// ```
/// use std::num::NonZeroU32;
/// use agent_errors::{Cancellation, Limits, RunContext};
///
/// let cancel = Cancellation::new();
/// let ctx = RunContext::new()
///     .with_breaker_threshold(NonZeroU32::new(5).unwrap())
///     .with_cancellation(cancel.clone())
///     .with_limits(Limits::default().with_max_message_chars(500));
/// assert!(!ctx.cancellation().is_cancelled());
/// ```
pub struct RunContext {
    events: Arc<EventLog>,
    extensions: Extensions,
    /// The run's stable id, when it has one: every call's idempotency key starts with it.
    run_id: Option<Arc<str>>,
    limits: RunLimits,
    halt: Halt,
    hooks: Hooks,
    recovery: Recovery,
    /// What the guards of another agent loop (rig's) keep for this run, shared by every guard
    /// made over it: set by the first.
    #[cfg(feature = "rig")]
    guarded: OnceLock<Arc<dyn std::any::Any + Send + Sync>>,
}

/// Every part of a [`RunContext`], for [`RunContext::for_run`].
pub(crate) struct RunSetup {
    pub(crate) breaker: RunBreaker,
    pub(crate) service: Option<Arc<ServiceBreaker>>,
    pub(crate) retry_budget: Option<Arc<RetryBudget>>,
    pub(crate) permission: Option<Arc<dyn PermissionHook>>,
    pub(crate) cancel: Cancellation,
    pub(crate) extensions: Extensions,
    pub(crate) limits: Limits,
    pub(crate) events: EventLog,
    pub(crate) run_id: Option<Arc<str>>,
    pub(crate) journal: Held,
    pub(crate) approvals: Option<Arc<Approvals>>,
    pub(crate) meter: RunMeter,
}

impl fmt::Debug for RunContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunContext")
            .field("events", &self.events)
            .field("recovery", &self.recovery)
            .field("cancelled", &self.halt.cancellation().is_cancelled())
            .field("limits", self.limits.limits())
            .finish_non_exhaustive()
    }
}

impl Default for RunContext {
    fn default() -> Self {
        RunContext::new()
    }
}

impl RunContext {
    /// A fresh context: no events, nothing dropped, the per-run breaker at its default
    /// threshold, no service breaker, no permission hook.
    pub fn new() -> Self {
        RunContext::for_run(RunSetup {
            breaker: RunBreaker::default(),
            service: None,
            retry_budget: None,
            permission: None,
            cancel: Cancellation::new(),
            extensions: Extensions::new(),
            limits: Limits::default(),
            events: EventLog::new(),
            run_id: None,
            journal: Held::new(NoJournal::shared()),
            approvals: None,
            meter: RunMeter::default(),
        })
    }

    /// The context of a run whose every part is known up front: each part built once (a
    /// `with_*` chain would build a default of each first and drop it, which costs an agent run
    /// a few thousand instructions).
    pub(crate) fn for_run(setup: RunSetup) -> Self {
        let RunSetup {
            breaker,
            service,
            retry_budget,
            permission,
            cancel,
            extensions,
            limits,
            events,
            run_id,
            journal,
            approvals,
            meter,
        } = setup;
        RunContext {
            events: Arc::new(events),
            extensions,
            run_id,
            limits: RunLimits::new(limits, meter),
            halt: Halt::new(cancel),
            hooks: Hooks {
                service,
                retry_budget,
                permission,
                classifier: OnceLock::new(),
                journal,
                approvals,
            },
            recovery: Recovery::new(breaker),
            #[cfg(feature = "rig")]
            guarded: OnceLock::new(),
        }
    }

    /// What the guards of another agent loop keep for this run: made by the first guard over
    /// it (`make`), shared with every later one. True with it when it was made before, by
    /// another guard.
    #[cfg(feature = "rig")]
    pub(crate) fn guarded<T: Send + Sync + 'static>(
        &self,
        make: impl FnOnce() -> T,
    ) -> Option<(Arc<T>, bool)> {
        let mut made = false;
        let state = self.guarded.get_or_init(|| {
            made = true;
            Arc::new(make())
        });
        Some((Arc::clone(state).downcast::<T>().ok()?, !made))
    }

    /// Sets the number of consecutive failures of one tool that stops the run.
    #[must_use]
    pub fn with_breaker_threshold(self, threshold: NonZeroU32) -> Self {
        self.recovery.set_breaker(RunBreaker::new(threshold));
        self
    }

    /// Shares a service breaker with other runs.
    #[must_use]
    pub fn with_service_breaker(mut self, breaker: Arc<ServiceBreaker>) -> Self {
        self.hooks.service = Some(breaker);
        self
    }

    /// Pays every tool retry from this budget, shared with other runs: a retry it refuses is
    /// not made.
    #[must_use]
    pub fn with_retry_budget(mut self, budget: Arc<RetryBudget>) -> Self {
        self.hooks.retry_budget = Some(budget);
        self
    }

    /// Uses this cancellation handle.
    #[must_use]
    pub fn with_cancellation(mut self, cancel: Cancellation) -> Self {
        self.halt = Halt::new(cancel);
        self
    }

    /// Asks this hook before every tool runs.
    #[must_use]
    pub fn with_permission(mut self, hook: Arc<dyn PermissionHook>) -> Self {
        self.hooks.permission = Some(hook);
        self
    }

    /// Asks `approver` when a call needs a person (its tool requires approval, or an
    /// `ask_person` rung hands it a failure); without one such a call ends with a
    /// [`CallOutcome::Stop`](crate::call::CallOutcome) whose reason is
    /// [`WaitingForPerson`](crate::run::TerminationReason::WaitingForPerson).
    #[must_use]
    pub fn with_approver(mut self, approver: impl crate::approval::Approver) -> Self {
        let approvals = Approvals {
            approver: Some(Arc::new(approver)),
            ..Approvals::default()
        };
        self.hooks.approvals = Some(Arc::new(approvals));
        self
    }

    /// Sets the limits.
    #[must_use]
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = RunLimits::new(limits, self.limits.meter().clone());
        self
    }

    /// Holds every tool call made with this context to `limits`' tool-call caps
    /// ([`max_tool_calls`](crate::run::UsageLimits::max_tool_calls) and
    /// [`max_calls_of`](crate::run::UsageLimits::max_calls_of)): each run of a tool body counts,
    /// retries and fallbacks included, and past a cap the body does not run, the call answers
    /// the cap, and the context is halted (its later calls answer "operation cancelled"), as an
    /// agent run ends at a cap. For an agent loop of your own, or a session of many calls
    /// treated as one run (an MCP proxy's). Caps on model requests, tokens and cost count the
    /// model calls an agent makes; a context used only with
    /// [`Registry::execute`](crate::Registry::execute) makes none.
    ///
    /// ```
    /// use agent_errors::RunContext;
    /// use agent_errors::run::UsageLimits;
    ///
    /// let session = RunContext::new()
    ///     .with_run_id("session-7")
    ///     .with_usage_limits(UsageLimits::new().max_tool_calls(100).max_calls_of("refund", 1));
    /// assert_eq!(session.run_id(), Some("session-7"));
    /// ```
    #[must_use]
    pub fn with_usage_limits(mut self, limits: crate::run::UsageLimits) -> Self {
        let meter = RunMeter::for_run(&Arc::new(limits), &RunMeter::default());
        self.limits = RunLimits::new(*self.limits.limits(), meter);
        self
    }

    /// Gives the run these values: tools and fixers ask for them with a
    /// [`Ctx<T>`](crate::Ctx) parameter, the permission hook reads them too.
    #[must_use]
    pub fn with_extensions(mut self, extensions: Extensions) -> Self {
        self.extensions = extensions;
        self
    }

    /// Classifies this run's tool failures with `classifier`, its own rules first and then the
    /// process-wide ones (a registry's own classifier is used when none is set here).
    #[must_use]
    pub fn with_classifier(self, classifier: Classifier) -> Self {
        let _ = self
            .hooks
            .classifier
            .set(Arc::new(classifier.with_global_rules()));
        self
    }

    /// Names the run: each call's [`IdempotencyKey`](crate::call::IdempotencyKey) is this id and
    /// the call's id, so a tool asking for a `Ctx<IdempotencyKey>` finds one (without a run id
    /// it finds none).
    #[must_use]
    pub fn with_run_id(mut self, run_id: impl Into<Arc<str>>) -> Self {
        self.run_id = Some(run_id.into());
        self
    }

    /// The run's id, if it was given one.
    pub fn run_id(&self) -> Option<&str> {
        self.run_id.as_deref()
    }

    /// The run's id, shared: for a caller that must hold it while it lends the run out.
    pub(crate) fn shared_run_id(&self) -> Option<Arc<str>> {
        self.run_id.clone()
    }

    /// The values the run was given.
    pub fn extensions(&self) -> &Extensions {
        &self.extensions
    }

    /// The values one call sees: the run's, and the call's idempotency key when the run has an
    /// id (built only if a tool asks for it).
    pub(crate) fn call_extensions(&self, call_id: &Arc<str>) -> Extensions {
        match &self.run_id {
            Some(run_id) => self.extensions.for_call(run_id, call_id),
            None => self.extensions.copied(),
        }
    }

    /// The events so far.
    pub fn events(&self) -> &EventLog {
        &self.events
    }

    /// The run's events as a sink for a [`ChatRequest`](crate::ChatRequest), so model wrappers
    /// record on the run's report.
    pub fn event_sink(&self) -> EventSink {
        EventSink::new(Arc::clone(&self.events))
    }

    /// The cancellation handle.
    pub fn cancellation(&self) -> &Cancellation {
        self.halt.cancellation()
    }

    /// Whether the run is over for its calls: cancelled, or halted because a call reached a
    /// usage cap or ended the run while others ran. Every call made with it from then on
    /// answers "operation cancelled": a loop of your own (or a session of many calls) checks
    /// this to say why.
    ///
    /// ```
    /// use agent_errors::RunContext;
    ///
    /// let ctx = RunContext::new();
    /// assert!(!ctx.is_stopped());
    /// ctx.cancellation().cancel();
    /// assert!(ctx.is_stopped());
    /// ```
    pub fn is_stopped(&self) -> bool {
        self.halt.is_halted()
    }

    /// Whether `degrade` dropped this tool in this run.
    pub fn is_degraded(&self, tool: &str) -> bool {
        self.recovery.is_degraded(tool)
    }

    /// The run's limits.
    pub(crate) fn limits(&self) -> &Limits {
        self.limits.limits()
    }

    /// The run's retry allowance: every retry of the run, at any layer, spends from it.
    pub(crate) fn retries(&self) -> &Arc<RetryAllowance> {
        self.limits.retries()
    }

    /// The run's one usage meter: every model request and tool body of the run counts on it.
    pub(crate) fn meter(&self) -> &RunMeter {
        self.limits.meter()
    }

    /// How the run stops: its cancellation, and the halt a call that ends the run sets.
    pub(crate) fn halting(&self) -> &Halt {
        &self.halt
    }

    /// What the run calls out to: breakers, budget, permission hook, classifier, journal.
    pub(crate) fn hooks(&self) -> &Hooks {
        &self.hooks
    }

    /// Who answers this run's calls that need a person, when anyone can.
    pub(crate) fn approvals(&self) -> Option<&Approvals> {
        self.hooks.approvals.as_deref()
    }

    /// Where this run records its steps, waits and saves.
    pub(crate) fn journal(&self) -> &Held {
        self.hooks.journal()
    }

    /// How this run's retry loops wait: as its journal says.
    pub(crate) fn sleeper(&self) -> crate::retry::Sleep {
        self.hooks.journal().sleeper()
    }

    /// What the run has learnt: dropped tools, the per-run breaker, denials.
    pub(crate) fn learnt(&self) -> &Recovery {
        &self.recovery
    }

    /// What the permission hook is told about this run, for a call of `tool`.
    pub(crate) fn permission_context(&self, tool: &str) -> PermissionContext<'_> {
        let (denials, tool_denials) = self.recovery.denials(tool);
        PermissionContext {
            extensions: &self.extensions,
            denials,
            tool_denials,
        }
    }

    /// What the run has learnt so far and the retries it spent, to be saved with its
    /// checkpoint.
    pub(crate) fn recovery(&self) -> RecoveryState {
        let mut state = self.recovery.snapshot();
        state.retries_spent = self.retries().spent();
        state
    }

    /// Takes up what a run learnt before it was interrupted: dropped tools, the per-run
    /// breaker's counts and trip, permission denials, retries spent.
    pub(crate) fn restore(&self, saved: RecoveryState) {
        self.retries().restore(saved.retries_spent);
        self.recovery.restore(saved);
    }
}
