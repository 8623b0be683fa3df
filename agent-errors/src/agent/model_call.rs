//! One model turn: ask the model (streaming when the run streams), judge its answer, and let
//! `on_llm_error` decide about a failure; retries stay inside the turn.

use std::future::poll_fn;
use std::ops::ControlFlow;
use std::panic::AssertUnwindSafe;
use std::pin::{Pin, pin};
use std::task::Poll;
use std::time::Duration;

use futures_util::FutureExt;
use serde::{Deserialize, Serialize};

use super::counts::Counts;
use super::{AgentInner, AgentOutput, RunError, call_ids, stream, turn};
use crate::chat::{ChatRequest, ChatResponse};
use crate::classify::{HttpError, server_delay};
use crate::error::BoxError;
use crate::events::{Event, ModelLayer, count_outcome};
use crate::executor::{Cancellation, RunContext, ToolPanic, kept_step};
use crate::llm::{LlmErrorDecision, MAX_RETRY_AFTER, cannot_succeed_on_retry};
use crate::retry::{self, Policy, RetrySchedule, Step, Stop, decide};
use crate::usage::Answerer;

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
        let mut policy = OnLlmError {
            agent: self,
            ctx,
            request,
            counts,
            attempt: 1,
            ended: None,
        };
        let turn = {
            // Pinned where it is made: handed over by value, the turn's future would be copied.
            let turn = pin!(retry::call(&mut policy));
            unless_cancelled(cancellation, turn).await
        };
        let Some(turn) = turn else {
            return Err(RunError::Cancelled);
        };
        match turn {
            Ok(turn) => turn,
            Err(error) => policy
                .ended
                .take()
                .unwrap_or_else(|| Err(RunError::Model(super::ModelFailure::new(error)))),
        }
    }
}

/// `turn`, or `None` when `cancellation` fires first (checked before each poll of the turn).
/// A turn that is ready on its first poll (a model answering without waiting) is not made to
/// register a waiter on the cancellation, which takes its lock twice and, for a run's default
/// handle, would make its token.
async fn unless_cancelled<F: Future>(
    cancellation: &Cancellation,
    mut turn: Pin<&mut F>,
) -> Option<F::Output> {
    if cancellation.is_cancelled() {
        return None;
    }
    if let Poll::Ready(done) = poll_fn(|cx| Poll::Ready(turn.as_mut().poll(cx))).await {
        return Some(done);
    }
    tokio::select! {
        biased;
        () = cancellation.cancelled() => None,
        done = turn => Some(done),
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

    fn finished(&mut self, last: &BoxError, recovered: bool) {
        let kind = crate::classify::classify(&**last).kind;
        count_outcome(ModelLayer::OnLlmError, recovered, kind);
    }

    async fn call(&mut self) -> Result<Self::Output, BoxError> {
        if let Err(capped) = self.counts.may_ask() {
            return Ok(Err(capped));
        }
        self.counts.model_calls += 1;
        // The model is user code: a panic in `chat` (before or inside its future) ends the
        // run with an error that says so instead of unwinding through `run`.
        // The output policy's fallback, once it took over, answers in the agent model's place.
        // (A clone of `None` for a run without one: no reference count is touched.)
        let fallback = self.counts.model.clone();
        let model = fallback.as_deref().unwrap_or(&*self.agent.model);
        let (request, deltas) = (self.request, self.counts.deltas.as_ref());
        // Made where each branch awaits it: made once before the branches, the ask's future
        // would be copied into the one that takes it.
        let ask = || AssertUnwindSafe(stream::ask(model, request, deltas)).catch_unwind();
        let journal = self.ctx.journal();
        let asked = if journal.replays() {
            // A step of the engine's journal; boxed: a request asked as it is must not carry
            // this future's space.
            let (keep, read) = (KeptModelCall::of, KeptModelCall::into_asked);
            let step = kept_step(journal, "model".to_owned(), ask(), keep, read);
            match Box::pin(step).await {
                Some(asked) => asked,
                // The engine could not keep the step: the run stops here.
                None => return Ok(Err(RunError::Cancelled)),
            }
        } else {
            ask().await
        };
        let result = match asked {
            Ok(result) => result,
            Err(panic) => return Ok(Err(callback_panicked("ChatModel::chat", panic))),
        };
        match &result {
            // A run without caps across the run has no meter to charge.
            Ok(_) if !self.ctx.meter().is_metered() => {}
            Ok(response) => {
                let estimate = || request.estimated_usage(Some(response));
                let model = Answerer {
                    asked: model.name(),
                    said: response.model.as_deref(),
                };
                let charged = (self.counts).answered(self.ctx, model, response.usage, estimate);
                if let Err(capped) = charged {
                    return Ok(Err(capped));
                }
            }
            Err(_) => {
                // A model wrapper's retry or fallback inside this call was refused by a cap.
                if let Some(capped) = self.ctx.meter().exceeded() {
                    return Ok(Err(RunError::UsageLimit(capped)));
                }
            }
        }
        let judged = result.and_then(|response| turn::judge(response, &mut self.counts.usage));
        match judged {
            Ok(mut response) => {
                call_ids::make_distinct(&request.messages, &mut response.tool_calls);
                Ok(Ok(Turn::Response(response)))
            }
            Err(error) => Err(error),
        }
    }

    async fn retry(&mut self, error: &BoxError) -> Step {
        let Some(handler) = &self.agent.llm_error else {
            return Step::Stop(Stop::Never);
        };
        let attempt = self.attempt;
        let decision = match std::panic::catch_unwind(AssertUnwindSafe(|| {
            handler(error.as_ref(), attempt)
        })) {
            Ok(Ok(decision)) => decision,
            Ok(Err(zero)) => {
                // A retry of no attempts is a mistake in the handler, not a way to say
                // "give up": read as `Rethrow`, it would hide that the retry never happens.
                tracing::error!(attempt, error = %zero, "on_llm_error returned a Retry of zero attempts; the run ends");
                self.ended = Some(Err(RunError::InvalidLlmDecision(zero)));
                return Step::Stop(Stop::Never);
            }
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
            self.ctx.events().emit(Event::LlmRetry {
                layer: ModelLayer::OnLlmError,
                attempt,
                delay,
                kind: crate::classify::classify(&**error).kind,
            });
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

    fn sleeper(&self) -> crate::retry::Sleep {
        self.ctx.sleeper()
    }
}

type Asked = std::thread::Result<Result<ChatResponse, BoxError>>;

/// A model request's outcome as a journal that replays the run keeps it: on replay it comes
/// back and the model is not asked again.
#[derive(Debug, Serialize, Deserialize)]
enum KeptModelCall {
    Answered(ChatResponse),
    /// The request failed: an HTTP failure keeps its status and `Retry-After`, so the retry
    /// decisions read it as they read the live error.
    Failed {
        message: String,
        status: Option<u16>,
        retry_after_secs: Option<u64>,
    },
    /// `ChatModel::chat` panicked, with this message.
    Panicked(String),
}

impl KeptModelCall {
    fn of(asked: Asked) -> KeptModelCall {
        let error = match asked {
            Ok(Ok(response)) => return KeptModelCall::Answered(response),
            Ok(Err(error)) => error,
            Err(panic) => return KeptModelCall::Panicked(ToolPanic::from_payload(panic).message),
        };
        let http = crate::classify::find_in_chain::<HttpError>(error.as_ref());
        let retry_after_secs = server_delay(error.as_ref(), Duration::MAX)
            .map(|delay| delay.as_secs_f64().ceil() as u64);
        KeptModelCall::Failed {
            // Redacted: the journal is stored outside the process.
            message: crate::redact::redact(&error.to_string()).into_owned(),
            status: http.map(HttpError::status),
            retry_after_secs,
        }
    }

    /// The request's outcome as the run reads it: a failure as the retry decisions read it.
    fn into_asked(self) -> Asked {
        let (message, status, retry_after) = match self {
            KeptModelCall::Answered(response) => return Ok(Ok(response)),
            KeptModelCall::Panicked(message) => return Err(Box::new(message)),
            KeptModelCall::Failed {
                message,
                status,
                retry_after_secs,
            } => (message, status, retry_after_secs),
        };
        let Some(status) = status else {
            return Ok(Err(message.into()));
        };
        let error = HttpError::new(status, message);
        Ok(Err(match retry_after {
            Some(secs) => Box::new(error.with_header("retry-after", secs.to_string())),
            None => Box::new(error),
        }))
    }
}
