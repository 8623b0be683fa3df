//! The loop: ask the model, run the tool calls it makes (concurrently, answered in order), and
//! repeat until it answers in text, a call ends the run, or the turn cap is reached.

use std::sync::Arc;

use super::builtins::{ESCALATE, EscalateArgs, THROW_EXCEPTION, ThrowArgs};
use super::durable::{self, Journal, PendingCall, ResumeError, SavedCounts, SavedRun};
use super::stream::DeltaSender;
use super::turn;
use super::{Agent, AgentInner, AgentOutput, RunError, RunOptions, RunOutcome};
use crate::chat::{ChatRequest, ChatResponse, Message, ToolCall, ToolResult, ToolSpec, Usage};
use crate::classify::ErrorKind;
use crate::events::{Event, RunReport};
use crate::executor::{
    self, CANCELLED, CallJournal, CallOutcome, CallProgress, Cancellation, RecoveryState,
    RunContext, Terminated, TerminationReason, ToolPanic,
};
use crate::observe::{self, Observer};
use crate::retry::RunRetries;
use crate::sanitize::SurfacedError;

impl<O: AgentOutput> Agent<O> {
    /// Runs the agent on `input` and returns its output.
    pub async fn run(&self, input: impl Into<String>) -> Result<O, RunError> {
        self.run_with(input, RunOptions::default()).await.result
    }

    /// Runs the agent; `cancellation.cancel()` ends the run with [`RunError::Cancelled`].
    pub async fn run_cancellable(
        &self,
        input: impl Into<String>,
        cancellation: Cancellation,
    ) -> Result<O, RunError> {
        self.run_with(input, RunOptions::new().cancellation(cancellation))
            .await
            .result
    }

    /// Runs the agent and returns the report (events, counts) and transcript with the result.
    pub async fn run_with_report(&self, input: impl Into<String>) -> RunOutcome<O> {
        self.run_with(input, RunOptions::default()).await
    }

    /// Runs the agent with these options.
    pub async fn run_with(&self, input: impl Into<String>, options: RunOptions) -> RunOutcome<O> {
        self.run_conversation(vec![Message::user(input)], options)
            .await
    }

    /// Runs the agent on a conversation so far (ending, usually, with the user's new message)
    /// and returns, in [`RunOutcome::transcript`], the conversation to continue from. The
    /// system prompt is put first unless `history` already starts with a system message.
    /// Recovery state that belongs to a run (the per-run breaker, repair budgets) starts fresh;
    /// the agent's service breaker carries over.
    pub async fn run_conversation(
        &self,
        history: Vec<Message>,
        options: RunOptions,
    ) -> RunOutcome<O> {
        let inner = &self.inner;
        // Boxed: the loop's future holds a whole turn (its calls, their ladders, the journal) and
        // is several kilobytes; the caller's future then stays small wherever it is moved.
        let run = Box::pin(inner.run(history, options));
        observe::run(&inner.name, &*inner.model, &inner.meters, run).await
    }

    /// Goes on with the durable run `run_id` from its last checkpoint, on this agent (which
    /// must have the tools the run was using): after a crash, in this process or another.
    ///
    /// Calls that had their results are not run again. A call that was sleeping before a retry
    /// sleeps its saved delay and retries, its spent retries still spent. A call that was
    /// running is run again when its tool is idempotent (with the same
    /// [`IdempotencyKey`](crate::IdempotencyKey)); any other is a failure of kind
    /// [`OutcomeUnknown`](crate::ErrorKind::OutcomeUnknown), which its `outcome_unknown` policy
    /// answers (by default an error result telling the model the call was interrupted). The
    /// per-run breaker, dropped tools, permission denials, counts and usage carry over.
    ///
    /// A run that already finished is not run again: the result is
    /// [`ResumeError::Finished`] with how it ended, and the saved transcript.
    pub async fn resume(&self, run_id: impl Into<String>, options: RunOptions) -> RunOutcome<O> {
        let inner = &self.inner;
        let run = Box::pin(inner.resume(run_id.into(), options));
        observe::run(&inner.name, &*inner.model, &inner.meters, run).await
    }
}

/// What a resumed run goes on from.
struct Resumed {
    pending: Vec<PendingCall>,
    counts: SavedCounts,
    recovery: RecoveryState,
}

#[derive(Default)]
pub(super) struct Counts {
    pub(super) turns: u32,
    pub(super) model_calls: u32,
    tool_calls: u32,
    pub(super) usage: Usage,
    /// Where the run streams the model's answers, if anywhere.
    pub(super) deltas: Option<DeltaSender>,
}

impl Counts {
    fn saved(&self) -> SavedCounts {
        SavedCounts {
            turns: self.turns,
            model_calls: self.model_calls,
            tool_calls: self.tool_calls,
            usage: self.usage,
        }
    }

    fn restore(&mut self, saved: SavedCounts) {
        self.turns = saved.turns;
        self.model_calls = saved.model_calls;
        self.tool_calls = saved.tool_calls;
        self.usage = saved.usage;
    }
}

/// A model turn: a response to act on, or the output `on_llm_error` chose instead.
pub(super) enum Turn<O> {
    Response(ChatResponse),
    RespondWith(O),
}

impl<O> Turn<O> {
    fn response(&self) -> Option<&ChatResponse> {
        match self {
            Turn::Response(response) => Some(response),
            Turn::RespondWith(_) => None,
        }
    }
}

/// What the loop does with one tool call: the result the transcript records, and whether it ends
/// the run.
struct Answered {
    result: ToolResult,
    stop: Option<RunError>,
}

/// Why a batch of calls ends the run, if it does: the first stop in call order, except that a
/// tripped breaker gives way to any other stop (an auth failure says more about what to fix).
fn batch_verdict(stops: Vec<RunError>) -> Option<RunError> {
    let is_trip = |stop: &RunError| matches!(stop, RunError::BreakerTripped { .. });
    let first_other = stops.iter().position(|s| !is_trip(s));
    let mut stops = stops;
    match first_other {
        Some(i) => Some(stops.swap_remove(i)),
        None => stops.into_iter().next(),
    }
}

/// A panic in user code the loop called, as the run's error.
pub(super) fn callback_panicked(
    callback: &'static str,
    payload: Box<dyn std::any::Any + Send>,
) -> RunError {
    let message = ToolPanic::from_payload(payload).message;
    let message = crate::sanitize::scrub(&message, crate::sanitize::DEFAULT_MAX_CHARS);
    tracing::error!(callback, %message, "user code panicked; the run ends");
    RunError::CallbackPanicked { callback, message }
}

/// The run error a tool's stop becomes.
fn stopped(terminated: Box<Terminated>) -> RunError {
    match terminated.reason {
        TerminationReason::BreakerTripped { failures } => RunError::BreakerTripped {
            tool: terminated.tool,
            failures,
        },
        _ => RunError::Terminated(terminated),
    }
}

impl<O: AgentOutput> AgentInner<O> {
    fn context(
        &self,
        options: RunOptions,
        run_id: &str,
        journal: Option<&Arc<Journal>>,
    ) -> RunContext {
        let observer = Observer::new(Arc::clone(&self.model), self.feed.clone(), options.feed);
        let ctx = RunContext::new()
            .with_breaker_threshold(self.breaker_threshold)
            .with_service_breaker(self.service_breaker.clone())
            .with_cancellation(options.cancellation)
            .with_extensions(options.extensions)
            .with_limits(self.limits)
            .with_observer(observer)
            .with_run_id(run_id);
        let ctx = match journal {
            Some(journal) => {
                let ctx = ctx.with_journal(Arc::clone(journal) as Arc<dyn CallJournal>);
                journal.attach(&ctx);
                ctx
            }
            None => ctx,
        };
        let ctx = match &self.retry_budget {
            Some(budget) => ctx.with_retry_budget(budget.clone()),
            None => ctx,
        };
        match &self.permission {
            Some(hook) => ctx.with_permission(hook.clone()),
            None => ctx,
        }
    }

    async fn run(&self, history: Vec<Message>, mut options: RunOptions) -> RunOutcome<O> {
        let run_id = options.run_id.take().unwrap_or_else(durable::new_run_id);
        let journal = self
            .checkpoints
            .as_ref()
            .map(|store| Arc::new(Journal::new(Arc::clone(store), run_id.clone())));
        let messages =
            super::conversation::with_system_prompt(self.system_prompt.as_deref(), history);
        self.go(run_id, journal, messages, None, options).await
    }

    async fn resume(&self, run_id: String, options: RunOptions) -> RunOutcome<O> {
        let refused = |error, transcript| RunOutcome {
            result: Err(error),
            report: RunReport::default(),
            transcript,
            run_id: run_id.clone(),
        };
        let Some(store) = &self.checkpoints else {
            return refused(RunError::Resume(ResumeError::NoStore), Vec::new());
        };
        let checkpoint = match store.load(&run_id).await {
            Ok(Some(checkpoint)) => checkpoint,
            Ok(None) => {
                let error = ResumeError::NotFound {
                    run_id: run_id.clone(),
                };
                return refused(RunError::Resume(error), Vec::new());
            }
            Err(error) => return refused(RunError::Checkpoint(error), Vec::new()),
        };
        let saved = match SavedRun::read(&checkpoint) {
            Ok(saved) => saved,
            Err(error) => return refused(RunError::Checkpoint(error), Vec::new()),
        };
        if let Some(outcome) = saved.finished.clone() {
            let error = ResumeError::Finished {
                run_id: run_id.clone(),
                outcome,
            };
            return refused(RunError::Resume(error), saved.transcript);
        }
        if let Some(tool) = saved.unknown_tool(|name| self.knows(name)) {
            let error = ResumeError::UnknownTool {
                run_id: run_id.clone(),
                tool: tool.to_owned(),
            };
            return refused(RunError::Resume(error), saved.transcript);
        }
        let next = checkpoint.sequence.saturating_add(1);
        let journal = Journal::resumed(Arc::clone(store), run_id.clone(), saved.clone(), next);
        let resumed = Resumed {
            pending: saved.pending,
            counts: saved.counts,
            recovery: saved.recovery,
        };
        self.go(
            run_id,
            Some(Arc::new(journal)),
            saved.transcript,
            Some(resumed),
            options,
        )
        .await
    }

    /// Whether a call of `name` reaches a tool of this agent.
    fn knows(&self, name: &str) -> bool {
        self.registry.tool(name).is_some() || self.builtins.enabled(name)
    }

    async fn go(
        &self,
        run_id: String,
        journal: Option<Arc<Journal>>,
        messages: Vec<Message>,
        resumed: Option<Resumed>,
        mut options: RunOptions,
    ) -> RunOutcome<O> {
        let deltas = options.deltas.take().map(DeltaSender::new);
        let ctx = self.context(options, &run_id, journal.as_ref());
        let mut request = ChatRequest::new(messages, Vec::new())
            .with_source(self.source.clone())
            .with_options(self.options.clone())
            .with_events(ctx.event_sink())
            .with_retries(RunRetries::new(Arc::clone(ctx.retries())));
        let mut counts = Counts {
            deltas,
            ..Counts::default()
        };
        let pending = match resumed {
            Some(resumed) => {
                counts.restore(resumed.counts);
                ctx.restore(resumed.recovery);
                Some(resumed.pending)
            }
            None => None,
        };
        let journal = journal.as_deref();
        let driven = async {
            if let (Some(journal), None) = (journal, &pending) {
                let saved = journal.turn(&request.messages, &[], |_| true, counts.saved(), &ctx);
                saved.await.map_err(RunError::Checkpoint)?;
            }
            self.drive(&ctx, &mut request, &mut counts, journal, pending)
                .await
        };
        let mut result = match self.limits.run_deadline {
            None => driven.await,
            Some(limit) => match tokio::time::timeout(limit, driven).await {
                Ok(result) => result,
                Err(_) => {
                    ctx.halt();
                    Err(RunError::DeadlineExceeded { limit })
                }
            },
        };
        if let Some(journal) = journal {
            if !matches!(result, Err(RunError::Checkpoint(_))) {
                let finished = durable::finished(&result, &request.messages);
                let saved = journal.finish(&request.messages, counts.saved(), finished);
                if let Err(error) = saved.await {
                    result = Err(RunError::Checkpoint(error));
                }
            }
        }
        ctx.events().close();
        if let Err(error) = &result {
            let error = crate::redact::redact(&error.to_string()).into_owned();
            tracing::warn!(%error, "run ended without an output");
        }
        RunOutcome {
            result,
            report: RunReport {
                events: ctx.events().take(),
                turns: counts.turns,
                model_calls: counts.model_calls,
                tool_calls: counts.tool_calls,
                usage: counts.usage,
            },
            transcript: request.messages,
            run_id,
        }
    }

    /// The tools offered to the model: shared as they are until `degrade` drops one.
    fn offered_tools(&self, ctx: &RunContext) -> Arc<[ToolSpec]> {
        if !self.offered.iter().any(|spec| ctx.is_degraded(&spec.name)) {
            return Arc::clone(&self.offered);
        }
        self.offered
            .iter()
            .filter(|spec| !ctx.is_degraded(&spec.name))
            .cloned()
            .collect()
    }

    async fn drive(
        &self,
        ctx: &RunContext,
        request: &mut ChatRequest,
        counts: &mut Counts,
        journal: Option<&Journal>,
        pending: Option<Vec<PendingCall>>,
    ) -> Result<O, RunError> {
        request.tools = self.offered_tools(ctx);
        if let Some(pending) = pending.filter(|pending| !pending.is_empty()) {
            let calls: Vec<ToolCall> = pending.iter().map(|p| p.call.clone()).collect();
            if pending
                .iter()
                .any(|p| matches!(p.answer(), Some((_, Some(_)))))
            {
                // A saved answer ended the run: the calls it halted are not run again.
                ctx.halt();
            }
            // The saved transcript already ends with the turn.
            self.answer_turn(ctx, request, journal, None, &calls, &pending)
                .await?;
        }
        while counts.turns < self.max_turns {
            if ctx.cancellation().is_cancelled() {
                return Err(RunError::Cancelled);
            }
            counts.turns += 1;
            let turn = self.call_model(ctx, request, counts);
            let turn = observe::model_turn(&*self.model, &self.meters, turn, Turn::response);
            let response = match turn.await? {
                Turn::Response(response) => response,
                Turn::RespondWith(output) => return Ok(output),
            };
            if let Some(refused) = turn::refusal(&response) {
                return Err(refused);
            }
            if response.tool_calls.is_empty() {
                let Some(text) = response.text else {
                    return Err(RunError::EmptyResponse);
                };
                request
                    .messages
                    .push(Message::assistant(Some(text.clone()), Vec::new()));
                return O::from_final_text(text.clone())
                    .map_err(|error| RunError::InvalidOutput { text, error });
            }

            let calls = response.tool_calls;
            counts.tool_calls += u32::try_from(calls.len()).unwrap_or(u32::MAX);
            // The transcript gets the turn only with its answers, so a run the deadline stops
            // mid-turn never hands back a call without its answer; the checkpoint has it first.
            let asked = Message::assistant(response.text, calls.clone());
            ctx.begin_turn();
            if let Some(journal) = journal {
                let known = |name: &str| self.knows(name);
                let transcript = [request.messages.as_slice(), std::slice::from_ref(&asked)];
                let transcript = transcript.concat();
                let saved = journal.turn(&transcript, &calls, known, counts.saved(), ctx);
                saved.await.map_err(RunError::Checkpoint)?;
            }
            self.answer_turn(ctx, request, journal, Some(asked), &calls, &[])
                .await?;
        }
        Err(RunError::TurnCap {
            max_turns: self.max_turns,
        })
    }

    /// Answers every call of a turn, in order, adds the turn (`asked`, unless the transcript
    /// already ends with it) and the answers to the transcript, and says whether the run goes
    /// on. `resumed` holds what a resumed run saved about these calls.
    async fn answer_turn(
        &self,
        ctx: &RunContext,
        request: &mut ChatRequest,
        journal: Option<&Journal>,
        asked: Option<Message>,
        calls: &[ToolCall],
        resumed: &[PendingCall],
    ) -> Result<(), RunError> {
        let answers = executor::answer_all(
            ctx,
            calls,
            |call| {
                let saved = resumed.iter().find(|p| p.call.id == call.id);
                // Boxed: a call's future is large (the whole recovery ladder), and the join
                // would otherwise copy it as it collects and polls the turn's calls.
                Box::pin(self.answer_durably(ctx, call, journal, saved))
            },
            |a: &Answered| a.stop.is_some(),
        )
        .await;
        request.messages.extend(asked);
        let mut stops = Vec::new();
        for answer in answers {
            request.messages.push(Message::Tool(answer.result));
            stops.extend(answer.stop);
        }
        if let Some(error) = journal.and_then(Journal::failure) {
            return Err(RunError::Checkpoint(error));
        }
        if ctx.cancellation().is_cancelled() {
            return Err(RunError::Cancelled);
        }
        if let Some(verdict) = batch_verdict(stops) {
            return Err(verdict);
        }
        // A degraded tool is not offered again.
        if request.tools.iter().any(|spec| ctx.is_degraded(&spec.name)) {
            request.tools = self.offered_tools(ctx);
        }
        Ok(())
    }

    /// One call's answer, saved when the run is durable: a saved answer is given back as it
    /// was, a call a resumed run left unanswered goes on from how far it got.
    async fn answer_durably(
        &self,
        ctx: &RunContext,
        call: &ToolCall,
        journal: Option<&Journal>,
        saved: Option<&PendingCall>,
    ) -> Answered {
        if let Some((result, stop)) = saved.and_then(PendingCall::answer) {
            return Answered { result, stop };
        }
        let answered = match saved {
            Some(pending) => self.answer_resumed(ctx, call, pending.progress()).await,
            None => self.answer(ctx, call).await,
        };
        if let Some(journal) = journal {
            let stop = answered.stop.as_ref();
            journal
                .answered(&call.id, &answered.result, stop, ctx)
                .await;
        }
        answered
    }

    /// Exactly one answer for one call.
    async fn answer(&self, ctx: &RunContext, call: &ToolCall) -> Answered {
        if self.builtins.enabled(&call.name) {
            return self.answer_builtin(ctx, call);
        }
        answered(call, self.registry.execute(ctx, call).await)
    }

    /// Exactly one answer for a call a resumed run left unanswered.
    async fn answer_resumed(
        &self,
        ctx: &RunContext,
        call: &ToolCall,
        progress: CallProgress,
    ) -> Answered {
        if self.builtins.enabled(&call.name) {
            return self.answer_builtin(ctx, call);
        }
        let outcome = executor::execute_resumed(&self.registry, ctx, call, progress).await;
        answered(call, outcome)
    }

    fn answer_builtin(&self, ctx: &RunContext, call: &ToolCall) -> Answered {
        if ctx.cancellation().is_cancelled() {
            return Answered {
                result: ToolResult::error(call, CANCELLED),
                stop: None,
            };
        }
        let limit = self.limits.max_message_chars;
        let answered = if call.name == ESCALATE {
            serde_json::from_str(&call.arguments).map(|args| escalated(ctx, call, args, limit))
        } else {
            debug_assert_eq!(call.name, THROW_EXCEPTION);
            serde_json::from_str(&call.arguments).map(|args| thrown(ctx, call, args))
        };
        answered.unwrap_or_else(|error| {
            let message = format!("invalid arguments: {error}");
            let shown = SurfacedError::bounded(&call.name, ErrorKind::Validation, &message, limit)
                .with_suggestion(if call.name == ESCALATE {
                    r#"Call it as {"reason": "...", "severity": "low|medium|high|critical"}."#
                } else {
                    r#"Call it as {"reason": "..."}."#
                });
            Answered {
                result: ToolResult::error(call, shown.to_content()),
                stop: None,
            }
        })
    }
}

/// What the loop does with a call's outcome.
fn answered(call: &ToolCall, outcome: CallOutcome) -> Answered {
    match outcome {
        CallOutcome::Result(result) => Answered { result, stop: None },
        CallOutcome::Stop(terminated) => Answered {
            result: ToolResult::error(call, terminated.user_message),
            stop: Some(stopped(terminated)),
        },
    }
}

/// The model called `escalate`: the run ends with its reason, which the model also sees.
fn escalated(ctx: &RunContext, call: &ToolCall, args: EscalateArgs, limit: usize) -> Answered {
    let severity = args.severity();
    let shown = SurfacedError::bounded(ESCALATE, ErrorKind::Unknown, &args.reason, limit)
        .with_severity(severity);
    ctx.events().emit(Event::Escalated {
        tool: ESCALATE.to_owned(),
        reason: shown.message.clone(),
        severity,
    });
    Answered {
        result: ToolResult::error(call, shown.to_content()),
        stop: Some(RunError::Escalated {
            reason: args.reason,
            severity,
        }),
    }
}

/// The model called `throw_exception`: the run ends in code.
fn thrown(ctx: &RunContext, call: &ToolCall, args: ThrowArgs) -> Answered {
    ctx.events().emit(Event::Terminated {
        tool: THROW_EXCEPTION.to_owned(),
        kind: ErrorKind::Unknown,
    });
    let reason = TerminationReason::Thrown(args.reason);
    let terminated = Terminated::new(THROW_EXCEPTION.to_owned(), ErrorKind::Unknown, reason, None);
    Answered {
        result: ToolResult::error(call, terminated.user_message),
        stop: Some(RunError::Terminated(Box::new(terminated))),
    }
}
