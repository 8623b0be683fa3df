//! Usage limits inside rig's own loop: the guard's hook counts one rig run's model requests,
//! tokens and tool calls (in the run's scratchpad, so a run's count is its own) and, at a cap,
//! ends rig's run or asks the model once more, without tools, for its final answer, as this
//! library's loop does.

use std::collections::BTreeMap;

use rig_agent::agent::hook::{
    CompletionCallAction, DispatchAction, ModelTurnAction, ModelTurnFinished, RequestPatch,
    Scratchpad,
};
use rig_core::completion::{AssistantContent, Document};

use crate::events::Event;
use crate::executor::RunContext;
use crate::usage::{OnExceed, RunUsage, Usage, UsageLimit, UsageLimitExceeded, UsageLimits};

/// What one rig run used so far, and where its graceful stop is.
#[derive(Debug, Clone, Default)]
pub(super) struct RigRunUsage {
    requests: u32,
    tokens: Usage,
    tool_calls: u32,
    calls_of: BTreeMap<String, u32>,
    cost: f64,
    /// The cap the run went past when its limits ask for a final answer, and the cap in words:
    /// no call runs any more and the next request is the last.
    over: Option<(UsageLimit, String)>,
    /// The last request was made: nothing more is let through.
    last_made: bool,
}

impl RigRunUsage {
    fn exceeded(&self, (limit, allowed): (UsageLimit, String)) -> String {
        let usage = RunUsage {
            requests: self.requests,
            tokens: self.tokens,
            tool_calls: self.tool_calls,
            calls_of: self.calls_of.clone(),
            cost: self.cost,
        };
        UsageLimitExceeded::new(limit, allowed, usage).to_string()
    }

    /// The run went past `cap`: true when its limits ask for a final answer (then asked for),
    /// false when the run must end.
    fn goes_past(
        &mut self,
        limits: &UsageLimits,
        run: &RunContext,
        cap: (UsageLimit, String),
    ) -> bool {
        if limits.on_exceeding(&cap.0) != OnExceed::FinalAnswer || self.over.is_some() {
            return false;
        }
        run.events().emit(Event::UsageLimitReached {
            limit: cap.0.clone(),
        });
        self.over = Some(cap);
        true
    }
}

/// Before a model request: counted, the last one of a graceful stop (no tools, told to answer
/// now), or refused (the run ends) past the request cap.
pub(super) fn before_request(
    pad: &Scratchpad,
    limits: &UsageLimits,
    run: &RunContext,
) -> CompletionCallAction {
    pad.update(|used: &mut RigRunUsage| {
        if used.last_made {
            let cap = used
                .over
                .clone()
                .unwrap_or((UsageLimit::Requests, String::new()));
            return CompletionCallAction::stop(used.exceeded(cap));
        }
        if let Some(refused) = limits.request_refused(used.requests) {
            if !used.goes_past(limits, run, refused.clone()) {
                return CompletionCallAction::stop(used.exceeded(refused));
            }
        }
        used.requests += 1;
        match &used.over {
            Some((limit, _)) => {
                used.last_made = true;
                CompletionCallAction::patch(final_request(limit))
            }
            None => CompletionCallAction::Continue,
        }
    })
}

/// After a model turn: its tokens and cost counted, then its tool calls, unless the run went
/// past a token, cost or tool-call cap (then it ends, or its calls are not run and the next
/// request is the last).
pub(super) fn after_turn(
    pad: &Scratchpad,
    limits: &UsageLimits,
    run: &RunContext,
    turn: &ModelTurnFinished<'_>,
) -> ModelTurnAction {
    pad.update(|used: &mut RigRunUsage| {
        let tokens = Usage::new(
            turn.usage.input_tokens.unwrap_or(0),
            turn.usage.output_tokens.unwrap_or(0),
        );
        used.tokens += tokens;
        let model = turn.raw.get("model").and_then(|model| model.as_str());
        match limits.cost_of(model.unwrap_or_default(), tokens) {
            Some(cost) => used.cost += cost,
            None => tracing::warn!(?model, "no price for this model: its tokens cost nothing"),
        }
        if used.over.is_some() {
            // The final answer is counted, not capped: it is what the stop asked for.
            return ModelTurnAction::Continue;
        }
        let calls: Vec<&str> = turn.content.iter().filter_map(call_name).collect();
        let refused = limits.tokens_exceeded(&used.tokens, used.cost).or_else(|| {
            let names = calls.iter().copied();
            (!calls.is_empty())
                .then(|| limits.calls_refused(names, used.tool_calls, &used.calls_of))
                .flatten()
        });
        if let Some(refused) = refused {
            if used.goes_past(limits, run, refused.clone()) {
                return ModelTurnAction::Continue;
            }
            return ModelTurnAction::stop(used.exceeded(refused));
        }
        used.tool_calls += u32::try_from(calls.len()).unwrap_or(u32::MAX);
        for name in calls.iter().filter(|name| limits.caps(name)) {
            *used.calls_of.entry((*name).to_owned()).or_default() += 1;
        }
        ModelTurnAction::Continue
    })
}

/// Before a tool call: none runs once the run went past a cap; the final request answered with
/// tool calls ends the run.
pub(super) fn before_call(pad: &Scratchpad) -> DispatchAction {
    let used: RigRunUsage = pad.get().unwrap_or_default();
    match (&used.over, used.last_made) {
        (Some(cap), true) => DispatchAction::stop(used.exceeded(cap.clone())),
        (Some(_), false) => {
            DispatchAction::skip("not run: the run reached its usage limit before this call")
        }
        (None, _) => DispatchAction::Proceed,
    }
}

fn call_name(content: &AssistantContent) -> Option<&str> {
    match content {
        AssistantContent::ToolCall(call) => Some(call.function.name.as_str()),
        _ => None,
    }
}

/// The last request of a graceful stop: no tools, and the model told to answer now.
fn final_request(limit: &UsageLimit) -> RequestPatch {
    let text = format!(
        "This run has reached its limit on {limit}. Do not call any tools. Answer now with the \
         best answer you can give from what you have so far."
    );
    RequestPatch::new()
        .active_tools(Vec::<String>::new())
        .context(Document {
            id: "usage-limit".to_owned(),
            text,
            additional_props: Default::default(),
        })
}
