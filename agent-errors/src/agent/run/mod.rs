//! The loop: ask the model, run the tool calls it makes (concurrently, answered in order), and
//! repeat until it answers in text, a call ends the run, or the turn cap is reached.

mod answer;
mod compact;
mod context;
mod final_answer;
mod finish;
mod model_call;
mod observed;

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use final_answer::{Reasks, Verdict};
use model_call::Turn;
use observed::Ended;

pub(crate) use final_answer::AnswerRules;
pub use final_answer::{OutputPolicy, OutputValidator};

use super::counts::{Counts, SavedCounts, UsageMeter};
use super::durable::{
    self, CheckpointJournal, PendingCall, ResumeError, RunJournal, SavedRun, Seam, unsaved,
};
use super::stream::DeltaSender;
use super::{Agent, AgentInner, AgentOutput, RunError, RunOptions, RunOutcome};
use crate::chat::{ChatRequest, Message, ToolCall, ToolSpec};
use crate::events::RunReport;
use crate::executor::{Cancellation, RecoveryState, RunContext};
use crate::observe;
use crate::retry::RunRetries;
use crate::usage::{RunMeter, UsageLimits};

impl<O: AgentOutput> Agent<O> {
    /// Runs the agent on `input` and returns its output.
    pub async fn run(&self, input: impl Into<String>) -> Result<O, RunError> {
        let run = self.observed(
            super::conversation::one_message(input),
            RunOptions::default(),
        );
        run.await.outcome.result
    }

    /// Runs the agent; `cancellation.cancel()` ends the run with [`RunError::Cancelled`].
    pub async fn run_cancellable(
        &self,
        input: impl Into<String>,
        cancellation: Cancellation,
    ) -> Result<O, RunError> {
        let options = RunOptions::new().cancellation(cancellation);
        self.observed(super::conversation::one_message(input), options)
            .await
            .outcome
            .result
    }

    /// Runs the agent and returns the report (events, counts) and transcript with the result.
    pub async fn run_with_report(&self, input: impl Into<String>) -> RunOutcome<O> {
        let run = self.observed(
            super::conversation::one_message(input),
            RunOptions::default(),
        );
        run.await.outcome
    }

    /// Runs the agent with these options.
    pub async fn run_with(&self, input: impl Into<String>, options: RunOptions) -> RunOutcome<O> {
        self.observed(super::conversation::one_message(input), options)
            .await
            .outcome
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
        self.observed(history, options).await.outcome
    }

    /// Goes on with the durable run `run_id` from its last checkpoint, on this agent (which
    /// must have the tools the run was using): after a crash, in this process or another.
    ///
    /// Calls that had their results are not run again. A call that was sleeping before a retry
    /// sleeps its saved delay and retries, its spent retries still spent. A call that was
    /// running is run again when its tool is idempotent (with the same
    /// [`IdempotencyKey`](crate::call::IdempotencyKey)); any other is a failure of kind
    /// [`OutcomeUnknown`](crate::ErrorKind::OutcomeUnknown), which its `outcome_unknown` policy
    /// answers (by default an error result telling the model the call was interrupted). The
    /// per-run breaker, dropped tools, permission denials, retries spent, counts and usage carry
    /// over, and the run's deadline is what was left of it at the last save, not a fresh one.
    /// Every resumed call passes the permission hook (and the other refusals a call meets)
    /// again, with the arguments it will send, before its tool runs.
    ///
    /// A run that already finished is not run again: the result is
    /// [`ResumeError::Finished`] with how it ended, and the saved transcript. A checkpoint whose
    /// transcript breaks the one-result rule is refused with
    /// [`ResumeError::BrokenTranscript`], naming the call. A call left without a result whose
    /// tool this agent lacks is refused with [`ResumeError::UnknownTool`]; the transcript
    /// handed back then answers it (and every other call of its turn) with an error result.
    pub async fn resume(&self, run_id: impl Into<String>, options: RunOptions) -> RunOutcome<O> {
        let inner = &self.inner;
        let run_id: String = run_id.into();
        let run = Box::pin(inner.resume(run_id.clone(), options));
        let started = Instant::now();
        let agent = (&*inner.name, &*inner.model);
        let ended = observe::run(agent, (&run_id, true), &inner.meters, started, run).await;
        ended.outcome
    }
}

/// Where a run starts. A new run starts from its transcript; a resumed run is a new run that
/// starts from its checkpoint: the calls of its last turn still to answer, its counts, what it
/// had learnt, and the deadline it had left.
struct Start {
    transcript: Vec<Message>,
    /// The turn whose calls are still to answer, and what was saved about each; like any turn,
    /// it joins the transcript only with its answers.
    pending: Option<(Message, Vec<PendingCall>)>,
    /// What a resumed run had counted; a new run counts from zero.
    counts: Option<SavedCounts>,
    /// What the run had learnt; a new run has learnt nothing, and restores nothing.
    recovery: Option<RecoveryState>,
    deadline: Option<Duration>,
    /// The caps the run is held to: a resumed run keeps those it was started with.
    usage_limits: Arc<UsageLimits>,
    /// The run's start, for its first model turn to start at too, when nothing else timed or
    /// waited on (a checkpoint save, a resumed turn's calls) comes between them.
    clock: Option<Instant>,
}

/// `result` once the run's end is recorded: a save that fails makes it the run's error. A run
/// waiting for a person keeps its checkpoint as it was (resumed, it goes on), and a run whose
/// save failed records nothing more.
async fn recorded_end<O>(
    journal: &dyn RunJournal,
    transcript: &[Message],
    counts: &Counts,
    result: Result<O, RunError>,
) -> Result<O, RunError> {
    if matches!(
        result,
        Err(RunError::Checkpoint(_) | RunError::WaitingForPerson { .. })
    ) {
        return result;
    }
    let outcome = result.as_ref().map(|_| ());
    if journal.finished(transcript, counts, outcome).await {
        result
    } else {
        Err(unsaved(journal))
    }
}

impl Start {
    /// Where a run resumed from `saved` starts: the calls of its last turn still to answer, its
    /// counts, what it had learnt and what was left of its deadline (`deadline` when it saved
    /// none).
    fn resumed(
        saved: &SavedRun,
        usage_limits: Arc<UsageLimits>,
        deadline: Option<Duration>,
    ) -> Start {
        let mut transcript = saved.transcript.clone();
        // The saved transcript ends with the turn being answered (checked when it was read).
        let pending = if saved.pending.is_empty() {
            None
        } else {
            transcript.pop().map(|asked| (asked, saved.pending.clone()))
        };
        Start {
            transcript,
            pending,
            counts: Some(saved.counts.clone()),
            recovery: Some(saved.recovery.clone()),
            deadline: saved
                .deadline_left_ms
                .map(Duration::from_millis)
                .or(deadline),
            usage_limits,
            clock: None,
        }
    }
}

impl<O: AgentOutput> AgentInner<O> {
    pub(in crate::agent) async fn run(
        &self,
        history: Vec<Message>,
        mut options: RunOptions,
        started: Instant,
    ) -> Ended<O> {
        let run_id = options.run_id.take().unwrap_or_else(durable::new_run_id);
        if let Err(error) = super::conversation::check_history(&history) {
            return Ended::from(RunOutcome {
                result: Err(RunError::InvalidHistory(error)),
                report: RunReport::default(),
                transcript: history,
                run_id,
            });
        }
        let transcript =
            super::conversation::with_system_prompt(self.system_prompt.as_deref(), history);
        if let Err(error) = self.check_run_limits(&options) {
            return Ended::from(RunOutcome {
                result: Err(error),
                report: RunReport::default(),
                transcript,
                run_id,
            });
        }
        let usage_limits =
            (options.usage_limits.take()).unwrap_or_else(|| self.usage_limits.clone());
        // An engine that replays the run keeps it in its own journal: a store beside it would
        // refuse the replayed run's id as taken.
        let seam = match (options.journal.take(), &self.checkpoints) {
            (Some(engine), _) => engine,
            (None, Some(store)) => {
                let mut saved = SavedRun::new(transcript.clone());
                saved.usage_limits = Some(UsageLimits::clone(&usage_limits));
                saved.signed_answers = self.approvals.key.is_some();
                let store = Arc::clone(store);
                let every = self.snapshot_every;
                let journal = CheckpointJournal::new(store, run_id.clone(), saved, 0, every);
                Seam::of(Arc::new(journal))
            }
            (None, None) => Seam::none(),
        };
        let start = Start {
            transcript,
            pending: None,
            counts: None,
            recovery: None,
            deadline: self.limits.run_deadline,
            usage_limits,
            // A run whose journal saves records its start before its first turn.
            clock: (!seam.calls.records()).then_some(started),
        };
        let mut ended = self.go(run_id, seam, start, options).await;
        context::name_a_taken_id(&mut ended.outcome.result);
        ended
    }

    async fn resume(&self, run_id: String, mut options: RunOptions) -> Ended<O> {
        let refused = |error: RunError, transcript| {
            Ended::from(RunOutcome {
                result: Err(error.redacted()),
                report: RunReport::default(),
                transcript,
                run_id: run_id.clone(),
            })
        };
        let Some(store) = &self.checkpoints else {
            return refused(RunError::Resume(ResumeError::NoStore), Vec::new());
        };
        let knows = |name: &str| self.knows(name);
        let limit = self.limits.max_message_chars;
        let (mut saved, next) = match durable::resumable(&**store, &run_id, knows, limit).await {
            Ok(resumable) => resumable,
            Err((error, transcript)) => return refused(error, transcript),
        };
        // Its answers must be signed: an agent without the key could not check one.
        if saved.signed_answers && self.approvals.key.is_none() {
            let error = ResumeError::AnswerKeyRequired {
                run_id: run_id.clone(),
            };
            return refused(RunError::Resume(error), Vec::new());
        }
        if let Err(error) = self.check_run_limits(&options) {
            return refused(error, Vec::new());
        }
        let usage_limits = match options.usage_limits.take() {
            Some(limits) => limits,
            None => saved
                .usage_limits
                .clone()
                .map_or_else(|| self.usage_limits.clone(), Arc::new),
        };
        saved.usage_limits = Some(UsageLimits::clone(&usage_limits));
        let start = Start::resumed(&saved, usage_limits, self.limits.run_deadline);
        let store = Arc::clone(store);
        let every = self.snapshot_every;
        let journal = CheckpointJournal::new(store, run_id.clone(), saved, next, every);
        self.go(run_id, Seam::of(Arc::new(journal)), start, options)
            .await
    }

    /// Whether a call of `name` reaches a tool of this agent.
    fn knows(&self, name: &str) -> bool {
        self.registry.tool(name).is_some() || self.builtins.enabled(name)
    }

    async fn go(
        &self,
        run_id: String,
        seam: Seam,
        start: Start,
        mut options: RunOptions,
    ) -> Ended<O> {
        let refused = self
            .check_context(&options.extensions)
            .and_then(|()| context::check_timer(&*seam.calls));
        if let Err(refused) = refused {
            return Ended::from(RunOutcome {
                result: Err(refused),
                report: RunReport::default(),
                transcript: start.transcript,
                run_id,
            });
        }
        let deltas = options.deltas.take().map(DeltaSender::new);
        let compact_failures = options.compact_failures;
        let meter = RunMeter::for_run(&start.usage_limits, &options.caller_meter);
        let ctx = self.context(options, &run_id, seam.calls, meter.clone());
        if let Some(recovery) = start.recovery {
            ctx.restore(recovery);
        }
        let journal = &*seam.run;
        let mut request = self.first_request(&ctx, start.transcript, meter.clone());
        let mut counts = Counts::new(deltas, UsageMeter::new(start.usage_limits, meter));
        if let Some(saved) = start.counts {
            counts.restore(saved);
        }
        if let Some((_, pending)) = &start.pending {
            let tools = pending
                .iter()
                .filter(|p| self.registry.tool(&p.call.name).is_some());
            counts.count_resumed(tools.map(|p| (&*p.call.name, p.progress.attempts)));
        }
        counts.clock = start.clock;
        counts.compact_failures = compact_failures;
        let driven = async {
            if !journal.started(&ctx, start.deadline).await {
                return Err(unsaved(journal));
            }
            let ended = self
                .drive(&ctx, &mut request, &mut counts, journal, start.pending)
                .await;
            if !matches!(ended, Err(RunError::UsageLimit(_))) {
                return ended;
            }
            self.stop_gracefully(&ctx, &mut request, &mut counts, ended)
                .await
        };
        let result = match start.deadline {
            None => driven.await,
            Some(limit) => match tokio::time::timeout(limit, driven).await {
                Ok(result) => result,
                Err(_) => {
                    ctx.halting().halt();
                    counts.clock = None;
                    Err(RunError::DeadlineExceeded { limit })
                }
            },
        };
        let result = recorded_end(journal, &request.messages, &counts, result).await;
        ctx.events().close();
        if let Err(error) = &result {
            let error = crate::redact::redact(&error.to_string()).into_owned();
            tracing::warn!(error = %crate::escapes::Visible::of(&error), "run ended without an output");
        }
        let report = RunReport {
            events: ctx.events().take(),
            turns: counts.turns,
            model_calls: counts.model_calls,
            tool_calls: counts.tool_calls,
            usage: counts.usage,
        };
        let (transcript, at) = (request.messages, counts.clock);
        let outcome = RunOutcome {
            result,
            report,
            transcript,
            run_id,
        };
        Ended { outcome, at }
    }

    /// The run's request, with `messages` so far: the loop adds to it turn by turn.
    fn first_request(
        &self,
        ctx: &RunContext,
        messages: Vec<Message>,
        meter: RunMeter,
    ) -> ChatRequest {
        // Built in place: a `with_*` chain moves the whole request once per setter.
        ChatRequest {
            messages,
            tools: self.offered_tools(ctx),
            max_tokens: None,
            options: self.options.clone(),
            source: self.source.clone(),
            events: ctx.event_sink(),
            retries: RunRetries::new(Arc::clone(ctx.retries())),
            meter,
        }
    }

    /// The tools offered to the model: shared as they are until `degrade` drops one.
    pub(in crate::agent) fn offered_tools(&self, ctx: &RunContext) -> Arc<[ToolSpec]> {
        if !self.offered.iter().any(|spec| ctx.is_degraded(&spec.name)) {
            return Arc::clone(&self.offered);
        }
        self.offered
            .iter()
            .filter(|spec| !ctx.is_degraded(&spec.name))
            .cloned()
            .collect()
    }

    /// Answers the calls of the turn a resumed run was in, from what was saved about each.
    async fn answer_resumed(
        &self,
        ctx: &RunContext,
        request: &mut ChatRequest,
        journal: &dyn RunJournal,
        asked: Message,
        pending: Vec<PendingCall>,
    ) -> Result<(), RunError> {
        let calls: Vec<ToolCall> = pending.iter().map(|p| p.call.clone()).collect();
        if pending
            .iter()
            .any(|p| matches!(p.answer(), Some((_, Some(_)))))
        {
            // A saved answer ended the run: the calls it halted are not run again.
            ctx.halting().halt();
        }
        self.answer_turn(ctx, request, journal, asked, Some((&calls, &pending)))
            .await
    }

    /// The loop: answers the calls a resumed run starts with, then asks the model and answers
    /// its calls until it answers in text, a call ends the run, or the turn cap is reached.
    async fn drive(
        &self,
        ctx: &RunContext,
        request: &mut ChatRequest,
        counts: &mut Counts,
        journal: &dyn RunJournal,
        pending: Option<(Message, Vec<PendingCall>)>,
    ) -> Result<O, RunError> {
        request.tools = self.offered_tools(ctx);
        if let Some((asked, pending)) = pending {
            self.answer_resumed(ctx, request, journal, asked, pending)
                .await?;
        }
        let mut reasks = Reasks::default();
        while counts.turns < self.max_turns {
            if ctx.cancellation().is_cancelled() {
                return Err(RunError::Cancelled);
            }
            counts.turns += 1;
            let started = counts.clock.take();
            let whole = if counts.compact_failures {
                compact::compacted(&request.messages)
                    .map(|sent| std::mem::replace(&mut request.messages, sent))
            } else {
                None
            };
            let turn = observe::model_turn(
                (&*self.model, ctx.run_id().unwrap_or_default()),
                &self.meters,
                started,
                || self.call_model(ctx, request, counts),
                Turn::response,
            );
            let (turn, ended) = turn.await;
            if let Some(whole) = whole {
                request.messages = whole;
            }
            // Until something else happens, the turn's end is the run's end too (a durable run
            // saves how it ended after its last turn: its end is read after that).
            counts.clock = (!journal.records()).then_some(ended);
            let response = match turn? {
                Turn::Response(response) => response,
                Turn::RespondWith(output) => return Ok(output),
            };
            if let Some(refused) = model_call::refusal(&response) {
                return Err(refused);
            }
            if response.tool_calls.is_empty() {
                let Some(text) = response.text else {
                    return Err(RunError::EmptyResponse);
                };
                match self.final_answer(ctx, request, counts, &mut reasks, text) {
                    Verdict::Done(output) => return output,
                    Verdict::AskAgain => continue,
                }
            }

            let calls = response.tool_calls;
            counts.clock = None;
            if let Err(capped) = counts.may_run(&calls) {
                finish::refuse_turn(request, response.text, calls);
                return Err(capped);
            }
            // The transcript gets the turn only with its answers, so a run the deadline stops
            // mid-turn never hands back a call without its answer; the journal has it first.
            // The calls are answered from this message: no copy of them is made.
            let asked = Message::assistant(response.text, calls);
            ctx.learnt().begin_turn();
            let known = |name: &str| self.knows(name);
            let recorded = journal.turn(&request.messages, &asked, &known, counts, ctx);
            if !recorded.await {
                return Err(unsaved(journal));
            }
            self.answer_turn(ctx, request, journal, asked, None).await?;
        }
        Err(RunError::TurnCap {
            max_turns: self.max_turns,
        })
    }
}
