//! The recovering model's transport: calls the wrapped models in turn, each retried under this
//! crate's classification, and hands the first whole answer back to rig as one frame.

use std::sync::Arc;

use rig_core::DynModel;
use rig_core::completion::{CompletionRequest, CompletionResponse};
use rig_core::driver::{Exchange, Opened, Opening, Transport};
use rig_core::error::ProviderError;
use rig_core::operation::Completion;

use super::wire::{Answer, RecoveringWire};
use crate::classify::{ErrorKind, classify};
use crate::events::{Event, ModelLayer, count_outcome, emit_to};
use crate::executor::RunContext;
use crate::llm::circuit::{Asked, ModelCircuits, circuit_key};
use crate::llm::trigger::Triggers;
use crate::retry::{RetrySchedule, retry_after_failure};

/// Why a chain of rig models moves on, as [`FallbackModel`](crate::llm::FallbackModel)'s
/// triggers name it: the chain moves on after any failure but an invalid request.
const ANY_FAILURE: Triggers = Triggers {
    overload: true,
    rate_limit: Some(std::time::Duration::MAX),
    outage: true,
    auth_or_config: true,
    bad_answer: false,
};

/// A probe of a model whose circuit was open: one call, no retries.
static ONE_CALL: std::sync::LazyLock<RetrySchedule> =
    std::sync::LazyLock::new(|| RetrySchedule::attempts(1).expect("1 is not zero"));

/// Calls the wrapped models in turn, each retried under our classification.
#[derive(Clone)]
pub(super) struct RecoveringTransport {
    pub(super) models: Arc<[DynModel<Completion>]>,
    pub(super) schedule: RetrySchedule,
    pub(super) run: Option<Arc<RunContext>>,
    pub(super) circuits: ModelCircuits,
    /// Each model's circuit key; none for a model whose name another model of the chain has
    /// too (their circuits could not be told apart).
    pub(super) keys: Arc<[Option<String>]>,
}

impl RecoveringTransport {
    /// The answer of the first model that gives one; the last failure when none does, or when a
    /// failure is one no other model could serve (an invalid request).
    async fn answer(
        &self,
        request: CompletionRequest,
    ) -> Result<CompletionResponse, ProviderError> {
        let mut models = self.models.iter().zip(self.keys.iter()).peekable();
        loop {
            let (model, key) = models.next().ok_or_else(no_model)?;
            let next = models.peek().map(|(next, _)| model_name(next));
            // The last model is asked whatever its circuit says: nobody else is left to answer.
            let asked = match (key, next) {
                (Some(key), Some(_)) => self.circuits.ask(key).await,
                _ => Asked::Yes,
            };
            let (probe, schedule) = match asked {
                Asked::Yes => (None, &self.schedule),
                Asked::Probe(probe) => (Some(probe), &*ONE_CALL),
                Asked::No => {
                    self.switch(model, next.unwrap_or_default(), "circuit_open", 0, None);
                    continue;
                }
            };
            let answered = self.retried(model, &request, schedule).await;
            let moves_on = |error: &ProviderError| classify(error).kind != ErrorKind::Validation;
            let well = answered.as_ref().err().is_none_or(|(error, _)| !moves_on(error));
            match (probe, key) {
                (Some(probe), _) => probe.record(well),
                (None, Some(key)) => self.circuits.record(key, well),
                (None, None) => {}
            }
            let (error, attempts) = match answered {
                Ok(response) => return Ok(response),
                Err(failed) => failed,
            };
            let Some(next) = next.filter(|_| moves_on(&error)) else {
                return Err(error);
            };
            let trigger = ANY_FAILURE.on_failure(&error).unwrap_or("failure");
            self.switch(model, next, trigger, attempts, Some(&error));
        }
    }

    /// Announces that the chain moves on from `model` to the model named `to`: after
    /// `attempts` calls failed with `error`, or without a call (its circuit is open).
    fn switch(
        &self,
        model: &DynModel<Completion>,
        to: &str,
        trigger: &'static str,
        attempts: u32,
        error: Option<&ProviderError>,
    ) {
        self.emit(Event::LlmFallback {
            from: model_name(model).to_owned(),
            to: to.to_owned(),
            trigger,
            attempts,
            kind: error.map_or(ErrorKind::Transient, |error| classify(error).kind),
        });
    }

    /// One model's answer, its retryable failures called again while the schedule (and the
    /// run's allowance, in a run) has a retry left; else its last failure and the calls made.
    async fn retried(
        &self,
        model: &DynModel<Completion>,
        request: &CompletionRequest,
        schedule: &RetrySchedule,
    ) -> Result<CompletionResponse, (ProviderError, u32)> {
        let first = match model.call(request.clone()).await {
            Ok(response) => return Ok(response),
            Err(first) => first,
        };
        let mut last = None;
        let allowance = self.run.as_ref().map(|run| Arc::clone(run.retries()));
        let delays = schedule.delays().map_while(move |delay| {
            let allowed = allowance.as_ref().is_none_or(|left| left.try_spend());
            allowed.then_some(delay)
        });
        let retried = retry_after_failure(
            delays,
            first,
            || model.call(request.clone()),
            |error| classify(error),
            |_, notice| {
                last = Some(notice.classification.kind);
                self.emit(Event::LlmRetry {
                    layer: ModelLayer::Rig,
                    attempt: notice.attempt,
                    delay: notice.delay,
                    kind: notice.classification.kind,
                });
            },
        )
        .await;
        match retried {
            Ok(response) => {
                if let Some(kind) = last {
                    count_outcome(ModelLayer::Rig, true, kind);
                }
                Ok(response)
            }
            Err(failure) => {
                count_outcome(ModelLayer::Rig, false, failure.classification.kind);
                Err((failure.error, failure.attempts))
            }
        }
    }

    /// Records `event` on the run's report, or, outside a run, traces and counts it.
    fn emit(&self, event: Event) {
        match &self.run {
            Some(run) => run.events().emit(event),
            None => emit_to(event, [None, None]),
        }
    }
}

/// The failure of a chain with no model: impossible, since a chain starts with one.
fn no_model() -> ProviderError {
    ProviderError::Provider("a recovering model with no model to call".to_owned())
}

impl Transport<RecoveringWire> for RecoveringTransport {
    fn send(&self, request: CompletionRequest, _exchange: Exchange) -> Opening<Answer> {
        let transport = self.clone();
        Opening::new(async move {
            let response = transport.answer(request).await?;
            let request_id = response.provider_request_id.clone();
            Ok(
                Opened::new(futures_util::stream::iter([Ok(Answer(Box::new(response)))]))
                    .with_request_id(request_id),
            )
        })
    }
}

/// Each model's circuit key, none where two models of the chain have the same name.
pub(super) fn circuit_keys(models: &[DynModel<Completion>]) -> Arc<[Option<String>]> {
    let names: Vec<&str> = models.iter().map(model_name).collect();
    let unique = |name: &str| names.iter().filter(|other| **other == name).count() == 1;
    names
        .iter()
        .map(|name| unique(name).then(|| circuit_key(name)))
        .collect()
}

/// How a model is named in events: the model it addresses, else its provider.
pub(super) fn model_name(model: &DynModel<Completion>) -> &str {
    model.id().unwrap_or_else(|| model.name())
}
