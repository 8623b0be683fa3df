//! How a run stopped by a usage cap may still answer: the graceful stop's one last request,
//! and a refused turn's calls answered as not run.

use std::sync::Arc;

use super::model_call::Turn;
use crate::agent::counts::Counts;
use crate::agent::{AgentInner, AgentOutput, RunError};
use crate::chat::{ChatRequest, Message, ToolCall, ToolResult};
use crate::events::Event;
use crate::executor::RunContext;
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

impl<O: AgentOutput> AgentInner<O> {
    /// A run `ended` past a cap whose limits ask for a final answer: one last model request,
    /// without tools, and its text is the run's output. Any other end is given back as it was,
    /// and so is the cap's error when the last request fails or answers with tool calls.
    pub(in crate::agent) async fn stop_gracefully(
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
            (&*self.model, ctx.run_id().unwrap_or_default()),
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
