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
    pub(super) schedule: RetrySchedule,
    pub(super) run: Arc<RunContext>,
}

impl RecoveringTransport {
    /// The answer of the first model that gives one; the last failure when none does, or when a
    /// failure is one no other model could serve (an invalid request).
    async fn answer(
        &self,
        request: CompletionRequest,
    ) -> Result<CompletionResponse, ProviderError> {
        let mut models = self.models.iter().peekable();
        loop {
            let model = models.next().ok_or_else(no_model)?;
            let (error, attempts) = match self.retried(model, &request).await {
                Ok(response) => return Ok(response),
                Err(failed) => failed,
            };
            let next = models
                .peek()
                .filter(|_| classify(&error).kind != ErrorKind::Validation);
            let Some(next) = next else {
                return Err(error);
            };
            let (from, to) = (model_name(model).to_owned(), model_name(next).to_owned());
            self.emit(Event::LlmFallback {
                from,
                to,
                trigger: ANY_FAILURE.on_failure(&error).unwrap_or("failure"),
                attempts,
                kind: classify(&error).kind,
            });
        }
    }

    /// One model's answer, its retryable failures called again while the schedule (and the
    /// run's allowance, in a run) has a retry left; else its last failure and the calls made.
    async fn retried(
        &self,
        model: &DynModel<Completion>,
        request: &CompletionRequest,
    ) -> Result<CompletionResponse, (ProviderError, u32)> {
        let first = match model.call(request.clone()).await {
            Ok(response) => return Ok(response),
            Err(first) => first,
        };
        let mut last = None;
        let allowance = Arc::clone(self.run.retries());
        let delays =
            (self.schedule.delays()).map_while(move |delay| allowance.try_spend().then_some(delay));
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
