//! A rig model that survives transient provider failures, for rig's own agent loop:
//! [`RecoveringModel`]. rig's loop ends the run at the first failed model call and no hook sees it,
//! so recovery has to sit below the agent, in the model it is given.
//!
//! rig's transports cannot be wrapped from outside (an exchange's observation and a reply's
//! frames are private to rig), so the recovering model is a small wire of its own (`wire.rs`):
//! its payload is the request as rig prepared it, its transport (`transport.rs`) calls the
//! wrapped model (retrying under our classification) and hands back the whole answer as one
//! frame, which its decoder writes into rig's reply as rig's own scripted wire does.

mod transport;
mod wire;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use rig_core::DynModel;
use rig_core::driver::Model;
use rig_core::operation::Completion;

use crate::breaker::{MemoryStore, ServiceBreaker};
use crate::executor::RunContext;
use crate::llm::circuit::{DEFAULT_COOLDOWN, ModelCircuit};
use crate::retry::RetrySchedule;
use transport::{RecoveringTransport, model_name};
use wire::RecoveringWire;

/// A rig model that survives provider failures inside rig's own loop, as a rig
/// `DynModel<Completion>` (`.into()`, or straight into [`RigGuard::agent`](super::RigGuard::agent)
/// and `AgentBuilder::new`): the way to make a rig agent's model calls survive transient provider
/// failures, which rig's own loop does not retry. Made by
/// [`RigGuard::recovering`](super::RigGuard::recovering) in a guarded run, or by
/// [`new`](RecoveringModel::new) with the run it belongs to: there is one way to make it, and it
/// always has a run, so each retry spends one of the run's retries
/// ([`Limits::max_retries`](crate::Limits), the allowance the guarded tools' retries spend too;
/// with none left the failure is final) and each retry is an `llm_retry` event and each switch
/// an `llm_fallback` event on the run's report ([`RunContext::events`](crate::RunContext::events)),
/// beside its tools'.
///
/// A failed call is classified as [`RigModel`](super::RigModel)'s failures are (status,
/// `Retry-After`, machine code, never the body) and called again while it is retryable and the
/// schedule has a delay left: 408, 429 (waiting as the server asked, up to 5 minutes), 5xx but
/// 501, 529, a broken connection or a reply cut short. 400, 401, 403, 404 and a used-up quota
/// come back at once, and so does the last failure once the schedule is spent, ending rig's run
/// as before. Each call is whole: a streamed rig run receives the answer in one piece.
///
/// After the retries, a chain of [fallback](RecoveringModel::fallback) models, each tried with
/// the same retries when the one before it failed for good. The next model is asked when a
/// model's last failure is anything but an invalid request (a 400, which no other model could
/// serve either): an outage that outlasted the retries, a used-up quota, refused credentials,
/// an unknown model. Which model answered is on rig's response.
///
/// The chain remembers a model that failed for good: its circuit opens, and for 30 s each
/// request (each turn of rig's loop) skips it for the next model without a call or a backoff
/// spent on it, until one probe call finds it answering again (see
/// [`remember`](RecoveringModel::remember), [`forget`](RecoveringModel::forget) and, to share
/// it across runs or processes, [`service_breaker`](RecoveringModel::service_breaker)).
///
/// What is not kept: provider items that only the wrapped provider understands (reasoning
/// signatures, server-side item ids) are dropped from the history rig sends, since the history
/// is adapted for this wire before the wrapped model adapts it again.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use agent_errors::RunContext;
/// use agent_errors::retry::RetrySchedule;
/// use agent_errors::rig::RecoveringModel;
/// use rig_core::test_utils::{MockCompletionModel, MockTurn};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let run = Arc::new(RunContext::new());
/// let primary = MockCompletionModel::from_turns([]); // has nothing to say: fails
/// let backup = MockCompletionModel::from_turns([MockTurn::text("hello from the backup")]);
/// let model = RecoveringModel::new(primary, RetrySchedule::attempts(2)?, Arc::clone(&run))
///     .fallback(backup);
/// let agent = rig_agent::AgentBuilder::new(model).build();
/// assert_eq!(agent.prompt("hi").await?.output(), "hello from the backup");
/// let switched = run.events().snapshot().iter().filter(|e| e.name() == "llm_fallback").count();
/// assert_eq!(switched, 1);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RecoveringModel {
    models: Vec<DynModel<Completion>>,
    schedule: RetrySchedule,
    run: Arc<RunContext>,
    memory: Memory,
}

/// What the chain remembers of its models between requests.
#[derive(Debug, Clone)]
enum Memory {
    /// Nothing: every request starts at the first model.
    Off,
    /// Circuits in this model (and its clones).
    Local(Arc<ServiceBreaker>),
    /// Circuits in a breaker the caller gave.
    Shared(Arc<ServiceBreaker>),
}

impl Memory {
    /// Circuits in this process: each opens after as many failures in a row as `schedule`
    /// makes calls.
    fn local(schedule: &RetrySchedule, cooldown: Duration) -> Memory {
        if cooldown.is_zero() {
            return Memory::Off;
        }
        let threshold = std::num::NonZeroU32::new(schedule.max_attempts())
            .expect("a schedule makes at least one call");
        let store = MemoryStore::new(threshold, cooldown);
        Memory::Local(Arc::new(ServiceBreaker::with_store(store)))
    }

    fn breaker(&self) -> Option<&Arc<ServiceBreaker>> {
        match self {
            Memory::Off => None,
            Memory::Local(breaker) | Memory::Shared(breaker) => Some(breaker),
        }
    }
}

impl fmt::Debug for RecoveringModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let models: Vec<&str> = self.models.iter().map(model_name).collect();
        f.debug_struct("RecoveringModel")
            .field("models", &models)
            .field("schedule", &self.schedule)
            .field("memory", &self.memory)
            .finish()
    }
}

impl RecoveringModel {
    /// `model`, retried under `schedule`, in `run`: its retries spend the run's allowance and
    /// are events of the run.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use agent_errors::{Limits, RunContext};
    /// use agent_errors::retry::RetrySchedule;
    /// use agent_errors::rig::RecoveringModel;
    /// use rig_core::test_utils::MockCompletionModel;
    ///
    /// let run = Arc::new(RunContext::new().with_limits(Limits::default().with_max_retries(2)));
    /// let schedule = RetrySchedule::attempts(5).unwrap();
    /// let model: rig_core::DynModel<_> =
    ///     RecoveringModel::new(MockCompletionModel::from_turns([]), schedule, run).into();
    /// # let _ = model;
    /// ```
    pub fn new(
        model: impl Into<DynModel<Completion>>,
        schedule: RetrySchedule,
        run: Arc<RunContext>,
    ) -> Self {
        RecoveringModel {
            models: vec![model.into()],
            memory: Memory::local(&schedule, DEFAULT_COOLDOWN),
            schedule,
            run,
        }
    }

    /// Remembers a model of the chain that failed for good for `cooldown` (30 s by default),
    /// in this model and its clones. Each model's circuit opens, skips, probes and reports as
    /// [`FallbackModel::remember`](crate::llm::FallbackModel::remember) describes (and is on by
    /// default for the reason given there: every turn of rig's loop is a request), with what a
    /// chain changes:
    ///
    /// - a model's circuit opens after as many failures in a row as the schedule makes calls,
    ///   and any failure but an invalid request counts;
    /// - while it is open each request skips it for the next model; the last model of the
    ///   chain, which nothing falls back from, is always called, and when it fails too each
    ///   model skipped for its open circuit gets one call before the request fails;
    /// - a model made for one run remembers for that run; give the runs one
    ///   [`service_breaker`](RecoveringModel::service_breaker) to remember across them.
    ///
    /// A zero `cooldown` remembers nothing, as [`forget`](RecoveringModel::forget).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use agent_errors::RunContext;
    /// use agent_errors::retry::RetrySchedule;
    /// use agent_errors::rig::RecoveringModel;
    /// use rig_core::test_utils::MockCompletionModel;
    ///
    /// let schedule = RetrySchedule::attempts(3).unwrap();
    /// let run = Arc::new(RunContext::new());
    /// let chain = RecoveringModel::new(MockCompletionModel::from_turns([]), schedule, run)
    ///     .fallback(MockCompletionModel::from_turns([]))
    ///     .remember(Duration::from_secs(120));
    /// # let _ = chain;
    /// ```
    #[must_use]
    pub fn remember(mut self, cooldown: Duration) -> Self {
        self.memory = Memory::local(&self.schedule, cooldown);
        self
    }

    /// Remembers nothing between requests: each starts at the first model, with its retries
    /// (as [`FallbackModel::forget`](crate::llm::FallbackModel::forget)).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use agent_errors::RunContext;
    /// use agent_errors::retry::RetrySchedule;
    /// use agent_errors::rig::RecoveringModel;
    /// use rig_core::test_utils::MockCompletionModel;
    ///
    /// let schedule = RetrySchedule::attempts(3).unwrap();
    /// let chain = RecoveringModel::new(MockCompletionModel::from_turns([]), schedule, Arc::new(RunContext::new()))
    ///     .fallback(MockCompletionModel::from_turns([]))
    ///     .forget();
    /// # let _ = chain;
    /// ```
    #[must_use]
    pub fn forget(mut self) -> Self {
        self.memory = Memory::Off;
        self
    }

    /// Keeps each model's circuit in `breaker` (under the key `model:<its name>`), instead of
    /// this model's own: the runs given the same breaker share what they learn of a model, and a
    /// breaker over a store a fleet shares (`RedisStore`, feature `redis`) shares it between
    /// processes. The circuits open and probe as the breaker's store says. Replaces
    /// [`remember`](RecoveringModel::remember).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use agent_errors::RunContext;
    /// use agent_errors::breaker::ServiceBreaker;
    /// use agent_errors::retry::RetrySchedule;
    /// use agent_errors::rig::RecoveringModel;
    /// use rig_core::test_utils::MockCompletionModel;
    ///
    /// // One breaker for every run of the process: a model found failing is skipped by all.
    /// let breaker = Arc::new(ServiceBreaker::new(3, Duration::from_secs(30))?);
    /// let schedule = RetrySchedule::attempts(3).unwrap();
    /// let chain = RecoveringModel::new(MockCompletionModel::from_turns([]), schedule, Arc::new(RunContext::new()))
    ///     .fallback(MockCompletionModel::from_turns([]))
    ///     .service_breaker(Arc::clone(&breaker));
    /// # let _ = chain;
    /// # Ok::<(), agent_errors::breaker::BreakerSettingsError>(())
    /// ```
    #[must_use]
    pub fn service_breaker(mut self, breaker: Arc<ServiceBreaker>) -> Self {
        self.memory = Memory::Shared(breaker);
        self
    }

    /// Asks `model` (with the same retries) once the models before it failed for good.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use agent_errors::RunContext;
    /// use agent_errors::retry::RetrySchedule;
    /// use agent_errors::rig::RecoveringModel;
    /// use rig_core::test_utils::MockCompletionModel;
    ///
    /// let schedule = RetrySchedule::attempts(3).unwrap();
    /// let run = Arc::new(RunContext::new());
    /// let chain = RecoveringModel::new(MockCompletionModel::from_turns([]), schedule, run)
    ///     .fallback(MockCompletionModel::from_turns([]))
    ///     .fallback(MockCompletionModel::from_turns([]));
    /// # let _ = chain;
    /// ```
    #[must_use]
    pub fn fallback(mut self, model: impl Into<DynModel<Completion>>) -> Self {
        self.models.push(model.into());
        self
    }
}

impl From<RecoveringModel> for DynModel<Completion> {
    fn from(recovering: RecoveringModel) -> Self {
        let wire = RecoveringWire::like(&recovering.models[0]);
        let last = recovering.models.len() - 1;
        let circuits = (recovering.models.iter().enumerate())
            .map(|(n, model)| {
                let breaker = recovering.memory.breaker().filter(|_| n < last)?;
                Some(ModelCircuit::in_breaker(
                    model_name(model),
                    Arc::clone(breaker),
                ))
            })
            .collect();
        let transport = RecoveringTransport {
            models: recovering.models.into(),
            circuits,
            schedule: recovering.schedule,
            run: recovering.run,
        };
        Model::new(wire, transport).erase()
    }
}
