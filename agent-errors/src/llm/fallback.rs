//! Model fallback: after N consecutive overload errors on the primary model, the same request
//! goes to a fallback model.

use std::collections::HashSet;
use std::fmt;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;

use super::{CallSource, ChatModel, ChatRequest, ChatResponse, MAX_RETRY_AFTER};
use crate::classify::{is_overload_error, server_delay};
use crate::error::BoxError;
use crate::events::{Event, EventLog, emit_to};
use crate::retry::{self, Policy, Retrier, RetrySchedule, Step, Stop, ZeroAttempts};

/// A [`ChatModel`] that answers from `primary` and, once the primary has been overloaded
/// (529, or "overloaded", see [`is_overload_error`]) `n` times in a row for one
/// request, answers that request from `fallback`.
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
/// once. The switch itself is not a retry and spends nothing.
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
    events: Option<Arc<EventLog>>,
}

impl<P: ChatModel, F: ChatModel> fmt::Debug for FallbackModel<P, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FallbackModel")
            .field("primary", &self.primary.name())
            .field("fallback", &self.fallback.name())
            .field("after", &self.after)
            .field("foreground", &self.foreground)
            .field("backoff", &self.backoff)
            .finish_non_exhaustive()
    }
}

impl<P: ChatModel, F: ChatModel> FallbackModel<P, F> {
    /// Falls back after 3 consecutive overloads.
    pub fn new(primary: P, fallback: F) -> Self {
        FallbackModel {
            primary,
            fallback,
            after: NonZeroU32::new(3).expect("3 is not zero"),
            foreground: HashSet::from([CallSource::MAIN_AGENT]),
            backoff: RetrySchedule::default(),
            events: None,
        }
    }

    /// Falls back after `n` consecutive overloads; `n` counts the first call, so it is at least 1.
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

    async fn answer(&self, request: &ChatRequest) -> Result<ChatResponse, BoxError> {
        // The budget is `after` calls to an overloaded primary; a caller off the foreground list
        // is not worth a second one.
        let mut policy = OverloadRetry {
            primary: &self.primary,
            request,
            retrier: Retrier::new(self.backoff.clone().with_attempts(self.after).delays()),
            foreground: self.foreground.contains(&request.source),
        };
        match retry::call(&mut policy).await {
            Err(error) if is_overload_error(&*error) => {
                self.record_switch(request);
                self.fallback.chat(request).await
            }
            answered => answered,
        }
    }

    fn record_switch(&self, request: &ChatRequest) {
        let event = Event::LlmFallback {
            from: self.primary.name().to_owned(),
            to: self.fallback.name().to_owned(),
        };
        emit_to(event, [request.events.log(), self.events.as_ref()]);
    }
}

/// Calling an overloaded primary again, as a policy of the retry loop: only overloads are
/// retried, within `after` calls and the run's retry allowance; whatever ends it overloaded
/// goes to the fallback (which is a switch, not a retry, and spends nothing).
struct OverloadRetry<'a, P, D> {
    primary: &'a P,
    request: &'a ChatRequest,
    retrier: Retrier<D>,
    foreground: bool,
}

impl<P: ChatModel, D: Iterator<Item = Duration>> Policy for OverloadRetry<'_, P, D> {
    type Output = ChatResponse;
    type Error = BoxError;

    async fn call(&mut self) -> Result<ChatResponse, BoxError> {
        self.primary.chat(self.request).await
    }

    async fn retry(&mut self, error: &BoxError) -> Step {
        if !is_overload_error(&**error) {
            return Step::Stop(Stop::Never);
        }
        let server = server_delay(&**error, MAX_RETRY_AFTER);
        match self.retrier.after_failure(self.foreground, server) {
            Step::Wait(delay) if !self.request.retries.try_spend() => {
                tracing::debug!(?delay, "the run's retry allowance is spent: falling back");
                Step::Stop(Stop::Exhausted)
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

    fn name(&self) -> &str {
        self.primary.name()
    }

    fn provider_name(&self) -> Option<&str> {
        self.primary.provider_name()
    }
}
