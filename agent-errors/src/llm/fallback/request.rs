//! How a [`FallbackModel`] answers one request: the primary's circuit asked first, the primary
//! called and retried as its triggers allow, the switch to the fallback announced, and the
//! primary's one last call when the fallback fails while its circuit is open.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;

use super::FallbackModel;
use crate::classify::{ErrorKind, classify};
use crate::error::BoxError;
use crate::events::{Event, EventLog, ModelLayer, count_outcome, emit_to};
use crate::llm::circuit::{ModelCircuit, Pass, Probe};
use crate::llm::trigger::Triggers;
use crate::llm::{ChatModel, ChatRequest, ChatResponse};
use crate::retry::{self, Policy, Retrier, Step, Stop};
use crate::stream::ChatStream;
use crate::usage::Answerer;

impl<P: ChatModel, F: ChatModel> FallbackModel<P, F> {
    /// The primary asked `ask`, called again as the triggers allow. The budget is `after` calls
    /// to a failing primary; a caller off the foreground list is not worth a second one.
    fn primary_retry<'a, T>(
        &'a self,
        request: &'a ChatRequest,
        probe: Option<Probe<'a>>,
        ask: Ask<'a, P, T>,
    ) -> PrimaryRetry<'a, P, impl Iterator<Item = Duration> + use<'a, P, F, T>, T> {
        PrimaryRetry {
            primary: &self.primary,
            request,
            retrier: Retrier::new(self.backoff.clone().with_attempts(self.after).delays()),
            foreground: self.foreground.contains(&request.source),
            triggers: &self.triggers,
            ask,
            calls: 0,
            events: self.events.as_ref(),
            circuit: self.memory.circuit(),
            probe,
        }
    }

    /// Whether the primary may be called for `request`, as its circuit says: the probe this
    /// request holds, if it is the one; else the kind of failure that opened the circuit.
    async fn admit(&self, request: &ChatRequest) -> Result<Option<Probe<'_>>, ErrorKind> {
        let Some(circuit) = self.memory.circuit() else {
            return Ok(None);
        };
        match circuit.admit(|event| self.emit(request, event)).await {
            Pass::Closed => Ok(None),
            Pass::Probe(probe) => Ok(Some(probe)),
            Pass::Open(kind) => Err(kind),
        }
    }

    async fn answer(&self, request: &ChatRequest) -> Result<ChatResponse, BoxError> {
        let probe = match self.admit(request).await {
            Ok(probe) => probe,
            Err(kind) => {
                // The request the primary would have had is the fallback's: no more is counted.
                self.record_switch(request, ("circuit_open", kind), 0);
                let error = match self.fallback.chat(request).await {
                    Ok(answer) => return Ok(answered_by(answer, &self.fallback)),
                    Err(error) => error,
                };
                let answer = self.last_resort(request, error, |model, request| model.chat(request));
                return Ok(answered_by(answer.await?, &self.primary));
            }
        };
        let mut policy = self.primary_retry(request, probe, |model, request| model.chat(request));
        let (reason, kind) = match retry::call(&mut policy).await {
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
        let probe = match self.admit(request).await {
            Ok(probe) => probe,
            Err(kind) => {
                self.record_switch(request, ("circuit_open", kind), 0);
                return match self.fallback.chat_stream(request).await {
                    Ok(stream) => Ok(stream),
                    Err(error) => {
                        let ask = |model: &'a P, request| model.chat_stream(request);
                        self.last_resort(request, error, ask).await
                    }
                };
            }
        };
        let mut policy =
            self.primary_retry(request, probe, |model, request| model.chat_stream(request));
        match retry::call(&mut policy).await {
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

    /// The fallback failed, as the triggers name, while the primary's circuit is open: the
    /// primary is called once more before the request fails. An open circuit says where to
    /// go first, not that the primary may not be asked at all: a model call applies no effect,
    /// and where both models fail at random (an overloaded provider behind each) a request with
    /// one call left is better spent than given up. An answer is recorded on the circuit like
    /// any. Any other failure of the fallback, or caps that refuse another request, is the
    /// request's.
    async fn last_resort<'a, T>(
        &'a self,
        request: &'a ChatRequest,
        error: BoxError,
        ask: Ask<'a, P, T>,
    ) -> Result<T, BoxError> {
        if self.triggers.on_failure(&*error).is_none() || request.meter.request().is_err() {
            return Err(error);
        }
        tracing::debug!(
            "the fallback failed while the primary's circuit is open: asking the primary once"
        );
        // Its circuit is open, so the policy makes this one call and no retry.
        let mut policy = self.primary_retry(request, None, ask);
        retry::call(&mut policy).await
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
        self.emit(request, event);
    }

    /// Records `event` on the request's log and this wrapper's.
    fn emit(&self, request: &ChatRequest, event: Event) {
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
    /// The primary's circuit, told how each call went.
    circuit: Option<&'a ModelCircuit>,
    /// The half-open probe this request holds, spent by its first call.
    probe: Option<Probe<'a>>,
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
        let result = (self.ask)(self.primary, self.request).await;
        if let Some(circuit) = self.circuit {
            let failed = result.as_ref().err().map(|error| &**error);
            let failed = failed
                .filter(|error| self.triggers.on_failure(*error).is_some())
                .map(|error| classify(error).kind);
            let logs = [self.request.events.log(), self.events];
            circuit.record(failed, self.probe.take(), |event| emit_to(event, logs));
        }
        result
    }

    async fn retry(&mut self, error: &BoxError) -> Step {
        let Some(server) = self.triggers.retry_primary(&**error) else {
            return Step::Stop(Stop::Never);
        };
        if self.circuit.is_some_and(|circuit| !circuit.is_closed()) {
            // This failure (or another request's) opened the circuit: no more calls or waits.
            tracing::debug!("the primary's circuit is open: falling back");
            return Step::Stop(Stop::Exhausted);
        }
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
