//! The state one run shares between its tool calls: limits, cancellation, the permission hook,
//! the service breaker, and what the run has learnt (dropped tools, the per-run breaker).

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::breaker::{RunBreaker, ServiceBreaker};
use crate::budget::RetryBudget;
use crate::classify::Classifier;
use crate::events::{EventLog, EventSink};
use crate::extensions::Extensions;
use crate::retry::RetryAllowance;

use super::cancel::Cancellation;
use super::limits::Limits;
use super::permission::{PermissionContext, PermissionHook};
use super::record::{CallRecorder, NoRecorder};

/// What one run has learnt about its tools.
#[derive(Debug, Default, Clone)]
struct RunState {
    degraded: HashSet<String>,
    breaker: RunBreaker,
    tripped: Option<(String, u32)>,
    /// The model turn being answered; 0 outside [`Registry::execute_turn`](crate::Registry).
    turn: u64,
    /// The last turn in which a failure of each tool was counted.
    counted: HashMap<String, u64>,
    /// Permission denials per tool.
    denied: HashMap<String, u32>,
}

/// The state of one run that the executor reads and writes: events, dropped tools, the per-run
/// breaker, cancellation, the permission hook and the limits.
///
/// Make one per run and pass it to every [`Registry::execute`](crate::Registry::execute) of
/// that run: this is how the recovery layer works inside an agent loop of your own.
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
    state: Mutex<RunState>,
    /// Set once anything has failed in this run; until then the happy path takes no lock.
    troubled: AtomicBool,
    cancel: Cancellation,
    /// Cancelled with `cancel`, or by the executor when a call ends the run, so calls still
    /// running answer "operation cancelled" instead of holding the run open.
    halt: CancellationToken,
    service: Option<Arc<ServiceBreaker>>,
    retry_budget: Option<Arc<RetryBudget>>,
    permission: Option<Arc<dyn PermissionHook>>,
    limits: Limits,
    extensions: Extensions,
    /// Set by the caller, or taken from the registry on the first call.
    classifier: OnceLock<Arc<Classifier>>,
    /// Permission denials in this run; outside the lock so a hook that allows takes none.
    denials: AtomicU32,
    /// The run's stable id, when it has one: every call's idempotency key starts with it.
    run_id: Option<Arc<str>>,
    /// Where a durable run records how its calls get on; records nothing when not durable.
    recorder: Arc<dyn CallRecorder>,
    /// The run's retries, spent by every layer that calls something again.
    retries: Arc<RetryAllowance>,
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
    pub(crate) recorder: Arc<dyn CallRecorder>,
}

/// The per-run recovery state a durable run saves: the per-run breaker's counts and trip, the
/// tools `degrade` dropped, permission denials.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RecoveryState {
    degraded: Vec<String>,
    failures: HashMap<String, u32>,
    tripped: Option<(String, u32)>,
    turn: u64,
    counted: HashMap<String, u64>,
    denied: HashMap<String, u32>,
    denials: u32,
    /// Retries the run had spent, at every layer.
    #[serde(default)]
    retries_spent: u32,
}

impl fmt::Debug for RunContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunContext")
            .field("events", &self.events)
            .field("state", &self.state)
            .field("cancelled", &self.cancel.is_cancelled())
            .field("limits", &self.limits)
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
            recorder: NoRecorder::shared(),
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
            recorder,
        } = setup;
        RunContext {
            events: Arc::new(events),
            state: Mutex::new(RunState {
                breaker,
                ..RunState::default()
            }),
            troubled: AtomicBool::new(false),
            halt: cancel.child(),
            cancel,
            service,
            retry_budget,
            permission,
            retries: Arc::new(RetryAllowance::new(limits.max_retries)),
            limits,
            extensions,
            classifier: OnceLock::new(),
            denials: AtomicU32::new(0),
            run_id,
            recorder,
        }
    }

    /// Sets the number of consecutive failures of one tool that stops the run.
    #[must_use]
    pub fn with_breaker_threshold(self, threshold: NonZeroU32) -> Self {
        self.lock().breaker = RunBreaker::new(threshold);
        self
    }

    /// Shares a service breaker with other runs.
    #[must_use]
    pub fn with_service_breaker(mut self, breaker: Arc<ServiceBreaker>) -> Self {
        self.service = Some(breaker);
        self
    }

    /// Pays every tool retry from this budget, shared with other runs: a retry it refuses is
    /// not made.
    #[must_use]
    pub fn with_retry_budget(mut self, budget: Arc<RetryBudget>) -> Self {
        self.retry_budget = Some(budget);
        self
    }

    /// Uses this cancellation handle.
    #[must_use]
    pub fn with_cancellation(mut self, cancel: Cancellation) -> Self {
        self.halt = cancel.child();
        self.cancel = cancel;
        self
    }

    /// Asks this hook before every tool runs.
    #[must_use]
    pub fn with_permission(mut self, hook: Arc<dyn PermissionHook>) -> Self {
        self.permission = Some(hook);
        self
    }

    /// Sets the limits.
    #[must_use]
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.retries = Arc::new(RetryAllowance::new(limits.max_retries));
        self.limits = limits;
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
            .classifier
            .set(Arc::new(classifier.with_global_rules()));
        self
    }

    pub(crate) fn classifier(&self) -> Option<&Classifier> {
        self.classifier.get().map(Arc::as_ref)
    }

    /// Uses the registry's classifier unless the run already has one.
    pub(crate) fn adopt_classifier(&self, classifier: Option<&Arc<Classifier>>) {
        if let (None, Some(classifier)) = (self.classifier.get(), classifier) {
            let _ = self.classifier.set(Arc::clone(classifier));
        }
    }

    /// Names the run: each call's [`IdempotencyKey`] is this id and the call's id, so a tool
    /// asking for a `Ctx<IdempotencyKey>` finds one (without a run id it finds none).
    #[must_use]
    pub fn with_run_id(mut self, run_id: impl Into<Arc<str>>) -> Self {
        self.run_id = Some(run_id.into());
        self
    }

    /// The run's id, if it was given one.
    pub fn run_id(&self) -> Option<&str> {
        self.run_id.as_deref()
    }

    /// The values the run was given.
    pub fn extensions(&self) -> &Extensions {
        &self.extensions
    }

    /// The values one call sees: the run's, and the call's idempotency key when the run has an
    /// id.
    pub(crate) fn call_extensions(&self, call_id: &Arc<str>) -> Extensions {
        match &self.run_id {
            Some(run_id) => self.extensions.for_call(run_id, call_id),
            None => self.extensions.clone(),
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
        &self.cancel
    }

    /// Whether `degrade` dropped this tool in this run.
    pub fn is_degraded(&self, tool: &str) -> bool {
        self.troubled() && self.lock().degraded.contains(tool)
    }

    pub(crate) fn limits(&self) -> &Limits {
        &self.limits
    }

    pub(crate) fn service_breaker(&self) -> Option<&ServiceBreaker> {
        self.service.as_deref()
    }

    pub(crate) fn retry_budget(&self) -> Option<&RetryBudget> {
        self.retry_budget.as_deref()
    }

    pub(crate) fn permission(&self) -> Option<&dyn PermissionHook> {
        self.permission.as_deref()
    }

    /// Completes when the run is cancelled or halted.
    pub(crate) fn halt_token(&self) -> &CancellationToken {
        &self.halt
    }

    /// Ends the calls still running in this run: they answer "operation cancelled". Unlike
    /// [`Cancellation::cancel`] it does not touch the caller's handle.
    pub(crate) fn halt(&self) {
        self.halt.cancel();
    }

    /// Starts answering a new model turn. Within one turn, parallel calls of the same tool count
    /// as one failure for the per-run breaker: three lookups that all miss in one turn are one
    /// stumble, not a model stuck in a loop.
    pub(crate) fn begin_turn(&self) {
        self.lock().turn += 1;
    }

    /// Whether this run's breaker has tripped for `tool`, and after how many failures. Latched:
    /// a concurrent call that succeeds afterwards resets the count but must not reopen the tool.
    pub(crate) fn breaker_tripped(&self, tool: &str) -> Option<u32> {
        if !self.troubled() {
            return None;
        }
        let state = self.lock();
        match &state.tripped {
            Some((t, failures)) if t == tool => Some(*failures),
            _ => state.breaker.tripped(tool),
        }
    }

    pub(crate) fn degrade(&self, tool: &str) {
        self.troubled.store(true, Ordering::SeqCst);
        self.lock().degraded.insert(tool.to_owned());
    }

    /// Records a call's outcome on the per-run breaker; returns the failure count when this
    /// outcome tripped it.
    pub(crate) fn record_outcome(&self, tool: &str, ok: bool) -> Option<u32> {
        if ok && !self.troubled() {
            return None;
        }
        self.troubled.store(true, Ordering::SeqCst);
        let mut state = self.lock();
        if !ok && state.turn != 0 {
            let turn = state.turn;
            if state.counted.get(tool) == Some(&turn) {
                return None;
            }
            state.counted.insert(tool.to_owned(), turn);
        }
        let failures = state.breaker.record(tool, ok)?;
        if state.tripped.is_none() {
            state.tripped = Some((tool.to_owned(), failures));
        }
        Some(failures)
    }

    /// What the permission hook is told about this run, for a call of `tool`.
    pub(crate) fn permission_context(&self, tool: &str) -> PermissionContext<'_> {
        let denials = self.denials.load(Ordering::SeqCst);
        let tool_denials = if denials == 0 {
            0
        } else {
            self.lock().denied.get(tool).copied().unwrap_or(0)
        };
        PermissionContext {
            extensions: &self.extensions,
            denials,
            tool_denials,
        }
    }

    /// Counts a denial of `tool`; returns the run's total.
    pub(crate) fn record_denial(&self, tool: &str) -> u32 {
        *self.lock().denied.entry(tool.to_owned()).or_insert(0) += 1;
        self.denials.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// What the run has learnt so far, to be saved with its checkpoint.
    pub(crate) fn recovery(&self) -> RecoveryState {
        let state = self.lock();
        RecoveryState {
            degraded: state.degraded.iter().cloned().collect(),
            failures: state.breaker.counts().clone(),
            tripped: state.tripped.clone(),
            turn: state.turn,
            counted: state.counted.clone(),
            denied: state.denied.clone(),
            denials: self.denials.load(Ordering::SeqCst),
            retries_spent: self.retries.spent(),
        }
    }

    /// Takes up what a run learnt before it was interrupted: dropped tools, the per-run
    /// breaker's counts and trip, permission denials.
    pub(crate) fn restore(&self, saved: RecoveryState) {
        let troubled = !saved.degraded.is_empty()
            || !saved.failures.is_empty()
            || saved.tripped.is_some()
            || saved.denials > 0;
        let mut state = self.lock();
        state.degraded = saved.degraded.into_iter().collect();
        state.breaker.restore(saved.failures);
        state.tripped = saved.tripped;
        state.turn = saved.turn;
        state.counted = saved.counted;
        state.denied = saved.denied;
        drop(state);
        self.denials.store(saved.denials, Ordering::SeqCst);
        self.retries.restore(saved.retries_spent);
        if troubled {
            self.troubled.store(true, Ordering::SeqCst);
        }
    }

    /// The run's retry allowance: every retry of the run, at any layer, spends from it.
    pub(crate) fn retries(&self) -> &Arc<RetryAllowance> {
        &self.retries
    }

    /// Where this run records how its calls get on.
    pub(crate) fn recorder(&self) -> &dyn CallRecorder {
        &*self.recorder
    }

    fn troubled(&self) -> bool {
        self.troubled.load(Ordering::SeqCst)
    }

    fn lock(&self) -> MutexGuard<'_, RunState> {
        // Every critical section here is a single insert or read; a panic cannot leave it torn.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}
