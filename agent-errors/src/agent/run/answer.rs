//! Answering a turn's calls: each call gets exactly one answer (a saved one, a built-in's, or
//! the executor's), recorded as it comes, and the turn's answers say whether the run goes on.

use super::Run;
use crate::agent::builtins::{ESCALATE, EscalateArgs, THROW_EXCEPTION, ThrowArgs};
use crate::agent::durable::{PendingCall, SavePoints};
use crate::agent::{AgentInner, AgentOutput, RunError};
use crate::chat::{Message, ToolCall, ToolResult};
use crate::classify::ErrorKind;
use crate::events::Event;
use crate::executor::{
    self, CANCELLED, CallOutcome, CallStart, RunContext, Terminated, TerminationReason,
};
use crate::sanitize::SurfacedError;

/// What the loop does with one tool call: the result the transcript records, and whether it ends
/// the run.
struct Answered {
    result: ToolResult,
    stop: Option<RunError>,
}

/// Why a batch of calls ends the run, if it does: the first stop in call order, except that a
/// tripped breaker gives way to any other stop (an auth failure says more about what to fix),
/// and calls waiting for a person give way to both; calls that wait are named together.
fn batch_verdict(mut stops: Vec<RunError>) -> Option<RunError> {
    if stops.is_empty() {
        return None;
    }
    if stops.iter().all(waits_for_person) {
        return Some(all_waiting(stops));
    }
    stops.retain(|stop| !waits_for_person(stop));
    let is_trip = |stop: &RunError| matches!(stop, RunError::BreakerTripped { .. });
    let first_other = stops.iter().position(|s| !is_trip(s));
    let mut stops = stops;
    match first_other {
        Some(i) => Some(stops.swap_remove(i)),
        None => stops.into_iter().next(),
    }
}

/// The calls of a turn that all wait for a person, as one stop naming each.
fn all_waiting(waits: Vec<RunError>) -> RunError {
    let pending = waits.into_iter().flat_map(|wait| match wait {
        RunError::WaitingForPerson { pending } => pending,
        _ => Vec::new(),
    });
    RunError::WaitingForPerson {
        pending: pending.collect(),
    }
}

/// Whether `stop` is a call waiting for a person: it ends the run once the turn is answered,
/// without halting the turn's other calls.
fn waits_for_person(stop: &RunError) -> bool {
    matches!(stop, RunError::WaitingForPerson { .. })
}

/// The run error a tool's stop becomes.
fn stopped(terminated: Box<Terminated>) -> RunError {
    match terminated.reason {
        TerminationReason::WaitingForPerson(pending) => RunError::WaitingForPerson {
            pending: vec![*pending],
        },
        TerminationReason::BreakerTripped { failures } => RunError::BreakerTripped {
            tool: terminated.tool,
            failures,
        },
        _ => RunError::Terminated(terminated),
    }
}

impl<O: AgentOutput> Run<'_, O> {
    /// Answers every call of a turn, in order, adds the turn (`asked`) and the answers to the
    /// transcript, and says whether the run goes on. The calls are those `asked` makes, or for
    /// a resumed turn those its checkpoint saved as pending, with what it saved about each.
    pub(super) async fn answer_turn(
        &mut self,
        asked: Message,
        resumed: Option<(&[ToolCall], &[PendingCall])>,
    ) -> Result<(), RunError> {
        let (agent, ctx, journal) = (self.agent, &self.ctx, &self.journal);
        let request = &mut self.request;
        let (calls, saved) = match (resumed, &asked) {
            (Some((calls, saved)), _) => (calls, saved),
            (None, Message::Assistant { tool_calls, .. }) => (&tool_calls[..], &[][..]),
            (None, _) => (&[][..], &[][..]),
        };
        let ends_run = |a: &Answered| a.stop.as_ref().is_some_and(|stop| !waits_for_person(stop));
        let mut stops = Vec::new();
        if let [call] = calls {
            // One call, as most turns make: awaited as it is, with no join to build around it
            // and no box to keep the join from copying it.
            let answered = agent
                .answer(ctx, call, journal, saved_of(saved, call))
                .await;
            if ends_run(&answered) {
                ctx.halting().halt();
            }
            request.messages.push(asked);
            request.messages.push(Message::Tool(answered.result));
            stops.extend(answered.stop);
        } else {
            // Boxed: a call's future is large (the whole recovery ladder), and the join would
            // otherwise copy it as it collects and polls the turn's calls.
            let answer = |call| Box::pin(agent.answer(ctx, call, journal, saved_of(saved, call)));
            let answers = executor::answer_all(ctx, calls, answer, ends_run).await;
            request.messages.push(asked);
            for answered in answers {
                request.messages.push(Message::Tool(answered.result));
                stops.extend(answered.stop);
            }
        }
        if let Some(error) = journal.failure() {
            return Err(RunError::Checkpoint(error));
        }
        if ctx.cancellation().is_cancelled() {
            return Err(RunError::Cancelled);
        }
        // A path of the turn (a retry, a fallback tool, a fixer agent) went past a cap: that
        // ends the run, whatever the calls it halted answered.
        if let Some(capped) = ctx.meter().exceeded() {
            return Err(RunError::UsageLimit(capped));
        }
        if let Some(verdict) = batch_verdict(stops) {
            return Err(verdict);
        }
        // A degraded tool is not offered again.
        if request.tools.iter().any(|spec| ctx.is_degraded(&spec.name)) {
            request.tools = agent.offered_tools(ctx);
        }
        Ok(())
    }
}

impl<O: AgentOutput> AgentInner<O> {
    /// Exactly one answer for one call, recorded: a saved answer is given back as it was, a
    /// call a resumed run left unanswered goes on from how far it got, any other starts fresh.
    async fn answer(
        &self,
        ctx: &RunContext,
        call: &ToolCall,
        journal: &SavePoints,
        saved: Option<&PendingCall>,
    ) -> Answered {
        if let Some((result, stop)) = saved.and_then(PendingCall::answer) {
            return Answered { result, stop };
        }
        let answered = if self.builtins.enabled(&call.name) {
            self.answer_builtin(ctx, call)
        } else {
            let start = match saved {
                Some(pending) => CallStart::From(&pending.progress),
                None => CallStart::Fresh,
            };
            answered(
                call,
                executor::execute(&self.registry, ctx, call, start).await,
            )
        };
        let stop = answered.stop.as_ref();
        if stop.is_some_and(waits_for_person) {
            // Saved as waiting, not answered: a resumed run asks again.
            return answered;
        }
        // A record that was not kept halts the run; the turn's end reports it.
        journal
            .answered(&call.id, &answered.result, stop, ctx)
            .await;
        answered
    }

    fn answer_builtin(&self, ctx: &RunContext, call: &ToolCall) -> Answered {
        if ctx.cancellation().is_cancelled() {
            return Answered {
                result: ToolResult::error(call, CANCELLED),
                stop: None,
            };
        }
        let limit = self.limits.max_message_chars;
        let answered = if &*call.name == ESCALATE {
            serde_json::from_str(&call.arguments).map(|args| escalated(ctx, call, args, limit))
        } else {
            debug_assert_eq!(&*call.name, THROW_EXCEPTION);
            serde_json::from_str(&call.arguments).map(|args| thrown(ctx, call, args))
        };
        answered.unwrap_or_else(|error| {
            let message = format!("invalid arguments: {error}");
            let shown = SurfacedError::bounded(&call.name, ErrorKind::Validation, &message, limit)
                .with_suggestion(if &*call.name == ESCALATE {
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

/// What a resumed run saved about `call`, if anything.
fn saved_of<'a>(saved: &'a [PendingCall], call: &ToolCall) -> Option<&'a PendingCall> {
    saved.iter().find(|p| p.call.id == call.id)
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
            reason: crate::redact::redact(&args.reason).into_owned(),
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
