//! The run's usage accounting, as the loop sees it: the loop asks before each model request,
//! after each response and when a turn's tool calls arrive, and is told whether the run may go
//! on. What is counted lives in the run's one meter ([`RunMeter`]), which every other path of
//! the run charges too (model wrappers, tool attempts, fixer agents); the loop adds the one
//! thing only it knows: the final answer a graceful stop asks for.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::counts::Counts;
use super::durable::PendingCall;
use super::model_call::Turn;
use super::{AgentInner, AgentOutput, RunError};
use crate::chat::{ChatRequest, Message, ToolCall, ToolResult};
use crate::events::Event;
use crate::executor::RunContext;
use crate::observe;
use crate::usage::{
    Answerer, OnExceed, RunMeter, RunUsage, Usage, UsageLimit, UsageLimitExceeded, UsageLimits,
};

/// Where the one last request of a graceful stop is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum FinalRequest {
    #[default]
    NotAsked,
    /// Asked for; the next request is let through past the run's own caps.
    Allowed,
    /// Made: nothing more is let through.
    Made,
}

/// The run's caps and the meter they hold on.
#[derive(Debug)]
pub(super) struct UsageMeter {
    limits: Arc<UsageLimits>,
    meter: RunMeter,
    last: FinalRequest,
}

impl UsageMeter {
    pub(super) fn new(limits: Arc<UsageLimits>, meter: RunMeter) -> Self {
        UsageMeter {
            limits,
            meter,
            last: FinalRequest::NotAsked,
        }
    }

    /// What the meter counted, to be saved with a checkpoint.
    pub(super) fn saved(&self) -> Option<RunUsage> {
        self.meter.used()
    }

    /// Takes up what an interrupted run had counted.
    pub(super) fn restore(&self, used: RunUsage) {
        self.meter.restore(used);
    }
}

impl Counts {
    /// What the run has used so far: what its meter counted, or, in a run without a cap across
    /// the run (which has no meter), the loop's own counts.
    pub(super) fn run_usage(&self) -> RunUsage {
        self.meter.meter.used().unwrap_or_else(|| RunUsage {
            requests: self.model_calls,
            tokens: self.usage,
            tool_calls: self.tool_calls,
            calls_of: BTreeMap::new(),
            cost: 0.0,
        })
    }

    fn exceeded(&self, (limit, allowed): (UsageLimit, String)) -> RunError {
        let exceeded = UsageLimitExceeded::new(limit, allowed, self.run_usage());
        RunError::UsageLimit(Box::new(exceeded))
    }

    /// Before a model request: refused when it would go past the request cap or the run went
    /// past another (the one last request of a graceful stop goes through once).
    #[inline]
    pub(super) fn may_ask(&mut self) -> Result<(), RunError> {
        if self.meter.last == FinalRequest::NotAsked {
            return self.meter.meter.request().map_err(RunError::UsageLimit);
        }
        self.may_ask_last()
    }

    /// [`Counts::may_ask`] once a graceful stop asked for its final answer.
    fn may_ask_last(&mut self) -> Result<(), RunError> {
        if self.meter.last == FinalRequest::Allowed {
            self.meter.last = FinalRequest::Made;
            return self
                .meter
                .meter
                .final_request()
                .map_err(RunError::UsageLimit);
        }
        let allowed = self.model_calls.to_string();
        Err(self.exceeded((UsageLimit::Requests, allowed)))
    }

    /// After a response from `model` that `reported` its usage (already added to the run's
    /// report) or did not (then counted as the caps say, from `estimate` by default): counted,
    /// and an error when the run went past a token or cost cap. The first response without
    /// usage under such a cap is told as an event and a warning.
    pub(super) fn answered(
        &mut self,
        ctx: &RunContext,
        model: Answerer<'_>,
        reported: Option<Usage>,
        estimate: impl FnOnce() -> Usage,
    ) -> Result<(), RunError> {
        // The final answer is counted, not capped: it is what the stop asked for.
        let capped = self.meter.last == FinalRequest::NotAsked;
        let charged = self.meter.meter.answered(model, reported, estimate, capped);
        if charged.first_missing {
            ctx.events().emit(Event::UsageMissing {
                model: model.asked.to_owned(),
            });
        }
        charged.result.map_err(RunError::UsageLimit)
    }

    /// When a turn's calls arrive: refused (none of them runs) when they would go past a
    /// tool-call cap. The report counts them here; the meter counts each tool body as it runs.
    #[inline]
    pub(super) fn may_run(&mut self, calls: &[ToolCall]) -> Result<(), RunError> {
        if self.meter.meter.is_metered() {
            let names = calls.iter().map(|call| &*call.name);
            self.meter
                .meter
                .calls_refused(names)
                .map_err(RunError::UsageLimit)?;
        } else if let Some(refused) = self.meter.limits.turn_refused(calls.len()) {
            // A run without a meter has no cap across the run: only the per-turn cap applies.
            return Err(self.exceeded(refused));
        }
        self.tool_calls += u32::try_from(calls.len()).unwrap_or(u32::MAX);
        Ok(())
    }

    /// A resumed run's turn: the checkpoint counted before any of its calls ran, so the runs
    /// of a tool body each call had made by its last save (one that may have been running
    /// included) are counted now.
    pub(super) fn count_resumed(&self, pending: &[PendingCall], is_tool: impl Fn(&str) -> bool) {
        for pending in pending.iter().filter(|p| is_tool(&p.call.name)) {
            self.meter
                .meter
                .ran(&pending.call.name, pending.progress.attempts);
        }
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
            .push(Message::user(exceeded.limit.final_answer_prompt()));
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
