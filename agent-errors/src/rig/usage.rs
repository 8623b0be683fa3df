//! Usage limits inside rig's own loop: the guard's hook counts one rig run's model requests,
//! tokens and tool calls (in the run's scratchpad, so a run's count is its own) and, at a cap,
//! ends rig's run or asks the model once more, without tools, for its final answer, as this
//! library's loop does.

use std::sync::Arc;

use rig_agent::agent::hook::{
    CompletionCallAction, DispatchAction, ModelTurnAction, ModelTurnFinished, RequestPatch,
    Scratchpad,
};
use rig_core::completion::{AssistantContent, Document};

use crate::events::Event;
use crate::executor::RunContext;
use crate::usage::{
    Answerer, OnExceed, RunMeter, Usage, UsageLimit, UsageLimitExceeded, UsageLimits,
};

/// One rig run's meter (the run's one meter, as this library's loop keeps it) and where its
/// graceful stop is.
#[derive(Debug, Clone, Default)]
pub(super) struct RigRunUsage {
    meter: RunMeter,
    /// The cap the run went past when its limits ask for a final answer: no call runs any more
    /// and the next request is the last.
    over: Option<Box<UsageLimitExceeded>>,
    /// The last request was made: nothing more is let through.
    last_made: bool,
}

impl RigRunUsage {
    /// The meter of a rig run that starts now.
    pub(super) fn start(pad: &Scratchpad, limits: &Arc<UsageLimits>) {
        let meter = RunMeter::for_run(limits, &RunMeter::default());
        pad.insert(RigRunUsage {
            meter,
            ..RigRunUsage::default()
        });
    }

    /// The run went past a cap: true when its limits ask for a final answer (now asked for),
    /// false when the run must end.
    fn goes_past(
        &mut self,
        limits: &UsageLimits,
        run: &RunContext,
        cap: &UsageLimitExceeded,
    ) -> bool {
        if limits.on_exceeding(&cap.limit) != OnExceed::FinalAnswer || self.over.is_some() {
            return false;
        }
        run.events().emit(Event::UsageLimitReached {
            limit: cap.limit.clone(),
        });
        self.over = Some(Box::new(cap.clone()));
        true
    }

    /// Why the run ends now its last request was made: the cap it went past.
    fn stopped(&self, pad: &Scratchpad) -> String {
        match &self.over {
            Some(over) => end(pad, over.clone()),
            None => "the run went past its usage limit".to_owned(),
        }
    }
}

/// The cap a rig run was ended on, kept in its scratchpad until the guard's hook takes it as
/// the guard's stop.
#[derive(Debug, Clone)]
struct Ended(Box<UsageLimitExceeded>);

/// The run ends on `cap`: kept for the hook, and rig's error says it.
fn end(pad: &Scratchpad, cap: Box<UsageLimitExceeded>) -> String {
    let reason = cap.to_string();
    pad.insert(Ended(cap));
    reason
}

/// The cap the run was just ended on, once.
pub(super) fn ended(pad: &Scratchpad) -> Option<Box<UsageLimitExceeded>> {
    pad.remove::<Ended>().map(|Ended(cap)| cap)
}

/// Before a model request: counted, the last one of a graceful stop (no tools, told to answer
/// now), or refused (the run ends) past a cap.
pub(super) fn before_request(
    pad: &Scratchpad,
    limits: &UsageLimits,
    run: &RunContext,
) -> CompletionCallAction {
    pad.update(|used: &mut RigRunUsage| {
        if used.last_made {
            return CompletionCallAction::stop(used.stopped(pad));
        }
        if used.over.is_none() {
            match used.meter.request() {
                Ok(()) => return CompletionCallAction::Continue,
                Err(refused) if !used.goes_past(limits, run, &refused) => {
                    return CompletionCallAction::stop(end(pad, refused));
                }
                Err(_) => {}
            }
        }
        if let Err(refused) = used.meter.final_request() {
            return CompletionCallAction::stop(end(pad, refused));
        }
        used.last_made = true;
        let limit = used.over.as_ref().map(|over| over.limit.clone());
        CompletionCallAction::patch(final_request(&limit.unwrap_or(UsageLimit::Requests)))
    })
}

/// After a model turn: its tokens and cost counted (a turn that reports none is estimated, and
/// said once), then its tool calls checked against the tool-call caps; past a cap the run ends,
/// or its calls are not run and the next request is the last.
pub(super) fn after_turn(
    pad: &Scratchpad,
    limits: &UsageLimits,
    run: &RunContext,
    turn: &ModelTurnFinished<'_>,
) -> ModelTurnAction {
    pad.update(|used: &mut RigRunUsage| {
        let model = turn.raw.get("model").and_then(|model| model.as_str());
        let model = model.unwrap_or_default();
        let reported = turn.usage.is_reported().then(|| {
            let (input, output) = (turn.usage.input_tokens, turn.usage.output_tokens);
            Usage::new(input.unwrap_or(0), output.unwrap_or(0))
        });
        let charged = (used.meter).answered(
            Answerer::asked(model),
            reported,
            || estimate(turn.content),
            used.over.is_none(),
        );
        if charged.first_missing {
            run.events().emit(Event::UsageMissing {
                model: model.to_owned(),
            });
        }
        if used.over.is_some() {
            // The final answer is counted, not capped: it is what the stop asked for.
            return ModelTurnAction::Continue;
        }
        let calls: Vec<&str> = turn.content.iter().filter_map(call_name).collect();
        let refused = match charged.result {
            Err(refused) => Err(refused),
            Ok(()) => used.meter.calls_refused(calls.iter().copied()),
        };
        match refused {
            Ok(()) => ModelTurnAction::Continue,
            Err(refused) if used.goes_past(limits, run, &refused) => ModelTurnAction::Continue,
            Err(refused) => ModelTurnAction::stop(end(pad, refused)),
        }
    })
}

/// Before a tool call: counted as one run of the tool, or not run once the run went past a cap
/// (the final request answered with tool calls ends the run).
pub(super) fn before_call(
    pad: &Scratchpad,
    limits: &UsageLimits,
    run: &RunContext,
    tool: &str,
) -> DispatchAction {
    pad.update(|used: &mut RigRunUsage| {
        if used.last_made {
            return DispatchAction::stop(used.stopped(pad));
        }
        if used.over.is_none() {
            match used.meter.tool_body(tool) {
                Ok(()) => return DispatchAction::Proceed,
                Err(refused) if !used.goes_past(limits, run, &refused) => {
                    return DispatchAction::stop(end(pad, refused));
                }
                Err(_) => {}
            }
        }
        DispatchAction::skip("not run: the run reached its usage limit before this call")
    })
}

/// A turn's usage when its provider reported none: one token per 4 characters of what it
/// answered (what was sent is not seen here).
fn estimate(content: &[AssistantContent]) -> Usage {
    let chars: usize = content
        .iter()
        .map(|block| match block {
            AssistantContent::Text(text) => text.text.len(),
            AssistantContent::ToolCall(call) => {
                let arguments = serde_json::Value::Object(call.function.arguments.clone());
                call.function.name.as_str().len() + arguments.to_string().len()
            }
            _ => 0,
        })
        .sum();
    Usage::new(0, u64::try_from(chars.div_ceil(4)).unwrap_or(u64::MAX))
}

fn call_name(content: &AssistantContent) -> Option<&str> {
    match content {
        AssistantContent::ToolCall(call) => Some(call.function.name.as_str()),
        _ => None,
    }
}

/// The last request of a graceful stop: no tools, and the model told to answer now.
fn final_request(limit: &UsageLimit) -> RequestPatch {
    let text = limit.final_answer_prompt();
    RequestPatch::new()
        .active_tools(Vec::<String>::new())
        .context(Document {
            id: "usage-limit".to_owned(),
            text,
            additional_props: Default::default(),
        })
}
