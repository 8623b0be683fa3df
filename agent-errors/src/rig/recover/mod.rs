//! A rig model that survives transient provider failures, for rig's own agent loop:
//! [`recovering`]. rig's loop ends the run at the first failed model call and no hook sees it,
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

use rig_core::DynModel;
use rig_core::driver::Model;
use rig_core::operation::Completion;

use crate::breaker::ServiceBreaker;
use crate::executor::RunContext;
use crate::llm::circuit::ModelCircuits;
use crate::retry::RetrySchedule;
use transport::{RecoveringTransport, circuit_keys, model_name};
use wire::RecoveringWire;

/// `model`, retrying what can succeed on retry, as a rig `DynModel<Completion>` for
/// `rig_agent::AgentBuilder::new`: the way to make a rig agent's model calls survive transient
/// provider failures, which rig's own loop does not retry.
///
/// A failed call is classified as [`RigModel`](super::RigModel)'s failures are (status,
/// `Retry-After`, machine code, never the body) and called again while it is retryable and
/// `schedule` has a delay left: 408, 429 (waiting as the server asked, up to 5 minutes), 5xx
/// but 501, 529, a broken connection or a reply cut short. 400, 401, 403, 404 and a used-up
/// quota come back at once, and so does the last failure once the schedule is spent, ending
/// rig's run as before. Each call is whole: a streamed rig run receives the answer in one piece.
///
/// What is not kept: provider items that only the wrapped provider understands (reasoning
/// signatures, server-side item ids) are dropped from the history rig sends, since the history
/// is adapted for this wire before the wrapped model adapts it again.
///
/// [`RecoveringModel`] adds fallback models and spends a run's retry allowance.
///
/// # Examples
///
/// ```
/// use agent_errors::retry::RetrySchedule;
/// use agent_errors::rig::recovering;
/// use rig_core::test_utils::{MockCompletionModel, MockTurn};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let provider = MockCompletionModel::from_turns([MockTurn::text("hello")]);
/// let model = recovering(provider, RetrySchedule::attempts(4)?);
/// let agent = rig_agent::AgentBuilder::new(model).build();
/// assert_eq!(agent.prompt("hi").await?.output(), "hello");
/// # Ok(())
/// # }
/// ```
pub fn recovering(
    model: impl Into<DynModel<Completion>>,
    schedule: RetrySchedule,
) -> DynModel<Completion> {
    RecoveringModel::new(model, schedule).into()
}

/// A rig model that survives provider failures inside rig's own loop: [`recovering`]'s retries,
/// then a chain of fallback models, each tried with the same retries when the one before it
/// failed for good, and, in a run, every retry spending the run's retry allowance and every
/// retry and switch an event of the run. It is a rig `DynModel<Completion>` (`.into()`, or
/// straight into [`RigGuard::agent`](super::RigGuard::agent) and `AgentBuilder::new`).
///
/// The next model is asked when a model's last failure is anything but an invalid request (a
/// 400, which no other model could serve either): an outage that outlasted the retries, a
/// used-up quota, refused credentials, an unknown model. Which model answered is on rig's
/// response; each switch is an `llm_fallback` event naming both models.
///
/// In a run ([`in_run`](RecoveringModel::in_run), which
/// [`RigGuard::recovering`](super::RigGuard::recovering) sets), each retry spends one of the
/// run's retries ([`Limits::max_retries`](crate::Limits), the allowance the guarded tools'
/// retries spend too) and with none left the failure is final; each retry is an `llm_retry`
/// event of the run and each switch an `llm_fallback` event, on the run's report
/// ([`RunContext::events`](crate::RunContext::events)).
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
/// let primary = MockCompletionModel::from_turns([]); // has nothing to say: fails
/// let backup = MockCompletionModel::from_turns([MockTurn::text("hello from the backup")]);
/// let model = RecoveringModel::new(primary, RetrySchedule::attempts(2)?)
///     .fallback(backup)
///     .in_run(Arc::new(RunContext::new()));
/// let agent = rig_agent::AgentBuilder::new(model).build();
/// assert_eq!(agent.prompt("hi").await?.output(), "hello from the backup");
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RecoveringModel {
    models: Vec<DynModel<Completion>>,
    schedule: RetrySchedule,
    run: Option<Arc<RunContext>>,
    circuits: ModelCircuits,
}

impl fmt::Debug for RecoveringModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let models: Vec<&str> = self.models.iter().map(model_name).collect();
        f.debug_struct("RecoveringModel")
            .field("models", &models)
            .field("schedule", &self.schedule)
            .field("in_run", &self.run.is_some())
            .field("circuits", &self.circuits)
            .finish()
    }
}

impl RecoveringModel {
    /// `model`, retried under `schedule`.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::retry::RetrySchedule;
    /// use agent_errors::rig::RecoveringModel;
    /// use rig_core::test_utils::MockCompletionModel;
    ///
    /// let model: rig_core::DynModel<_> =
    ///     RecoveringModel::new(MockCompletionModel::from_turns([]), RetrySchedule::attempts(3).unwrap()).into();
    /// # let _ = model;
    /// ```
    pub fn new(model: impl Into<DynModel<Completion>>, schedule: RetrySchedule) -> Self {
        RecoveringModel {
            models: vec![model.into()],
            schedule,
            run: None,
            circuits: ModelCircuits::default(),
        }
    }

    /// Asks `model` (with the same retries) once the models before it failed for good.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::retry::RetrySchedule;
    /// use agent_errors::rig::RecoveringModel;
    /// use rig_core::test_utils::MockCompletionModel;
    ///
    /// let chain = RecoveringModel::new(MockCompletionModel::from_turns([]), RetrySchedule::attempts(3).unwrap())
    ///     .fallback(MockCompletionModel::from_turns([]))
    ///     .fallback(MockCompletionModel::from_turns([]));
    /// # let _ = chain;
    /// ```
    #[must_use]
    pub fn fallback(mut self, model: impl Into<DynModel<Completion>>) -> Self {
        self.models.push(model.into());
        self
    }

    /// Spends `run`'s retry allowance and records each retry and switch on its events.
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
    /// let model = RecoveringModel::new(MockCompletionModel::from_turns([]), RetrySchedule::attempts(5).unwrap())
    ///     .in_run(run);
    /// # let _ = model;
    /// ```
    #[must_use]
    pub fn in_run(mut self, run: Arc<RunContext>) -> Self {
        self.run = Some(run);
        self
    }
}

impl RecoveringModel {
    /// Keeps each model's circuit in `breaker` (under the key `model:<model id>`) instead of
    /// this chain's own (in this process: open after one request the model failed for good, a
    /// probe after 30 s). While a model's circuit is open the chain goes straight to the next
    /// one; after the cooldown one request probes it with a single call. A breaker whose state
    /// lives in a fleet's store (`ServiceBreaker::with_store(RedisStore)`) shares what one
    /// process learnt with the others.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use agent_errors::breaker::ServiceBreaker;
    /// use agent_errors::retry::RetrySchedule;
    /// use agent_errors::rig::RecoveringModel;
    /// use rig_core::test_utils::MockCompletionModel;
    ///
    /// let circuits = Arc::new(ServiceBreaker::new(1, Duration::from_secs(60)).unwrap());
    /// let chain = RecoveringModel::new(MockCompletionModel::from_turns([]), RetrySchedule::attempts(3).unwrap())
    ///     .fallback(MockCompletionModel::from_turns([]))
    ///     .circuit(circuits);
    /// # let _ = chain;
    /// ```
    #[must_use]
    pub fn circuit(mut self, breaker: Arc<ServiceBreaker>) -> Self {
        self.circuits = ModelCircuits::new(breaker);
        self
    }
}

impl From<RecoveringModel> for DynModel<Completion> {
    fn from(recovering: RecoveringModel) -> Self {
        let wire = RecoveringWire::like(&recovering.models[0]);
        let keys = circuit_keys(&recovering.models);
        let transport = RecoveringTransport {
            keys,
            models: recovering.models.into(),
            schedule: recovering.schedule,
            run: recovering.run,
            circuits: recovering.circuits,
        };
        Model::new(wire, transport).erase()
    }
}
