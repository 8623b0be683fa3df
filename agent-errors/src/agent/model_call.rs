//! One model turn: ask the model (streaming when the run streams), judge its answer, and let
//! `on_llm_error` decide about a failure; retries stay inside the turn.

use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;

use super::counts::Counts;
use super::stream;
use super::turn;
use super::{AgentInner, AgentOutput, RunError};
use crate::chat::{ChatRequest, ChatResponse};
use crate::classify::server_delay;
use crate::events::Event;
use crate::executor::{RunContext, ToolPanic};
use crate::llm::{LlmErrorDecision, MAX_RETRY_AFTER};
use crate::retry::{RetrySchedule, Step, decide, sleep};

/// A model turn: a response to act on, or the output `on_llm_error` chose instead.
pub(super) enum Turn<O> {
    Response(ChatResponse),
    RespondWith(O),
}

impl<O> Turn<O> {
    pub(super) fn response(&self) -> Option<&ChatResponse> {
        match self {
            Turn::Response(response) => Some(response),
            Turn::RespondWith(_) => None,
        }
    }
}

/// A panic in user code the loop called, as the run's error.
fn callback_panicked(callback: &'static str, payload: Box<dyn std::any::Any + Send>) -> RunError {
    let message = ToolPanic::from_payload(payload).message;
    let message = crate::sanitize::scrub(&message, crate::sanitize::DEFAULT_MAX_CHARS);
    tracing::error!(callback, %message, "user code panicked; the run ends");
    RunError::CallbackPanicked { callback, message }
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
        let mut attempt = 1;
        loop {
            counts.model_calls += 1;
            // The model is user code: a panic in `chat` (before or inside its future) ends the
            // run with an error that says so instead of unwinding through `run`.
            let asked =
                AssertUnwindSafe(stream::ask(&*self.model, request, counts.deltas.as_ref()))
                    .catch_unwind();
            let result = tokio::select! {
                biased;
                () = cancellation.cancelled() => return Err(RunError::Cancelled),
                result = asked => result.map_err(|p| callback_panicked("ChatModel::chat", p))?,
            };
            let result = result.and_then(|response| turn::judge(response, &mut counts.usage));
            let error = match result {
                Ok(response) => return Ok(Turn::Response(response)),
                Err(error) => error,
            };
            let decision = match &self.llm_error {
                Some(handler) => {
                    std::panic::catch_unwind(AssertUnwindSafe(|| handler(error.as_ref(), attempt)))
                        .map_err(|p| callback_panicked("on_llm_error", p))?
                }
                None => LlmErrorDecision::Rethrow,
            };
            match decision {
                LlmErrorDecision::Rethrow => return Err(RunError::Model(error)),
                LlmErrorDecision::RespondWith(output) => {
                    let error = crate::redact::redact(&error.to_string()).into_owned();
                    tracing::info!(attempt, %error, "on_llm_error responded in the model's place");
                    return Ok(Turn::RespondWith(output));
                }
                LlmErrorDecision::Retry {
                    max_attempts,
                    initial_backoff,
                } => {
                    // The handler chose to retry: that is the retryability verdict. The handler may
                    // answer differently each time, so its schedule is read afresh per failure.
                    let schedule = RetrySchedule::new(max_attempts)
                        .with_initial(initial_backoff)
                        .with_jitter(0.0);
                    let computed = schedule.delays().nth(attempt as usize - 1);
                    let server = server_delay(error.as_ref(), MAX_RETRY_AFTER);
                    let Step::Wait(delay) = decide(true, computed, server, None) else {
                        return Err(RunError::Model(error));
                    };
                    ctx.events().emit(Event::LlmRetry { attempt, delay });
                    if let Some(deltas) = &counts.deltas {
                        deltas.turn_restarted(counts.turns, attempt).await;
                    }
                    tokio::select! {
                        biased;
                        () = cancellation.cancelled() => return Err(RunError::Cancelled),
                        () = sleep(delay) => {}
                    }
                    attempt += 1;
                }
            }
        }
    }
}
