//! Calls that wait for a person: whether a call needs one, asking the run's
//! [`Approver`], and what the answer does. An approved argument set passes the [`gate`] like any
//! other right before the tool body gets it; a denial is counted like a permission denial; an
//! answer of "later" records where the call waits and ends it with [`Handled::Waiting`].

use std::borrow::Cow;
use std::sync::Arc;

use futures_util::FutureExt;
use serde::{Deserialize, Serialize};

use super::attempt::{Missed, attempt};
use super::context::RunContext;
use super::gate::{self, Refused};
use super::ladder::Walk;
use super::outcome::{Failure, Handled};
use super::resume::CallProgress;
use crate::approval::{
    ApprovalContext, ApprovalRule, Approver, Decision, PendingApproval, WaitReason,
};
use crate::chat::ToolCall;
use crate::events::Event;
use crate::extensions::Extensions;
use crate::policy::{PolicyKey, ResolvedPolicy};
use crate::registry::Registry;
use crate::sanitize::scrub;
use crate::tool::ToolDef;

/// Who answers the calls of an agent's runs that need a person, which calls need one beyond
/// their tools' own rule, and the answers a run was given.
#[derive(Clone, Default)]
pub(crate) struct Approvals {
    pub(crate) approver: Option<Arc<dyn Approver>>,
    pub(crate) rule: Option<Arc<ApprovalRule>>,
    /// A person's answers given to one run, by call id.
    pub(crate) answers: Vec<(String, Decision)>,
}

impl Approvals {
    /// The approvals of one run given `answers`; `None` when there is nothing to ask or answer
    /// with, so a run without a person in the loop carries nothing.
    pub(crate) fn for_run(&self, answers: Vec<(String, Decision)>) -> Option<Arc<Approvals>> {
        if answers.is_empty() && self.approver.is_none() && self.rule.is_none() {
            return None;
        }
        Some(Arc::new(Approvals {
            approver: self.approver.clone(),
            rule: self.rule.clone(),
            answers,
        }))
    }
}

/// Where a call waits for a person, as a checkpoint saves it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Waiting {
    /// The question the person is asked.
    pub(crate) pending: PendingApproval,
    /// The policy key whose ladder handed the failure over, when one did: a resumed walk does
    /// not walk it again.
    pub(crate) key: Option<String>,
}

/// Whether a call of `tool` needs a person's approval before it runs: the tool requires it, or
/// the agent's rule says so (a rule that panics has said so).
#[inline]
pub(crate) fn required(ctx: &RunContext, tool: &ToolDef, call: &ToolCall) -> bool {
    tool.is_approval_required() || ctx.approvals().is_some_and(|a| by_rule(a, call))
}

/// Whether the agent's rule, if it has one, picks `call`.
fn by_rule(approvals: &Approvals, call: &ToolCall) -> bool {
    let Some(rule) = approvals.rule.as_deref() else {
        return false;
    };
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| rule(call))).unwrap_or(true)
}

/// The question for a call: its arguments as a person is shown them (redacted, bounded).
pub(crate) fn question(
    ctx: &RunContext,
    call: &ToolCall,
    sent: &str,
    reason: WaitReason,
) -> PendingApproval {
    let shown = scrub(sent, ctx.limits().max_message_chars);
    PendingApproval::new(&*call.id, &*call.name, shown, reason)
}

/// The answer for `pending`, reported as an event: see [`answer_for`].
async fn decision(ctx: &RunContext, pending: &PendingApproval) -> Decision {
    let decision = answer_for(ctx, pending).await;
    let answer = match &decision {
        Decision::Approve => "approved",
        Decision::ApproveWith(_) => "edited",
        Decision::Deny(_) => "denied",
        Decision::Later => "later",
    };
    let tool = pending.tool.clone();
    ctx.events().emit(Event::PersonAsked { tool, answer });
    decision
}

/// The answer for `pending`: one given to the run (the first, if given twice), else the
/// approver's, else "later". An approver that panics has denied the call.
async fn answer_for(ctx: &RunContext, pending: &PendingApproval) -> Decision {
    let Some(approvals) = ctx.approvals() else {
        return Decision::Later;
    };
    if let Some((_, given)) = approvals
        .answers
        .iter()
        .find(|(id, _)| *id == pending.call_id)
    {
        return given.clone();
    }
    let Some(approver) = &approvals.approver else {
        return Decision::Later;
    };
    let run = ApprovalContext {
        run_id: ctx.run_id(),
        extensions: ctx.extensions(),
    };
    let asked = std::panic::AssertUnwindSafe(approver.decide(pending, run));
    asked
        .catch_unwind()
        .await
        .unwrap_or_else(|_| Decision::Deny("the approver crashed, so the call did not run".into()))
}

/// Asks about `pending`, for a call that would send `sent` to `tool`: the arguments the tool
/// gets once a person approved them and they passed the gate, or the call's answer (a denial,
/// a refusal of the gate, or the wait recorded from `progress` under `key`).
pub(crate) async fn ask<'s>(
    ctx: &RunContext,
    tool: &ToolDef,
    call: &ToolCall,
    sent: &'s str,
    wait: (PendingApproval, Option<PolicyKey>),
    progress: CallProgress,
) -> Result<Cow<'s, str>, Handled> {
    let (pending, key) = wait;
    let arguments = match decision(ctx, &pending).await {
        Decision::Approve => Cow::Borrowed(sent),
        Decision::ApproveWith(edited) => Cow::Owned(edited),
        Decision::Deny(reason) => {
            let shown = format!("a person denied this call: {reason}");
            return Err(gate::denied(ctx, tool, sent, reason, &shown));
        }
        Decision::Later => return Err(wait_later(ctx, call, pending, key, progress).await),
    };
    match gate::pass(ctx, tool, call, &arguments) {
        Ok(()) => Ok(arguments),
        Err(Refused::Unavailable(handled) | Refused::Denied(handled)) => Err(handled),
        Err(Refused::Invalid(error)) => {
            let failure = Failure::new(error, progress.attempts, ctx.hooks().classifier());
            Err(Handled::escalate_failure(ctx, tool.name(), &failure))
        }
    }
}

/// Records that the call waits for a person and ends it so; a wait that could not be saved
/// halts the run like any unsaved progress.
async fn wait_later(
    ctx: &RunContext,
    call: &ToolCall,
    pending: PendingApproval,
    key: Option<PolicyKey>,
    mut progress: CallProgress,
) -> Handled {
    let recorder = ctx.hooks().recorder();
    if recorder.records() {
        progress.waiting = Some(Waiting {
            pending: pending.clone(),
            key: key.map(|k| k.as_str().to_owned()),
        });
        progress.backoff_ms = None;
        if !recorder.progress(&call.id, progress, ctx).await {
            return Handled::Cancelled;
        }
    }
    Handled::Waiting(Box::new(pending))
}

/// A call whose tool requires approval, its arguments through the gate: asks, then makes the
/// first attempt with what the person approved; a failure walks the ladder.
pub(super) async fn first_attempt(
    registry: &Registry,
    ctx: &RunContext,
    entry @ (tool, _): (&ToolDef, &ResolvedPolicy),
    call: &ToolCall,
    sent: &str,
    extensions: Extensions,
) -> Handled {
    let pending = question(ctx, call, sent, WaitReason::ApprovalRequired);
    let before = CallProgress {
        attempts: 0,
        ..CallProgress::default()
    };
    match ask(ctx, tool, call, sent, (pending, None), before.clone()).await {
        Ok(arguments) => {
            let approved = Approved {
                arguments: &arguments,
                progress: &before,
                walked: None,
            };
            run_approved(registry, ctx, entry, call, approved, extensions).await
        }
        Err(handled) => handled,
    }
}

/// A resumed call that was waiting for a person: asks again (the run's answers first), then
/// calls the tool with what the person approved. A ladder that handed the call over is not
/// walked again for it.
pub(super) async fn go_on(
    registry: &Registry,
    ctx: &RunContext,
    entry @ (tool, _): (&ToolDef, &ResolvedPolicy),
    call: &ToolCall,
    progress: &CallProgress,
    waiting: &Waiting,
    extensions: Extensions,
) -> Handled {
    let sent = progress.arguments.as_deref().unwrap_or(&call.arguments);
    let key = waiting
        .key
        .as_deref()
        .and_then(|k| PolicyKey::all().find(|p| p.as_str() == k));
    let wait = (waiting.pending.clone(), key);
    match ask(ctx, tool, call, sent, wait, progress.clone()).await {
        Ok(arguments) => {
            let approved = Approved {
                arguments: &arguments,
                progress,
                walked: key,
            };
            run_approved(registry, ctx, entry, call, approved, extensions).await
        }
        Err(handled) => handled,
    }
}

/// What a person approved for a call: the arguments, after how many calls of its tool, and the
/// ladder that handed it over (not walked again), if one did.
struct Approved<'a> {
    arguments: &'a str,
    /// How far the call got before it waited: its attempts and repairs stay spent.
    progress: &'a CallProgress,
    walked: Option<PolicyKey>,
}

/// Calls `tool` with the arguments a person approved; a failure walks the ladder.
async fn run_approved(
    registry: &Registry,
    ctx: &RunContext,
    entry @ (tool, _): (&ToolDef, &ResolvedPolicy),
    call: &ToolCall,
    approved: Approved<'_>,
    extensions: Extensions,
) -> Handled {
    let Approved {
        arguments,
        progress,
        walked,
    } = approved;
    let attempts = progress.attempts + 1;
    let recorder = ctx.hooks().recorder();
    if recorder.records() {
        let running = CallProgress {
            attempts,
            repair_steps: progress.repair_steps,
            arguments: (arguments != call.arguments).then(|| arguments.to_owned()),
            ..CallProgress::default()
        };
        if !recorder.progress(&call.id, running, ctx).await {
            return Handled::Cancelled;
        }
    }
    match attempt(ctx, tool, arguments, &extensions).await {
        Ok(output) => Handled::Ok(output),
        Err(Missed::Tripped { failures }) => Handled::Tripped {
            tool: tool.name().to_owned(),
            failures,
        },
        Err(Missed::Failed(error)) => {
            let failure = Failure::new(error, attempts, ctx.hooks().classifier());
            let walk = Walk::new(registry, ctx, entry, call, failure, extensions)
                .resumed(progress)
                .with_arguments(arguments)
                .walked(walked);
            Box::pin(walk.run()).await
        }
    }
}
