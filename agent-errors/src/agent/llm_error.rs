//! `on_llm_error`: what the loop does when a model call fails.

use std::error::Error;
use std::ops::ControlFlow;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;

use super::run::{Counts, Turn, callback_panicked};
use super::{AgentInner, AgentOutput, RunError, stream, turn};
use crate::chat::ChatRequest;
use crate::classify::server_delay;
use crate::error::BoxError;
use crate::events::Event;
use crate::executor::RunContext;
use crate::llm::{LlmErrorDecision, MAX_RETRY_AFTER, cannot_succeed_on_retry};
use crate::retry::{self, Policy, RetrySchedule, Step, Stop, ZeroAttempts, decide};

/// The error a handler is shown: the model's own error, downcastable to its concrete type.
pub type ModelError = dyn Error + Send + Sync + 'static;

/// What an `on_llm_error` handler may return: a decision, or the `Result` that
/// [`LlmErrorDecision::retry`] gives, so `|_, _| LlmErrorDecision::retry(3, ms(500))` works as is.
pub trait IntoLlmDecision<O> {
    /// The decision. `Err` (a `Retry` built with zero attempts) is treated as `Rethrow`.
    fn into_decision(self) -> Result<LlmErrorDecision<O>, ZeroAttempts>;
}

impl<O> IntoLlmDecision<O> for LlmErrorDecision<O> {
    fn into_decision(self) -> Result<LlmErrorDecision<O>, ZeroAttempts> {
        Ok(self)
    }
}

impl<O> IntoLlmDecision<O> for Result<LlmErrorDecision<O>, ZeroAttempts> {
    fn into_decision(self) -> Result<LlmErrorDecision<O>, ZeroAttempts> {
        self
    }
}

pub(crate) type LlmErrorHandler<O> =
    Arc<dyn Fn(&ModelError, u32) -> LlmErrorDecision<O> + Send + Sync + 'static>;

pub(crate) fn erase_handler<O, F, R>(handler: F) -> LlmErrorHandler<O>
where
    F: Fn(&ModelError, u32) -> R + Send + Sync + 'static,
    R: IntoLlmDecision<O>,
{
    Arc::new(
        move |error, attempt| match handler(error, attempt).into_decision() {
            Ok(decision) => decision,
            Err(zero) => {
                tracing::error!(error = %zero, "on_llm_error returned an invalid Retry; rethrowing");
                LlmErrorDecision::Rethrow
            }
        },
    )
}

impl<O: AgentOutput> AgentInner<O> {
    /// One model turn with `on_llm_error` applied: retries stay inside the turn.
    pub(super) async fn call_model(
        &self,
        ctx: &RunContext,
        request: &ChatRequest,
        counts: &mut Counts,
    ) -> Result<Turn<O>, RunError> {
        let cancellation = ctx.cancellation();
        let mut policy = OnLlmError {
            agent: self,
            ctx,
            request,
            counts,
            attempt: 1,
            ended: None,
        };
        let turn = tokio::select! {
            biased;
            () = cancellation.cancelled() => return Err(RunError::Cancelled),
            turn = retry::call(&mut policy) => turn,
        };
        match turn {
            Ok(turn) => turn,
            Err(error) => policy.ended.take().unwrap_or(Err(RunError::Model(error))),
        }
    }
}

/// `on_llm_error` as the outermost policy of the retry loop around a model call (see the
/// retry module's docs for what runs inside it).
struct OnLlmError<'a, O: AgentOutput> {
    agent: &'a AgentInner<O>,
    ctx: &'a RunContext,
    request: &'a ChatRequest,
    counts: &'a mut Counts,
    /// The call being made (1-based): what the handler is told failed.
    attempt: u32,
    /// How the turn ends when the handler ended it (an output in the model's place, or its
    /// panic) rather than by the model's error.
    ended: Option<Result<Turn<O>, RunError>>,
}

impl<O: AgentOutput> Policy for OnLlmError<'_, O> {
    type Output = Result<Turn<O>, RunError>;
    type Error = BoxError;

    async fn call(&mut self) -> Result<Self::Output, BoxError> {
        self.counts.model_calls += 1;
        // The model is user code: a panic in `chat` (before or inside its future) ends the
        // run with an error that says so instead of unwinding through `run`.
        let model = &*self.agent.model;
        let asked = AssertUnwindSafe(stream::ask(
            model,
            self.request,
            self.counts.deltas.as_ref(),
        ))
        .catch_unwind();
        let result = match asked.await {
            Ok(result) => result,
            Err(panic) => return Ok(Err(callback_panicked("ChatModel::chat", panic))),
        };
        match result.and_then(|response| turn::judge(response, &mut self.counts.usage)) {
            Ok(response) => Ok(Ok(Turn::Response(response))),
            Err(error) => Err(error),
        }
    }

    async fn retry(&mut self, error: &BoxError) -> Step {
        let Some(handler) = &self.agent.llm_error else {
            return Step::Stop(Stop::Never);
        };
        let attempt = self.attempt;
        let decision =
            match std::panic::catch_unwind(AssertUnwindSafe(|| handler(error.as_ref(), attempt))) {
                Ok(decision) => decision,
                Err(panic) => {
                    self.ended = Some(Err(callback_panicked("on_llm_error", panic)));
                    return Step::Stop(Stop::Never);
                }
            };
        let (max_attempts, initial_backoff) = match decision {
            LlmErrorDecision::Rethrow => return Step::Stop(Stop::Never),
            LlmErrorDecision::RespondWith(output) => {
                let error = crate::redact::redact(&error.to_string()).into_owned();
                tracing::info!(attempt, %error, "on_llm_error responded in the model's place");
                self.ended = Some(Ok(Turn::RespondWith(output)));
                return Step::Stop(Stop::Never);
            }
            LlmErrorDecision::Retry { .. } if cannot_succeed_on_retry(&**error) => {
                tracing::debug!(
                    attempt,
                    "on_llm_error said retry, but calling again cannot help"
                );
                return Step::Stop(Stop::Never);
            }
            LlmErrorDecision::Retry {
                max_attempts,
                initial_backoff,
            }
            | LlmErrorDecision::RetryRegardless {
                max_attempts,
                initial_backoff,
            } => (max_attempts, initial_backoff),
        };
        // The handler may answer differently each time, so its schedule is read afresh per
        // failure.
        let schedule = RetrySchedule::new(max_attempts)
            .with_initial(initial_backoff)
            .with_jitter(0.0);
        let computed = schedule.delays().nth(attempt as usize - 1);
        let server = server_delay(error.as_ref(), MAX_RETRY_AFTER);
        let step = decide(true, computed, server, None);
        if let Step::Wait(delay) = step {
            if !self.ctx.retries().try_spend() {
                tracing::debug!(attempt, "the run's retry allowance is spent");
                return Step::Stop(Stop::Exhausted);
            }
            self.ctx.events().emit(Event::LlmRetry { attempt, delay });
        }
        step
    }

    async fn before_sleep(&mut self, _delay: Duration) -> ControlFlow<Self::Output> {
        if let Some(deltas) = &self.counts.deltas {
            deltas.turn_restarted(self.counts.turns, self.attempt).await;
        }
        ControlFlow::Continue(())
    }

    async fn before_call(&mut self) -> ControlFlow<Self::Output> {
        self.attempt += 1;
        ControlFlow::Continue(())
    }
}
