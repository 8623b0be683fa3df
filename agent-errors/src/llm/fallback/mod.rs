//! Model fallback: when the primary model fails in a way its triggers name (by default: N
//! consecutive overloads), the same request goes to a fallback model.

use std::collections::HashSet;
use std::fmt;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use super::circuit::{DEFAULT_COOLDOWN, ModelCircuit};
use super::trigger::{FallbackOn, Triggers};
use super::{CallSource, ChatModel};
use crate::breaker::{BreakerState, ServiceBreaker};
use crate::events::EventLog;
use crate::retry::{RetrySchedule, ZeroAttempts};

mod request;

/// A [`ChatModel`] that answers from `primary` and, once the primary has been overloaded
/// (529, or "overloaded", see [`is_overload_error`](crate::classify::is_overload_error)) `n`
/// times in a row for one request, answers that request from `fallback`.
///
/// More triggers are chosen with [`on`](FallbackModel::on) (see [`FallbackOn`]): a rate limit
/// that asks for longer than the caller will wait, an outage that outlasts the primary's
/// retries, the primary's credentials or configuration failing, and an unusable answer (empty,
/// cut off, a refusal, structured output that does not fit). An invalid request (a 400) never
/// falls back, whatever the triggers: the fallback could not serve it either.
///
/// A chain of any length is fallbacks nested as fallbacks (`FallbackModel::new(a,
/// FallbackModel::new(b, c))`), rig's models and ours mixed; each model sends its own model name
/// and settings, since each is its own [`ChatModel`]. Which model answered is on the response
/// ([`ChatResponse::model`], filled with the answering model's name when the provider did not
/// say), on the `chat` span (`gen_ai.response.model`), and each switch is an `llm_fallback`
/// event naming both models.
///
/// Between overloads the primary is called again after a backoff (default 500 ms · 2^(k-1),
/// capped at 32 s, with up to 25% jitter; a `Retry-After` replaces it, cut to 60 s). Only calls whose
/// [`CallSource`] is on the foreground allowlist (default `{main_agent}`) call an overloaded
/// primary again; any other call goes to the fallback at the first overload, so background work
/// adds no load to a service that is already struggling. Any other error from the primary is
/// returned as it is, and so is the fallback's answer or error.
///
/// Inside an agent run each call again of the primary spends the run's retry allowance
/// ([`Limits::max_retries`](crate::Limits)); with none left the request goes to the fallback at
/// once. The switch itself is not a retry and spends nothing from the allowance. Under the
/// run's [`UsageLimits`](crate::run::UsageLimits) each call again of the primary and the
/// fallback's request are requests like any other, and the tokens of an answer thrown away for
/// the fallback's count: past a cap the request is not sent and the run ends with the cap.
///
/// Each switch emits an `llm_fallback` event as a `tracing` event and records it on the run's
/// report (inside an agent run the request carries the run's log), and on an [`EventLog`]
/// attached with [`FallbackModel::event_log`].
///
/// The wrapper remembers a primary that failed over: a circuit on the primary opens when a
/// request has fallen back after `after` failures in a row, and for the next 30 s every request
/// (every turn of every run, every clone of the wrapper) goes straight to the fallback, with no
/// call and no backoff spent on the primary. Then one request probes the primary with a single
/// call: an answer closes the circuit, a failure keeps it open for another 30 s. The cooldown is
/// chosen with [`remember`](FallbackModel::remember), remembering is turned off with
/// [`forget`](FallbackModel::forget), and [`service_breaker`](FallbackModel::service_breaker)
/// keeps the circuit in a [`ServiceBreaker`] that other wrappers or a fleet's processes share.
///
/// # Examples
///
/// ```
/// use agent_errors::llm::FallbackModel;
/// # fn wrap(
/// #     big: impl agent_errors::ChatModel,
/// #     small: impl agent_errors::ChatModel,
/// # ) -> Result<(), agent_errors::retry::ZeroAttempts> {
/// let model = FallbackModel::new(big, small).after(3)?;
/// # Ok(())
/// # }
/// ```
///
/// An overloaded primary is asked once per cooldown, not once per request:
///
/// ```
/// use agent_errors::breaker::BreakerState;
/// use agent_errors::llm::FallbackModel;
/// use agent_errors::testing::ScriptedModel;
/// use agent_errors::{ChatModel, ChatRequest, HttpError, Message};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), agent_errors::BoxError> {
/// let big = ScriptedModel::named("big").errors(3, || HttpError::new(529, "Overloaded"));
/// let small = ScriptedModel::named("small").text("one").text("two");
/// let model = FallbackModel::new(big.clone(), small);
/// let request = ChatRequest::new(vec![Message::user("hi")], vec![]);
///
/// assert_eq!(model.chat(&request).await?.text.as_deref(), Some("one")); // after 3 overloads
/// assert_eq!(model.circuit_state(), BreakerState::Open);
/// assert_eq!(model.chat(&request).await?.text.as_deref(), Some("two")); // straight to `small`
/// assert_eq!(big.calls(), 3);
/// # Ok(())
/// # }
/// ```
///
/// [`ChatResponse::model`]: crate::ChatResponse::model
#[derive(Clone)]
pub struct FallbackModel<P, F> {
    primary: P,
    fallback: F,
    after: NonZeroU32,
    foreground: HashSet<CallSource>,
    backoff: RetrySchedule,
    triggers: Triggers,
    events: Option<Arc<EventLog>>,
    memory: Memory,
}

/// What the wrapper remembers of its primary between requests.
#[derive(Debug, Clone)]
enum Memory {
    /// Nothing: every request asks the primary first.
    Off,
    /// A circuit in this process, opened by `after` failures in a row, for `cooldown`.
    Local {
        cooldown: Duration,
        circuit: Arc<ModelCircuit>,
    },
    /// A circuit in a breaker the caller gave: its store's threshold and cooldown.
    Shared(Arc<ModelCircuit>),
}

impl Memory {
    fn circuit(&self) -> Option<&ModelCircuit> {
        match self {
            Memory::Off => None,
            Memory::Local { circuit, .. } | Memory::Shared(circuit) => Some(circuit),
        }
    }
}

impl<P: ChatModel, F: ChatModel> fmt::Debug for FallbackModel<P, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FallbackModel")
            .field("primary", &self.primary.name())
            .field("fallback", &self.fallback.name())
            .field("after", &self.after)
            .field("foreground", &self.foreground)
            .field("backoff", &self.backoff)
            .field("triggers", &self.triggers)
            .field("memory", &self.memory)
            .finish_non_exhaustive()
    }
}

impl<P: ChatModel, F: ChatModel> FallbackModel<P, F> {
    /// Falls back after 3 consecutive overloads, and remembers it for 30 s (see
    /// [`remember`](FallbackModel::remember)).
    pub fn new(primary: P, fallback: F) -> Self {
        let after = NonZeroU32::new(3).expect("3 is not zero");
        let memory = Memory::Local {
            cooldown: DEFAULT_COOLDOWN,
            circuit: Arc::new(ModelCircuit::local(primary.name(), after, DEFAULT_COOLDOWN)),
        };
        FallbackModel {
            primary,
            fallback,
            after,
            foreground: HashSet::from([CallSource::MAIN_AGENT]),
            backoff: RetrySchedule::default(),
            triggers: Triggers::OVERLOAD,
            events: None,
            memory,
        }
    }

    /// What sends a request to the fallback; replaces the default `[FallbackOn::Overload]`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use agent_errors::llm::{FallbackModel, FallbackOn};
    /// # fn wrap(primary: impl agent_errors::ChatModel, fallback: impl agent_errors::ChatModel) {
    /// let model = FallbackModel::new(primary, fallback).on([
    ///     FallbackOn::Overload,
    ///     FallbackOn::RateLimit { patience: Duration::from_secs(10) },
    ///     FallbackOn::AuthOrConfig,
    ///     FallbackOn::BadAnswer,
    /// ]);
    /// # }
    /// ```
    #[must_use]
    pub fn on(mut self, triggers: impl IntoIterator<Item = FallbackOn>) -> Self {
        self.triggers = Triggers::of(triggers);
        self
    }

    /// Falls back after `n` consecutive overloads (or outages, or rate limits within the
    /// caller's patience); `n` counts the first call, so it is at least 1.
    ///
    /// A circuit kept in this process ([`remember`](FallbackModel::remember), the default) opens
    /// after `n` such failures in a row as well.
    pub fn after(mut self, n: u32) -> Result<Self, ZeroAttempts> {
        self.after = NonZeroU32::new(n).ok_or(ZeroAttempts)?;
        if let Memory::Local { cooldown, .. } = self.memory {
            self = self.remember(cooldown);
        }
        Ok(self)
    }

    /// Remembers a failing primary for `cooldown` (30 s by default): a circuit on the primary,
    /// kept in this process and shared by every clone of this model, so by every run of an
    /// agent that holds it.
    ///
    /// Each call to the primary counts on the circuit: a failure that sends requests to the
    /// fallback (what the triggers name, such as an overload) as a failure, anything else
    /// (an answer, even an unusable one, or an error of the request's own, such as a 400) as
    /// the primary answering. After [`after`](FallbackModel::after) such failures in a row
    /// (the request that saw them the last has just fallen back) the circuit opens: for
    /// `cooldown`, each request goes straight to the fallback, with no call and no backoff
    /// spent on the primary (an `llm_fallback` event with trigger `circuit_open` and 0
    /// attempts). Then one request probes the primary with a single call: an answer closes the
    /// circuit, a failure re-opens it for another `cooldown` and that request falls back at
    /// once. Requests arriving while the probe is out go to the fallback. Each change is an
    /// `llm_circuit` event ([`Event::LlmCircuit`]). An open circuit says where a request goes
    /// first, not that the primary is never asked: when the fallback fails too (as the
    /// triggers name), the primary gets one call, no retry, before the request fails, and an
    /// answer from it closes the circuit.
    ///
    /// Remembering is on by default: a model call changes nothing in the world, so skipping a
    /// primary that just failed costs at most a request answered by the fallback while the
    /// primary had recovered, while asking it again costs every turn of every run its retries
    /// and backoff. The circuit pays where failures last (an overloaded or down provider);
    /// where they are independent blips at a high rate, a short run of them opens it and the
    /// primary's retries, which would have got through, are not made: there,
    /// [`forget`](FallbackModel::forget), or a [`service_breaker`](FallbackModel::service_breaker)
    /// that opens on a failure rate ([`ServiceBreaker::failure_rate`]), keeps them. A zero
    /// `cooldown` remembers nothing, as [`forget`](FallbackModel::forget).
    /// Replaces a breaker given with [`service_breaker`](FallbackModel::service_breaker).
    ///
    /// ```
    /// use std::time::Duration;
    /// use agent_errors::llm::FallbackModel;
    /// # fn wrap(primary: impl agent_errors::ChatModel, fallback: impl agent_errors::ChatModel) {
    /// // Skip an overloaded primary for two minutes before probing it again.
    /// let model = FallbackModel::new(primary, fallback).remember(Duration::from_secs(120));
    /// # }
    /// ```
    ///
    /// [`Event::LlmCircuit`]: crate::Event::LlmCircuit
    #[must_use]
    pub fn remember(mut self, cooldown: Duration) -> Self {
        self.memory = if cooldown.is_zero() {
            Memory::Off
        } else {
            let circuit = ModelCircuit::local(self.primary.name(), self.after, cooldown);
            Memory::Local {
                cooldown,
                circuit: Arc::new(circuit),
            }
        };
        self
    }

    /// Remembers nothing between requests: each asks the primary first, with its retries and
    /// backoff, however the last one went (how the wrapper behaved before it remembered).
    ///
    /// ```
    /// use agent_errors::breaker::BreakerState;
    /// use agent_errors::llm::FallbackModel;
    /// use agent_errors::testing::ScriptedModel;
    ///
    /// let model = FallbackModel::new(ScriptedModel::new(), ScriptedModel::new()).forget();
    /// assert_eq!(model.circuit_state(), BreakerState::Closed);
    /// ```
    #[must_use]
    pub fn forget(mut self) -> Self {
        self.memory = Memory::Off;
        self
    }

    /// Keeps the primary's circuit in `breaker`, under the key `model:<primary's name>`, instead
    /// of this process's memory: wrappers given the same breaker share it, and a breaker whose
    /// store a fleet shares (`RedisStore`, feature `redis`) shares
    /// it between processes, so one process finding the primary overloaded spares the others
    /// their retries. The circuit opens and probes as the breaker's store says (its threshold
    /// of failures in a row, or its failure rate, and its cooldown), counting calls as
    /// [`remember`](FallbackModel::remember) says. Replaces [`remember`](FallbackModel::remember).
    ///
    /// The agent's own [`service_breaker`](crate::AgentBuilder::service_breaker) may be given:
    /// the `model:` key keeps the model's circuit apart from its tools'.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use agent_errors::breaker::ServiceBreaker;
    /// use agent_errors::llm::FallbackModel;
    /// use agent_errors::testing::ScriptedModel;
    ///
    /// // Two wrappers of the same primary, sharing what they learn of it.
    /// let breaker = Arc::new(ServiceBreaker::new(3, Duration::from_secs(30))?);
    /// let support = FallbackModel::new(ScriptedModel::new(), ScriptedModel::new())
    ///     .service_breaker(Arc::clone(&breaker));
    /// let billing = FallbackModel::new(ScriptedModel::new(), ScriptedModel::new())
    ///     .service_breaker(breaker);
    /// # let _ = (support, billing);
    /// # Ok::<(), agent_errors::breaker::BreakerSettingsError>(())
    /// ```
    #[must_use]
    pub fn service_breaker(mut self, breaker: Arc<ServiceBreaker>) -> Self {
        let circuit = ModelCircuit::in_breaker(self.primary.name(), breaker);
        self.memory = Memory::Shared(Arc::new(circuit));
        self
    }

    /// The state of the primary's circuit now, as this process knows it without waiting:
    /// `Open` while requests skip the primary, `HalfOpen` once a probe may go (or is out),
    /// `Closed` when requests ask the primary (always, after [`forget`](FallbackModel::forget)).
    ///
    /// ```
    /// use agent_errors::breaker::BreakerState;
    /// use agent_errors::llm::FallbackModel;
    /// use agent_errors::testing::ScriptedModel;
    ///
    /// let model = FallbackModel::new(ScriptedModel::new(), ScriptedModel::new());
    /// assert_eq!(model.circuit_state(), BreakerState::Closed);
    /// ```
    pub fn circuit_state(&self) -> BreakerState {
        self.memory
            .circuit()
            .map_or(BreakerState::Closed, ModelCircuit::state)
    }

    /// The call sources that call an overloaded primary again; replaces `{main_agent}`.
    #[must_use]
    pub fn foreground(mut self, sources: impl IntoIterator<Item = CallSource>) -> Self {
        self.foreground = sources.into_iter().collect();
        self
    }

    /// The delays between calls to an overloaded primary (its attempt count is not used).
    #[must_use]
    pub fn backoff(mut self, schedule: RetrySchedule) -> Self {
        self.backoff = schedule;
        self
    }

    /// Records `llm_fallback` events on this log as well.
    #[must_use]
    pub fn event_log(mut self, log: Arc<EventLog>) -> Self {
        self.events = Some(log);
        self
    }
}
