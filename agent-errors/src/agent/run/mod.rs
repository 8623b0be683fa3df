//! One run of the agent, as a value: a [`Run`] holds what one run carries (the agent, its
//! context, the request that grows turn by turn, its counts, its journal, the re-ask state, where
//! it streams, the clock) and its methods are the loop. A run passes through these states:
//!
//! ```text
//! Start (new, or resumed from a checkpoint)
//!   │ Run::start: checks the context, builds the run's context, request and counts
//!   ▼
//! Started ── the journal records it (a durable run saves its start) ──┐
//!   │ Run::drive                                                      │
//!   ▼                                                                 │
//! ┌─► Asking: one model turn (Run::turn, on_llm_error inside it)     │
//! │     │ text ─► Answered: read, checked, maybe asked again ─────────┤
//! │     │ tool calls                                                  │
//! │     ▼                                                             │
//! └── Answering: every call gets exactly one answer (Run::answer_turn)│
//!       │ a call ends the run, the turn cap, a cap, the deadline ─────┤
//!                                                                     ▼
//!                       Stopping: past a cap that asks for one, a last answer (Run::stop_gracefully)
//!                                                                     │
//!                       Finished: the journal records the end, the report is made (Run::finish)
//! ```
//!
//! A resumed run starts in Answering, with the calls of the turn its checkpoint was in.
//!
//! The files follow the states: `start.rs` (a new or resumed run made a [`Run`]), `drive.rs`
//! (the loop and its model turns), `model_call.rs` (one model request under `on_llm_error`),
//! `answer.rs` (a turn's calls answered), `final_answer.rs` (a text read as the output),
//! `finish.rs` (the graceful stop and the run's end).

mod answer;
mod compact;
mod context;
mod drive;
mod final_answer;
mod finish;
mod model_call;
mod observed;
mod start;

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use final_answer::Reasks;

pub(crate) use final_answer::AnswerRules;
pub use final_answer::{OutputPolicy, OutputValidator};

use super::counts::Counts;
use super::durable::{PendingCall, SavePoints};
use super::stream::DeltaSender;
use super::{Agent, AgentInner, AgentOutput, RunError, RunOptions, RunOutcome};
use crate::chat::{ChatRequest, Message};
use crate::executor::{Cancellation, RunContext};
use crate::model::ChatModel;
use crate::observe;

/// One run, from its start to its end: what it carries, and (in its methods) the loop.
pub(crate) struct Run<'a, O> {
    agent: &'a AgentInner<O>,
    run_id: String,
    ctx: RunContext,
    /// The loop's face of the run's journal: its save points.
    journal: SavePoints,
    /// The request sent each turn: the transcript so far, the tools offered, the options.
    request: ChatRequest,
    counts: Counts,
    reasks: Reasks<O>,
    /// The turn a resumed run was in, and what was saved about each of its calls: answered
    /// before the model is asked again. Like any turn, it joins the transcript only with its
    /// answers.
    resumed: Option<(Message, Vec<PendingCall>)>,
    /// Where the run streams the model's answers, if anywhere.
    deltas: Option<DeltaSender>,
    /// The model answering the run's requests when it is not the agent's own: the output
    /// policy's fallback, once it took over.
    fallback: Option<Arc<dyn ChatModel>>,
    /// A reading of the clock nothing timed has happened since (the run's start until its first
    /// turn, a turn's end until the run does something else), for the next timing to start or
    /// end at instead of reading the clock again.
    clock: Option<Instant>,
    /// Whether the model is sent earlier failures of a tool as one-line summaries.
    compact_failures: bool,
    /// The run's deadline: what is left of it for a resumed run.
    deadline: Option<Duration>,
}

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
    /// [`ResumeError::Finished`](crate::run::ResumeError::Finished) with how it ended, and the
    /// saved transcript. A checkpoint whose transcript breaks the one-result rule is refused
    /// with [`ResumeError::BrokenTranscript`](crate::run::ResumeError::BrokenTranscript),
    /// naming the call. A call left without a result whose tool this agent lacks is refused
    /// with [`ResumeError::UnknownTool`](crate::run::ResumeError::UnknownTool); the transcript
    /// handed back then answers it (and every other call of its turn) with an error result.
    pub async fn resume(&self, run_id: impl Into<String>, options: RunOptions) -> RunOutcome<O> {
        let inner = &self.inner;
        let run_id: String = run_id.into();
        let span = observe::spans::invoke_agent(&inner.name, &*inner.model, (&run_id, true));
        let run = Box::pin(inner.resume(run_id, options));
        let started = Instant::now();
        let ended = observe::run((&inner.name, span), &inner.meters, started, run).await;
        ended.outcome
    }
}
