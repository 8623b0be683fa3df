//! The loop: ask the model, run the tool calls it makes (concurrently, answered in order), and
//! repeat until it answers in text, a call ends the run, or the turn cap is reached.

use std::sync::Arc;

use super::Run;
use super::final_answer::Verdict;
use super::model_call::{self, Turn};
use super::{compact, finish};
use crate::agent::durable::{PendingCall, unsaved};
use crate::agent::{AgentInner, AgentOutput, RunError};
use crate::chat::{ChatRequest, ChatResponse, Message, ToolCall, ToolSpec};
use crate::executor::RunContext;
use crate::observe;
use crate::retry::RunRetries;
use crate::usage::RunMeter;

impl<O: AgentOutput> Run<'_, O> {
    /// The run from its start to its result: recorded as started, driven, and, past a cap that
    /// asks for one, given a last answer; all of it within the run's deadline.
    pub(super) async fn drive_to_end(&mut self) -> Result<O, RunError> {
        let Some(limit) = self.deadline else {
            return self.started_and_driven().await;
        };
        let timed = tokio::time::timeout(limit, self.started_and_driven()).await;
        timed.unwrap_or_else(|_| {
            self.ctx.halting().halt();
            self.clock = None;
            Err(RunError::DeadlineExceeded { limit })
        })
    }

    async fn started_and_driven(&mut self) -> Result<O, RunError> {
        if !self.journal.started(&self.ctx, self.deadline).await {
            return Err(unsaved(&self.journal));
        }
        let ended = self.drive().await;
        if !matches!(ended, Err(RunError::UsageLimit(_))) {
            return ended;
        }
        self.stop_gracefully(ended).await
    }

    /// The loop: answers the calls a resumed run starts with, then asks the model and answers
    /// its calls until it answers in text, a call ends the run, or the turn cap is reached.
    async fn drive(&mut self) -> Result<O, RunError> {
        let agent = self.agent;
        self.request.tools = agent.offered_tools(&self.ctx);
        if let Some((asked, pending)) = self.resumed.take() {
            self.answer_resumed(asked, pending).await?;
        }
        while self.counts.turns < agent.max_turns {
            if self.ctx.cancellation().is_cancelled() {
                return Err(RunError::Cancelled);
            }
            self.counts.turns += 1;
            let response = match self.turn().await? {
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
                match self.final_answer(text) {
                    Verdict::Done(output) => return output,
                    Verdict::AskAgain => continue,
                }
            }
            self.answer_calls(response).await?;
        }
        Err(RunError::TurnCap {
            max_turns: agent.max_turns,
        })
    }

    /// One model turn, timed and observed; the model is sent earlier failures as summaries
    /// when the run compacts them, and the transcript keeps them whole.
    pub(super) async fn turn(&mut self) -> Result<Turn<O>, RunError> {
        let agent = self.agent;
        let started = self.clock.take();
        let run_id = self.ctx.shared_run_id();
        let whole = if self.compact_failures {
            compact::compacted(&self.request.messages)
                .map(|sent| std::mem::replace(&mut self.request.messages, sent))
        } else {
            None
        };
        let turn = observe::model_turn(
            (&*agent.model, run_id.as_deref().unwrap_or_default()),
            &agent.meters,
            started,
            || self.call_model(),
            Turn::response,
        );
        let (turn, ended) = turn.await;
        if let Some(whole) = whole {
            self.request.messages = whole;
        }
        // Until something else happens, the turn's end is the run's end too (a durable run
        // saves how it ended after its last turn: its end is read after that).
        self.clock = self.ctx.journal().reading_after_save(ended);
        turn
    }

    /// A turn's tool calls: refused past a tool-call cap, else recorded and answered.
    async fn answer_calls(&mut self, response: ChatResponse) -> Result<(), RunError> {
        let calls = response.tool_calls;
        self.clock = None;
        if let Err(capped) = self.counts.may_run(&calls) {
            finish::refuse_turn(&mut self.request, response.text, calls);
            return Err(capped);
        }
        // The transcript gets the turn only with its answers, so a run the deadline stops
        // mid-turn never hands back a call without its answer; the journal has it first.
        // The calls are answered from this message: no copy of them is made.
        let asked = Message::assistant(response.text, calls);
        self.ctx.learnt().begin_turn();
        let agent = self.agent;
        let known = |name: &str| agent.knows(name);
        let journal = &self.journal;
        let recorded = journal.turn(
            &self.request.messages,
            &asked,
            &known,
            &self.counts,
            &self.ctx,
        );
        if !recorded.await {
            return Err(unsaved(journal));
        }
        self.answer_turn(asked, None).await
    }

    /// Answers the calls of the turn a resumed run was in, from what was saved about each.
    async fn answer_resumed(
        &mut self,
        asked: Message,
        pending: Vec<PendingCall>,
    ) -> Result<(), RunError> {
        let calls: Vec<ToolCall> = pending.iter().map(|p| p.call.clone()).collect();
        if pending
            .iter()
            .any(|p| matches!(p.answer(), Some((_, Some(_)))))
        {
            // A saved answer ended the run: the calls it halted are not run again.
            self.ctx.halting().halt();
        }
        self.answer_turn(asked, Some((&calls, &pending))).await
    }
}

impl<O: AgentOutput> AgentInner<O> {
    /// The run's request, with `messages` so far: the loop adds to it turn by turn.
    pub(super) fn first_request(
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
}
