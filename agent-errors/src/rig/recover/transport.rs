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
use crate::events::{Event, ModelLayer, count_outcome};
use crate::executor::RunContext;
use crate::llm::circuit::{ModelCircuit, Pass, Probe};
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

/// Calls the wrapped models in turn, each retried under our classification.
#[derive(Clone)]
pub(super) struct RecoveringTransport {
    pub(super) models: Arc<[DynModel<Completion>]>,
    /// The circuit on each model, beside it; none on the last, which nothing falls back from.
    pub(super) circuits: Arc<[Option<ModelCircuit>]>,
    pub(super) schedule: RetrySchedule,
    pub(super) run: Arc<RunContext>,
}

/// How one model of the chain did.
#[expect(
    clippy::large_enum_variant,
    reason = "made once per model tried and matched at once, as the `Result` it replaces"
)]
enum Tried {
    Answered(CompletionResponse),
    /// Its last failure and the calls it was given.
    Failed(ProviderError, u32),
    /// Its circuit was open: not called. The kind of failure that opened it.
    Skipped(ErrorKind),
}

impl RecoveringTransport {
    /// The answer of the first model that gives one; the last failure when none does, or when a
    /// failure is one no other model could serve (an invalid request).
    async fn answer(
        &self,
        request: CompletionRequest,
    ) -> Result<CompletionResponse, ProviderError> {
        let mut models = self.models.iter().zip(self.circuits.iter()).peekable();
        let mut skipped = Vec::new();
        loop {
            let (model, circuit) = models.next().ok_or_else(no_model)?;
            let (trigger, attempts, kind) =
                match self.tried(model, circuit.as_ref(), &request).await {
                    Tried::Answered(response) => return Ok(response),
                    Tried::Skipped(kind) => {
                        skipped.push((model, circuit.as_ref()));
                        ("circuit_open", 0, kind)
                    }
                    Tried::Failed(error, _) if models.peek().is_none() => {
                        return self.last_resort(&skipped, error, &request).await;
                    }
                    Tried::Failed(error, attempts) => match classify(&error).kind {
                        ErrorKind::Validation => return Err(error),
                        kind => {
                            let trigger = ANY_FAILURE.on_failure(&error).unwrap_or("failure");
                            (trigger, attempts, kind)
                        }
                    },
                };
            // A skipped model always has a next: the last has no circuit.
            let (next, _) = models.peek().ok_or_else(no_model)?;
            let (from, to) = (model_name(model).to_owned(), model_name(next).to_owned());
            self.emit(Event::LlmFallback {
                from,
                to,
                trigger,
                attempts,
                kind,
            });
        }
    }

    /// The chain's last model failed: each model skipped for its open circuit gets one call,
    /// first to last, before the request fails. An open circuit says where a request goes
    /// first, not that the model is never asked: a model call applies no effect, and where
    /// every model fails at random a call left is better spent than given up. An invalid
    /// request, which no model could serve, fails at once.
    async fn last_resort(
        &self,
        skipped: &[(&DynModel<Completion>, Option<&ModelCircuit>)],
        error: ProviderError,
        request: &CompletionRequest,
    ) -> Result<CompletionResponse, ProviderError> {
        if skipped.is_empty() || classify(&error).kind == ErrorKind::Validation {
            return Err(error);
        }
        let mut last = error;
        for (model, circuit) in skipped {
            match self.call(model, *circuit, None, request).await {
                Ok(response) => return Ok(response),
                Err(error) => last = error,
            }
        }
        Err(last)
    }

    /// One model's turn: skipped while its circuit is open, else [`retried`](Self::retried)
    /// (a single probe call when the circuit is half-open).
    async fn tried(
        &self,
        model: &DynModel<Completion>,
        circuit: Option<&ModelCircuit>,
        request: &CompletionRequest,
    ) -> Tried {
        let probe = match circuit {
            None => None,
            Some(circuit) => match circuit.admit(|event| self.emit(event)).await {
                Pass::Closed => None,
                Pass::Probe(probe) => Some(probe),
                Pass::Open(kind) => return Tried::Skipped(kind),
            },
        };
        match self.retried(model, circuit, probe, request).await {
            Ok(response) => Tried::Answered(response),
            Err((error, attempts)) => Tried::Failed(error, attempts),
        }
    }

    /// One call of `model`, told to its circuit: any failure but an invalid request counts.
    async fn call(
        &self,
        model: &DynModel<Completion>,
        circuit: Option<&ModelCircuit>,
        probe: Option<Probe<'_>>,
        request: &CompletionRequest,
    ) -> Result<CompletionResponse, ProviderError> {
        let result = model.call(request.clone()).await;
        if let Some(circuit) = circuit {
            let failed = (result.as_ref().err().map(|error| classify(error).kind))
                .filter(|kind| *kind != ErrorKind::Validation);
            circuit.record(failed, probe, |event| self.emit(event));
        }
        result
    }

    /// One model's answer, its retryable failures called again while the schedule (and the
    /// run's allowance, in a run) has a retry left and its circuit stays closed; else its last
    /// failure and the calls made.
    async fn retried(
        &self,
        model: &DynModel<Completion>,
        circuit: Option<&ModelCircuit>,
        probe: Option<Probe<'_>>,
        request: &CompletionRequest,
    ) -> Result<CompletionResponse, (ProviderError, u32)> {
        let first = match self.call(model, circuit, probe, request).await {
            Ok(response) => return Ok(response),
            Err(first) => first,
        };
        let mut last = None;
        let allowance = Arc::clone(self.run.retries());
        // An open circuit (this model's failures, or another request's) ends the retries first,
        // so the run's allowance is not spent on a call that is not made.
        let closed = move || circuit.is_none_or(ModelCircuit::is_closed);
        let delays = (self.schedule.delays())
            .map_while(move |delay| (closed() && allowance.try_spend()).then_some(delay));
        let retried = retry_after_failure(
            delays,
            first,
            || self.call(model, circuit, None, request),
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

    /// Records `event` on the run's report.
    fn emit(&self, event: Event) {
        self.run.events().emit(event);
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

/// How a model is named in events: the model it addresses, else its provider.
pub(super) fn model_name(model: &DynModel<Completion>) -> &str {
    model.id().unwrap_or_else(|| model.name())
}
