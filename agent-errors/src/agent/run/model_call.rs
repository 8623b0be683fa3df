//! One model turn: ask the model (streaming when the run streams), judge its answer, and let
//! `on_llm_error` decide about a failure; retries stay inside the turn.
//!
//! What one model turn's answer means before the loop acts on it: a cut-off answer is a failed
//! call, a refusal ends the run, and every answer's usage counts.
//!
//! One id per call in a run. A call's id names it everywhere after the model asked for it: its
//! result, its idempotency key (the run's id and the call's), its place in a checkpoint, a
//! person's answer. Some servers number calls per turn, or give two calls of one turn one id;
//! a call whose id an earlier call of the run already has is given one of its own before
//! anything acts on it, or two payments would be sent under one idempotency key and the
//! service would make only the first.

use super::Run;
use crate::agent::counts::Counts;
use crate::agent::stream::DeltaSender;
use crate::agent::{AgentInner, AgentOutput, RunError, stream};
use crate::chat::{ChatRequest, ChatResponse};
use crate::chat::{FinishReason, Truncated};
use crate::chat::{Message, ToolCall};
use crate::classify::{HttpError, server_delay};
use crate::error::BoxError;
use crate::escapes::Visible;
use crate::events::{Event, ModelLayer, count_outcome};
use crate::executor::{Cancellation, RunContext, ToolPanic};
use crate::llm::{LlmErrorDecision, MAX_RETRY_AFTER, cannot_succeed_on_retry};
use crate::model::ChatModel;
use crate::retry::{self, Policy, RetrySchedule, Step, Stop, decide};
use crate::usage::Answerer;
use crate::usage::Usage;
use futures_util::FutureExt;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::future::poll_fn;
use std::ops::ControlFlow;
use std::panic::AssertUnwindSafe;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

/// A model turn: a response to act on, or the output `on_llm_error` chose instead.
pub(in crate::agent) enum Turn<O> {
    Response(ChatResponse),
    RespondWith(O),
}

impl<O> Turn<O> {
    pub(in crate::agent) fn response(&self) -> Option<&ChatResponse> {
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
    tracing::error!(callback, message = %Visible::of(&message), "user code panicked; the run ends");
    RunError::CallbackPanicked { callback, message }
}

impl<O: AgentOutput> Run<'_, O> {
    /// One model turn with `on_llm_error` applied: retries stay inside the turn.
    pub(in crate::agent) async fn call_model(&mut self) -> Result<Turn<O>, RunError> {
        let cancellation = self.ctx.cancellation();
        let mut policy = OnLlmError {
            agent: self.agent,
            ctx: &self.ctx,
            request: &self.request,
            counts: &mut self.counts,
            deltas: self.deltas.as_ref(),
            fallback: self.fallback.as_deref(),
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
                .unwrap_or_else(|| Err(RunError::Model(crate::agent::ModelFailure::new(error)))),
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
    /// Where the run streams the model's answers, if anywhere.
    deltas: Option<&'a DeltaSender>,
    /// The output policy's fallback, once it took over: it answers in the agent model's place.
    fallback: Option<&'a dyn ChatModel>,
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
        let model = self.fallback.unwrap_or(&*self.agent.model);
        let (request, deltas) = (self.request, self.deltas);
        // Handed to the journal to make: made here, the ask's future would be moved into the
        // step that awaits it.
        let ask = || AssertUnwindSafe(stream::ask(model, request, deltas)).catch_unwind();
        let kept = (KeptModelCall::of, KeptModelCall::into_asked);
        let lost = || Err(Box::new(StepNotKept) as Box<dyn std::any::Any + Send>);
        let step = self
            .ctx
            .journal()
            .run_step(|| "model".to_owned(), ask, kept, lost);
        let result = match step.await {
            Ok(result) => result,
            // The journal could not keep the step: the run stops here.
            Err(lost) if lost.is::<StepNotKept>() => return Ok(Err(RunError::Cancelled)),
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
        let judged = result.and_then(|response| judge(response, &mut self.counts.usage));
        match judged {
            Ok(mut response) => {
                // A turn past the per-turn cap is refused whole when its calls arrive: no call
                // of it is looked at before, its ids included.
                if !self.counts.turn_too_long(response.tool_calls.len()) {
                    make_distinct(&request.messages, &mut response.tool_calls);
                }
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
                tracing::info!(attempt, error = %Visible::of(&error), "on_llm_error responded in the model's place");
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
        if let Some(deltas) = self.deltas {
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

/// What a model request's step comes back as when its journal could not keep it: in the place
/// of a panic's payload (no `chat` can panic with this private type), so the run stops as
/// cancelled rather than as a panic, and a step run as it is carries no `Option` around it.
struct StepNotKept;

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

/// Counts the answer's usage, and turns an answer cut off at its token budget into the call's
/// error, so `on_llm_error` decides about it and it is never taken for a finished answer.
pub(super) fn judge(response: ChatResponse, usage: &mut Usage) -> Result<ChatResponse, BoxError> {
    if let Some(used) = response.usage {
        *usage += used;
    }
    if response.finish_reason == Some(FinishReason::Length) {
        return Err(Box::new(Truncated { partial: response }));
    }
    Ok(response)
}

/// The run's end when the model declined to answer or the provider withheld the answer.
pub(super) fn refusal(response: &ChatResponse) -> Option<RunError> {
    match &response.finish_reason {
        Some(reason @ (FinishReason::Refusal | FinishReason::ContentFilter)) => {
            Some(RunError::Refused {
                text: crate::redact::redact(response.text.as_deref().unwrap_or_default())
                    .into_owned(),
                reason: reason.clone(),
            })
        }
        _ => None,
    }
}

/// Gives each of `calls` (a turn's, in order) an id no earlier call of `transcript` or of the
/// turn has: a repeated id gets `_2`, `_3`, ... (the first free one), so it stays in the
/// letters, digits and `_` every provider accepts. Ids that are already distinct are kept.
///
/// Linear in the calls of the turn and of the transcript, however the ids repeat: the ids
/// taken and the ids still ahead in the turn are hashed, and each base id remembers the last
/// suffix it tried (a suffix passed over is taken for good: by a call before, or by the call
/// ahead that holds it, which keeps it or is renamed because it is taken). A turn with no calls,
/// or with few calls in a short transcript, is first compared pairwise (a bounded number of
/// comparisons), and left as it is when no id repeats.
pub(super) fn make_distinct(transcript: &[Message], calls: &mut [ToolCall]) {
    if calls.is_empty() || few_and_distinct(transcript, calls) {
        return;
    }
    let earlier = earlier_calls(transcript);
    let mut taken: HashSet<Arc<str>> = earlier.map(|call| Arc::clone(&call.id)).collect();
    let mut ahead: HashMap<Arc<str>, usize> = HashMap::new();
    for call in calls.iter() {
        *ahead.entry(Arc::clone(&call.id)).or_default() += 1;
    }
    let mut next_suffix: HashMap<Arc<str>, u64> = HashMap::new();
    for call in calls.iter_mut() {
        if let Some(left) = ahead.get_mut(&call.id) {
            *left -= 1;
            if *left == 0 {
                ahead.remove(&call.id);
            }
        }
        if taken.insert(Arc::clone(&call.id)) {
            continue;
        }
        let n = next_suffix.entry(Arc::clone(&call.id)).or_insert(2);
        let free = loop {
            let id = format!("{}_{n}", call.id);
            *n += 1;
            if !taken.contains(id.as_str()) && !ahead.contains_key(id.as_str()) {
                break Arc::<str>::from(id);
            }
        };
        taken.insert(Arc::clone(&free));
        call.id = free;
    }
}

/// The comparisons [`few_and_distinct`] makes at most before it leaves the ids to be hashed.
const FEW_COMPARISONS: usize = 256;

/// Whether `calls` and the `earlier` calls are few enough to compare pairwise and their ids are
/// already distinct: the usual turn, whose ids need no change, then builds no hash set (three
/// sets and their hashing cost a scripted run about 2,600 instructions, most of what it spends
/// on ids). False when they are many, or when an id repeats.
fn few_and_distinct(transcript: &[Message], calls: &[ToolCall]) -> bool {
    let earlier: usize = (transcript.iter())
        .map(|message| match message {
            Message::Assistant { tool_calls, .. } => tool_calls.len(),
            _ => 0,
        })
        .sum();
    if calls.len().saturating_mul(earlier + calls.len()) > FEW_COMPARISONS {
        return false;
    }
    calls.iter().enumerate().all(|(i, call)| {
        let repeats = |other: &ToolCall| other.id == call.id;
        !calls[..i].iter().any(repeats) && !earlier_calls(transcript).any(repeats)
    })
}

/// The calls of `transcript`, in order.
fn earlier_calls(transcript: &[Message]) -> impl Iterator<Item = &ToolCall> {
    transcript.iter().flat_map(|message| match message {
        Message::Assistant { tool_calls, .. } => tool_calls.as_slice(),
        _ => &[][..],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(calls: &[ToolCall]) -> Vec<&str> {
        calls.iter().map(|call| &*call.id).collect()
    }

    #[test]
    fn repeated_ids_get_the_first_free_suffix_and_distinct_ones_are_kept() {
        let earlier = vec![Message::assistant(
            None,
            vec![ToolCall::new("call_1", "t", "{}")],
        )];
        let mut turn = vec![
            ToolCall::new("call_1", "t", "{}"),
            ToolCall::new("call_1", "t", "{}"),
            ToolCall::new("call_1_3", "t", "{}"),
            ToolCall::new("call_9", "t", "{}"),
        ];
        make_distinct(&earlier, &mut turn);
        assert_eq!(ids(&turn), ["call_1_2", "call_1_4", "call_1_3", "call_9"]);
    }

    #[test]
    fn a_few_calls_are_compared_pairwise_and_renamed_only_when_an_id_repeats() {
        let earlier = vec![Message::assistant(
            None,
            vec![ToolCall::new("call_1", "t", "{}")],
        )];
        let mut distinct = vec![ToolCall::new("call_2", "t", "{}")];
        make_distinct(&earlier, &mut distinct);
        assert_eq!(ids(&distinct), ["call_2"]);
        let mut repeated = vec![ToolCall::new("call_1", "t", "{}")];
        make_distinct(&earlier, &mut repeated);
        assert_eq!(ids(&repeated), ["call_1_2"]);
        let mut in_turn = vec![
            ToolCall::new("call_3", "t", "{}"),
            ToolCall::new("call_3", "t", "{}"),
        ];
        make_distinct(&earlier, &mut in_turn);
        assert_eq!(ids(&in_turn), ["call_3", "call_3_2"]);
        assert!(few_and_distinct(&earlier, &distinct));
        let many: Vec<ToolCall> = (0..20)
            .map(|n| ToolCall::new(format!("call_{n}_x"), "t", "{}"))
            .collect();
        assert!(
            !few_and_distinct(&earlier, &many),
            "20 calls are left to the hashed path"
        );
    }

    #[test]
    fn one_id_repeated_a_hundred_thousand_times_gets_every_suffix_in_turn() {
        let mut turn: Vec<ToolCall> = (0..100_000)
            .map(|_| ToolCall::new("call_0", "t", "{}"))
            .collect();
        make_distinct(&[], &mut turn);
        assert_eq!(&*turn[0].id, "call_0");
        assert_eq!(&*turn[1].id, "call_0_2");
        assert_eq!(&*turn[99_999].id, "call_0_100000");
        let distinct: HashSet<&str> = turn.iter().map(|call| &*call.id).collect();
        assert_eq!(distinct.len(), turn.len());
    }
}
