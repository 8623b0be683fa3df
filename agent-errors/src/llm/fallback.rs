//! Model fallback: when the primary model fails in a way its triggers name (by default: N
//! consecutive overloads), the same request goes to a fallback model.

use std::collections::HashSet;
use std::fmt;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;

use super::circuit::{Asked, ModelCircuits, ProbeHeld, circuit_key};
use super::trigger::{FallbackOn, Triggers};
use super::{CallSource, ChatModel, ChatRequest, ChatResponse};
use crate::classify::{ErrorKind, classify};
use crate::breaker::ServiceBreaker;
use crate::error::BoxError;
use crate::events::{Event, EventLog, ModelLayer, count_outcome, emit_to};
use crate::retry::{self, Policy, Retrier, RetrySchedule, Step, Stop, ZeroAttempts};
use crate::stream::ChatStream;
use crate::usage::Answerer;

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
/// The wrapper remembers: it keeps a circuit on the primary. A request the primary failed for
/// good (it fell back after every call it was given, or on a failure no call again could mend,
/// such as refused credentials) opens it, and while it is open requests go straight to the
/// fallback, without a call or a backoff spent on the primary (an `llm_fallback` event with
/// the trigger `circuit_open` and 0 attempts says so). After the cooldown one request probes
/// the primary with a single call: an answer closes the circuit, a failure opens it again. A
/// request the primary was not given its full chance at (a background call, a run with no
/// retries left) does not count. By default the circuit is this wrapper's, in this process: it
/// opens after one such request and probes after 30 s; [`circuit`](FallbackModel::circuit)
/// gives it a [`ServiceBreaker`] of your own (another rule, a breaker shared by several
/// wrappers, or one whose state lives in a fleet's store).
///
/// Each switch emits an `llm_fallback` event as a `tracing` event and records it on the run's
/// report (inside an agent run the request carries the run's log), and on an [`EventLog`]
/// attached with [`FallbackModel::event_log`].
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
pub struct FallbackModel<P, F> {
    primary: P,
    fallback: F,
    after: NonZeroU32,
    foreground: HashSet<CallSource>,
    backoff: RetrySchedule,
    triggers: Triggers,
    events: Option<Arc<EventLog>>,
    circuits: ModelCircuits,
    /// The primary's circuit key.
    key: String,
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
            .field("circuits", &self.circuits)
            .finish_non_exhaustive()
    }
}

impl<P: ChatModel, F: ChatModel> FallbackModel<P, F> {
    /// Falls back after 3 consecutive overloads.
    pub fn new(primary: P, fallback: F) -> Self {
        FallbackModel {
            key: circuit_key(primary.name()),
            primary,
            fallback,
            after: NonZeroU32::new(3).expect("3 is not zero"),
            foreground: HashSet::from([CallSource::MAIN_AGENT]),
            backoff: RetrySchedule::default(),
            triggers: Triggers::OVERLOAD,
            events: None,
            circuits: ModelCircuits::default(),
        }
    }

    /// Keeps the primary's circuit in `breaker`, under the key `model:<primary's name>`,
    /// instead of this wrapper's own (in this process, open after one request the primary
    /// failed for good, a probe after 30 s). A breaker shared by several wrappers, or one whose
    /// state lives in a fleet's store (`ServiceBreaker::with_store(RedisStore)`), makes them
    /// remember together: a primary one of them found down is not asked by the others either.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use agent_errors::breaker::ServiceBreaker;
    /// use agent_errors::llm::FallbackModel;
    /// # fn wrap(big: impl agent_errors::ChatModel, small: impl agent_errors::ChatModel)
    /// #     -> Result<(), agent_errors::breaker::BreakerSettingsError> {
    /// // Open after 2 requests the primary failed for good; a probe after 2 minutes.
    /// let circuits = Arc::new(ServiceBreaker::new(2, Duration::from_secs(120))?);
    /// let model = FallbackModel::new(big, small).circuit(circuits);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn circuit(mut self, breaker: Arc<ServiceBreaker>) -> Self {
        self.circuits = ModelCircuits::new(breaker);
        self
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
    pub fn after(mut self, n: u32) -> Result<Self, ZeroAttempts> {
        self.after = NonZeroU32::new(n).ok_or(ZeroAttempts)?;
        Ok(self)
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

    /// The primary asked `ask`, called again as the triggers allow. The budget is `after` calls
    /// to a failing primary; a caller off the foreground list is not worth a second one.
    fn primary_retry<'a, T>(
        &'a self,
        request: &'a ChatRequest,
        ask: Ask<'a, P, T>,
        attempts: NonZeroU32,
    ) -> PrimaryRetry<'a, P, impl Iterator<Item = Duration> + use<'a, P, F, T>, T> {
        PrimaryRetry {
            primary: &self.primary,
            request,
            retrier: Retrier::new(self.backoff.clone().with_attempts(attempts).delays()),
            foreground: self.foreground.contains(&request.source),
            triggers: &self.triggers,
            ask,
            calls: 0,
            events: self.events.as_ref(),
        }
    }

    /// Whether the primary may be asked: no while its circuit is open (the switch is announced,
    /// after no call), once as a probe after the cooldown.
    async fn ask_primary(&self, request: &ChatRequest) -> Option<Option<ProbeHeld<'_>>> {
        match self.circuits.ask(&self.key).await {
            Asked::Yes => Some(None),
            Asked::Probe(probe) => Some(Some(probe)),
            Asked::No => {
                self.record_switch(request, ("circuit_open", ErrorKind::Transient), 0);
                None
            }
        }
    }

    /// The calls the primary is given: `after`, or one for the probe of a circuit that was
    /// open (a primary still down is not waited on).
    fn budget(&self, probe: &Option<ProbeHeld<'_>>) -> NonZeroU32 {
        if probe.is_some() {
            NonZeroU32::MIN
        } else {
            self.after
        }
    }

    /// Records on the primary's circuit what its calls for one request say of its health.
    /// It failed for good when its failure sends the request to the fallback after every call
    /// it was given, or is one that no call again could mend; it is well when it answered or
    /// failed in a way no model could serve. A primary not given its full chance (a background
    /// call, a run with no retries left) is not judged, and a probe so cut short is given back.
    fn record_primary(
        &self,
        probe: Option<ProbeHeld<'_>>,
        error: Option<&BoxError>,
        (calls, budget): (u32, NonZeroU32),
    ) {
        let health = match error {
            Some(error) if self.triggers.on_failure(&**error).is_some() => {
                let mendable = self.triggers.retry_primary(&**error).is_some();
                (calls >= budget.get() || !mendable).then_some(false)
            }
            _ => Some(true),
        };
        match (probe, health) {
            (Some(probe), Some(well)) => probe.record(well),
            (None, Some(well)) => self.circuits.record(&self.key, well),
            // Dropped, the probe is given back.
            (_, None) => {}
        }
    }

    async fn answer(&self, request: &ChatRequest) -> Result<ChatResponse, BoxError> {
        let Some(probe) = self.ask_primary(request).await else {
            let answer = self.fallback.chat(request).await?;
            return Ok(answered_by(answer, &self.fallback));
        };
        let budget = self.budget(&probe);
        let mut policy = self.primary_retry(request, |model, request| model.chat(request), budget);
        let called = retry::call(&mut policy).await;
        self.record_primary(probe, called.as_ref().err(), (policy.calls, budget));
        let (reason, kind) = match called {
            Ok(answer) => match self.triggers.on_answer(request, &answer) {
                Some(reason) if request.meter.request().is_ok() => {
                    // Thrown away, but its tokens were spent.
                    charge_discarded(request, &self.primary, &answer);
                    (reason, ErrorKind::Validation)
                }
                // Unusable, or the run's caps refuse the fallback: the run judges it as it is.
                _ => return Ok(answered_by(answer, &self.primary)),
            },
            Err(error) => match self.triggers.on_failure(&*error) {
                Some(reason) if request.meter.request().is_ok() => (reason, classify(&*error).kind),
                _ => return Err(error),
            },
        };
        self.record_switch(request, (reason, kind), policy.calls);
        let answer = self.fallback.chat(request).await?;
        Ok(answered_by(answer, &self.fallback))
    }

    /// A stream from the primary or, when opening it fails as the triggers name, from the
    /// fallback. Only a failure before any output switches: an answer judged whole (an unusable
    /// answer) can't be judged before it has streamed, and a stream that breaks after output began
    /// is the run's to recover (`on_llm_error`), like any broken stream.
    async fn open<'a>(&'a self, request: &'a ChatRequest) -> Result<ChatStream<'a>, BoxError> {
        let Some(probe) = self.ask_primary(request).await else {
            return self.fallback.chat_stream(request).await;
        };
        let budget = self.budget(&probe);
        let ask: Ask<'a, P, ChatStream<'a>> = |model, request| model.chat_stream(request);
        let mut policy = self.primary_retry(request, ask, budget);
        let opened = retry::call(&mut policy).await;
        self.record_primary(probe, opened.as_ref().err(), (policy.calls, budget));
        match opened {
            Ok(stream) => Ok(stream),
            Err(error) => match self.triggers.on_failure(&*error) {
                Some(reason) if request.meter.request().is_ok() => {
                    let kind = classify(&*error).kind;
                    self.record_switch(request, (reason, kind), policy.calls);
                    self.fallback.chat_stream(request).await
                }
                _ => Err(error),
            },
        }
    }

    /// Announces the switch: why (the trigger, and the kind of failure it read) and after how
    /// many calls to the primary.
    fn record_switch(
        &self,
        request: &ChatRequest,
        (trigger, kind): (&'static str, ErrorKind),
        attempts: u32,
    ) {
        let event = Event::LlmFallback {
            from: self.primary.name().to_owned(),
            to: self.fallback.name().to_owned(),
            trigger,
            attempts,
            kind,
        };
        emit_to(event, [request.events.log(), self.events.as_ref()]);
    }
}

/// Counts the tokens of `answer`, which `model` gave and the fallback replaces, on the run's
/// meter (the next request the run makes is refused if they took it past a cap).
fn charge_discarded(request: &ChatRequest, model: &impl ChatModel, answer: &ChatResponse) {
    let estimate = || request.estimated_usage(Some(answer));
    let charged =
        (request.meter).answered(Answerer::asked(model.name()), answer.usage, estimate, true);
    if charged.first_missing {
        let event = Event::UsageMissing {
            model: model.name().to_owned(),
        };
        emit_to(event, [request.events.log(), None]);
    }
}

/// `answer`, saying which model gave it when the provider did not.
fn answered_by(mut answer: ChatResponse, model: &impl ChatModel) -> ChatResponse {
    if answer.model.is_none() {
        answer.model = Some(model.name().to_owned());
    }
    answer
}

/// Calling a failing primary again, as a policy of the retry loop: only what the triggers say
/// is worth waiting for on the primary (an overload, an outage, a rate limit within the caller's
/// patience) is retried, within `after` calls and the run's retry allowance; whatever ends it
/// goes to the triggers (a switch is not a retry, and spends nothing).
struct PrimaryRetry<'a, P, D, T> {
    primary: &'a P,
    request: &'a ChatRequest,
    retrier: Retrier<D>,
    foreground: bool,
    triggers: &'a Triggers,
    ask: Ask<'a, P, T>,
    /// Calls made to the primary.
    calls: u32,
    /// The wrapper's own log, besides the request's.
    events: Option<&'a Arc<EventLog>>,
}

/// How a request is put to a model: answered whole ([`ChatModel::chat`]) or opened as a stream
/// ([`ChatModel::chat_stream`]).
type Ask<'a, M, T> = fn(&'a M, &'a ChatRequest) -> BoxFuture<'a, Result<T, BoxError>>;

impl<'a, P: ChatModel, D: Iterator<Item = Duration>, T> Policy for PrimaryRetry<'a, P, D, T> {
    type Output = T;
    type Error = BoxError;

    /// Whether the primary answered in the end; a switch follows a primary that gave up.
    fn finished(&mut self, last: &BoxError, recovered: bool) {
        let kind = classify(&**last).kind;
        count_outcome(ModelLayer::FallbackModel, recovered, kind);
    }

    async fn call(&mut self) -> Result<T, BoxError> {
        self.calls += 1;
        (self.ask)(self.primary, self.request).await
    }

    async fn retry(&mut self, error: &BoxError) -> Step {
        let Some(server) = self.triggers.retry_primary(&**error) else {
            return Step::Stop(Stop::Never);
        };
        match self.retrier.after_failure(self.foreground, server) {
            Step::Wait(delay) if !self.request.may_ask_again() => {
                tracing::debug!(
                    ?delay,
                    "the run's allowance or caps refuse a retry: falling back"
                );
                Step::Stop(Stop::Exhausted)
            }
            Step::Wait(delay) => {
                let event = Event::LlmRetry {
                    layer: ModelLayer::FallbackModel,
                    attempt: self.calls,
                    delay,
                    kind: classify(&**error).kind,
                };
                emit_to(event, [self.request.events.log(), self.events]);
                Step::Wait(delay)
            }
            step => step,
        }
    }
}

impl<P: ChatModel, F: ChatModel> ChatModel for FallbackModel<P, F> {
    fn chat<'a>(
        &'a self,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChatResponse, BoxError>> {
        Box::pin(self.answer(request))
    }

    fn chat_stream<'a>(
        &'a self,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChatStream<'a>, BoxError>> {
        Box::pin(self.open(request))
    }

    fn name(&self) -> &str {
        self.primary.name()
    }

    fn provider_name(&self) -> Option<&str> {
        self.primary.provider_name()
    }
}
