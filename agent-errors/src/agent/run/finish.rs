//! How a run ends: past a cap that asks for one, the graceful stop's one last request (and a
//! refused turn's calls answered as not run); then the end recorded and the outcome made.

use std::sync::Arc;

use super::Run;
use super::model_call::Turn;
use super::observed::Ended;
use crate::agent::durable::unsaved;
use crate::agent::{AgentOutput, RunError, RunOutcome};
use crate::chat::{ChatRequest, Message, ToolCall, ToolResult};
use crate::events::{Event, RunReport};
use crate::observe;

/// A turn whose calls were refused joins the transcript with each call answered as not run,
/// so the transcript keeps one result per call.
pub(in crate::agent) fn refuse_turn(
    request: &mut ChatRequest,
    text: Option<String>,
    calls: Vec<ToolCall>,
) {
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

impl<O: AgentOutput> Run<'_, O> {
    /// A run `ended` past a cap whose limits ask for a final answer: one last model request,
    /// without tools, and its text is the run's output. Any other end is given back as it was,
    /// and so is the cap's error when the last request fails or answers with tool calls.
    pub(super) async fn stop_gracefully(
        &mut self,
        ended: Result<O, RunError>,
    ) -> Result<O, RunError> {
        let error = match ended {
            Err(error) if self.counts.asks_final_answer(&error) => error,
            other => return other,
        };
        let RunError::UsageLimit(exceeded) = &error else {
            return Err(error);
        };
        self.ctx.events().emit(Event::UsageLimitReached {
            limit: exceeded.limit.clone(),
        });
        let request = &mut self.request;
        request
            .messages
            .push(Message::user(exceeded.limit.final_answer_prompt()));
        request.tools = Arc::from(Vec::new());
        request.options.tool_choice = None;
        request.options.parallel_tool_calls = None;
        let agent = self.agent;
        let started = self.clock.take();
        let run_id = self.ctx.shared_run_id();
        let turn = observe::model_turn(
            (&*agent.model, run_id.as_deref().unwrap_or_default()),
            &agent.meters,
            started,
            || self.call_model(),
            Turn::response,
        );
        let response = match turn.await.0 {
            Ok(Turn::Response(response)) => response,
            Ok(Turn::RespondWith(output)) => return Ok(output),
            Err(_) => {
                self.request.messages.pop();
                return Err(error);
            }
        };
        match response.text {
            Some(text) if response.tool_calls.is_empty() => {
                let answer = Message::assistant(Some(text.clone()), Vec::new());
                self.request.messages.push(answer);
                // The caps are reached: the answer is read as any is, but not asked again.
                let read = agent.read_answer(&text);
                read.or_else(|refused| agent.give_up(&mut Default::default(), refused, &text))
            }
            _ => {
                self.request.messages.pop();
                Err(error)
            }
        }
    }

    /// The run's end: recorded by its journal (a save that fails makes it the run's error; a
    /// run waiting for a person keeps its checkpoint as it was, and a run whose save failed
    /// records nothing more), its events closed, and its outcome made.
    pub(super) async fn finish(self, result: Result<O, RunError>) -> Ended<O> {
        let result = self.recorded_end(result).await;
        let ctx = &self.ctx;
        ctx.events().close();
        if let Err(error) = &result {
            let error = crate::redact::redact(&error.to_string()).into_owned();
            tracing::warn!(error = %crate::escapes::Visible::of(&error), "run ended without an output");
        }
        let counts = &self.counts;
        let report = RunReport {
            events: ctx.events().take(),
            turns: counts.turns,
            model_calls: counts.model_calls,
            tool_calls: counts.tool_calls,
            usage: counts.usage,
        };
        let outcome = RunOutcome {
            result,
            report,
            transcript: self.request.messages,
            run_id: self.run_id,
        };
        Ended {
            outcome,
            at: self.clock,
        }
    }

    async fn recorded_end(&self, result: Result<O, RunError>) -> Result<O, RunError> {
        if matches!(
            result,
            Err(RunError::Checkpoint(_) | RunError::WaitingForPerson { .. })
        ) {
            return result;
        }
        let journal = &self.journal;
        let outcome = result.as_ref().map(|_| ());
        if journal
            .finished(&self.request.messages, &self.counts, outcome)
            .await
        {
            result
        } else {
            Err(unsaved(journal))
        }
    }
}
