//! The run's usage accounting: the loop asks it before each model request, after each
//! response and when a turn's tool calls arrive; it says whether the run may go on.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::counts::Counts;
use super::model_call::Turn;
use super::{AgentInner, AgentOutput, RunError};
use crate::chat::{ChatRequest, Message, ToolCall, ToolResult};
use crate::events::Event;
use crate::executor::RunContext;
use crate::observe;
use crate::usage::{OnExceed, RunUsage, Usage, UsageLimit, UsageLimitExceeded, UsageLimits};

/// Where the one last request of a graceful stop is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum FinalRequest {
    #[default]
    NotAsked,
    /// Asked for; the next request is let through past the caps.
    Allowed,
    /// Made: nothing more is let through.
    Made,
}

/// What the caps of one run count beyond the loop's own counts (calls of capped tools, cost).
#[derive(Debug)]
pub(super) struct UsageMeter {
    limits: Arc<UsageLimits>,
    calls_of: BTreeMap<String, u32>,
    cost: f64,
    last: FinalRequest,
}

impl UsageMeter {
    pub(super) fn new(limits: Arc<UsageLimits>) -> Self {
        UsageMeter {
            limits,
            calls_of: BTreeMap::new(),
            cost: 0.0,
            last: FinalRequest::NotAsked,
        }
    }

    pub(super) fn saved(&self) -> (BTreeMap<String, u32>, f64) {
        (self.calls_of.clone(), self.cost)
    }

    pub(super) fn restore(&mut self, calls_of: BTreeMap<String, u32>, cost: f64) {
        self.calls_of = calls_of;
        self.cost = cost;
    }
}

impl Counts {
    /// What the run has used so far.
    pub(super) fn run_usage(&self) -> RunUsage {
        RunUsage {
            requests: self.model_calls,
            tokens: self.usage,
            tool_calls: self.tool_calls,
            calls_of: self.meter.calls_of.clone(),
            cost: self.meter.cost,
        }
    }

    fn exceeded(&self, (limit, allowed): (UsageLimit, String)) -> RunError {
        let exceeded = UsageLimitExceeded::new(limit, allowed, self.run_usage());
        RunError::UsageLimit(Box::new(exceeded))
    }

    /// Before a model request: refused when it would go past the request cap (the one last
    /// request of a graceful stop goes through once).
    pub(super) fn may_ask(&mut self) -> Result<(), RunError> {
        match self.meter.last {
            FinalRequest::Allowed => {
                self.meter.last = FinalRequest::Made;
                return Ok(());
            }
            FinalRequest::Made => {
                let allowed = self.model_calls.to_string();
                return Err(self.exceeded((UsageLimit::Requests, allowed)));
            }
            FinalRequest::NotAsked => {}
        }
        match self.meter.limits.request_refused(self.model_calls) {
            Some(refused) => Err(self.exceeded(refused)),
            None => Ok(()),
        }
    }

    /// After a response that reported `used` (already added to the run's usage), from `model`:
    /// its cost counted, and an error when the run went past a token or cost cap.
    pub(super) fn answered(&mut self, model: &str, used: Option<Usage>) -> Result<(), RunError> {
        let Some(used) = used else {
            return Ok(());
        };
        match self.meter.limits.cost_of(model, used) {
            Some(cost) => self.meter.cost += cost,
            None => tracing::warn!(model, "no price for this model: its tokens cost nothing"),
        }
        if self.meter.last != FinalRequest::NotAsked {
            // The final answer is counted, not capped: it is what the stop asked for.
            return Ok(());
        }
        match self
            .meter
            .limits
            .tokens_exceeded(&self.usage, self.meter.cost)
        {
            Some(exceeded) => Err(self.exceeded(exceeded)),
            None => Ok(()),
        }
    }

    /// When a turn's calls arrive: counted, or refused (none of them runs) when they would go
    /// past a tool-call cap.
    pub(super) fn may_run(&mut self, calls: &[ToolCall]) -> Result<(), RunError> {
        let names = calls.iter().map(|call| &*call.name);
        let meter = &self.meter;
        if let Some(refused) = meter
            .limits
            .calls_refused(names, self.tool_calls, &meter.calls_of)
        {
            return Err(self.exceeded(refused));
        }
        self.tool_calls += u32::try_from(calls.len()).unwrap_or(u32::MAX);
        let meter = &mut self.meter;
        for call in calls {
            if meter.limits.caps(&call.name) {
                *meter.calls_of.entry(call.name.to_string()).or_default() += 1;
            }
        }
        Ok(())
    }

    /// Whether the run, ended by `error`, asks the model once more for a final answer: only
    /// for a cap the limits chose that for, and only once.
    pub(super) fn asks_final_answer(&mut self, error: &RunError) -> bool {
        let RunError::UsageLimit(exceeded) = error else {
            return false;
        };
        let graceful = self.meter.limits.on_exceeding(&exceeded.limit) == OnExceed::FinalAnswer;
        if !graceful || self.meter.last != FinalRequest::NotAsked {
            return false;
        }
        self.meter.last = FinalRequest::Allowed;
        true
    }
}

/// A turn whose calls were refused joins the transcript with each call answered as not run,
/// so the transcript keeps one result per call.
pub(super) fn refuse_turn(request: &mut ChatRequest, text: Option<String>, calls: Vec<ToolCall>) {
    let results: Vec<ToolResult> = calls
        .iter()
        .map(|call| {
            let why = "not run: the run reached its usage limit before this call";
            ToolResult::error(call, why)
        })
        .collect();
    request.messages.push(Message::assistant(text, calls));
    request
        .messages
        .extend(results.into_iter().map(Message::Tool));
}

/// What the model is told when a capped run asks it for its final answer.
pub(super) fn final_answer_prompt(limit: &UsageLimit) -> String {
    format!(
        "This run has reached its limit on {limit}. Do not call any tools. Answer now with the \
         best answer you can give from what you have so far."
    )
}

impl<O: AgentOutput> AgentInner<O> {
    /// A run `ended` past a cap whose limits ask for a final answer: one last model request,
    /// without tools, and its text is the run's output. Any other end is given back as it was,
    /// and so is the cap's error when the last request fails or answers with tool calls.
    pub(super) async fn stop_gracefully(
        &self,
        ctx: &RunContext,
        request: &mut ChatRequest,
        counts: &mut Counts,
        ended: Result<O, RunError>,
    ) -> Result<O, RunError> {
        let error = match ended {
            Err(error) if counts.asks_final_answer(&error) => error,
            other => return other,
        };
        let RunError::UsageLimit(exceeded) = &error else {
            return Err(error);
        };
        ctx.events().emit(Event::UsageLimitReached {
            limit: exceeded.limit.clone(),
        });
        request
            .messages
            .push(Message::user(final_answer_prompt(&exceeded.limit)));
        request.tools = Arc::from(Vec::new());
        request.options.tool_choice = None;
        request.options.parallel_tool_calls = None;
        let started = counts.clock.take();
        let turn = observe::model_turn(
            &*self.model,
            &self.meters,
            started,
            || self.call_model(ctx, request, counts),
            Turn::response,
        );
        let response = match turn.await.0 {
            Ok(Turn::Response(response)) => response,
            Ok(Turn::RespondWith(output)) => return Ok(output),
            Err(_) => {
                request.messages.pop();
                return Err(error);
            }
        };
        match response.text {
            Some(text) if response.tool_calls.is_empty() => {
                request
                    .messages
                    .push(Message::assistant(Some(text.clone()), Vec::new()));
                // The caps are reached: the answer is read as any is, but not asked again.
                let read = self.read_answer(&text);
                read.or_else(|refused| self.give_up(&mut Default::default(), refused, &text))
            }
            _ => {
                request.messages.pop();
                Err(error)
            }
        }
    }
}
