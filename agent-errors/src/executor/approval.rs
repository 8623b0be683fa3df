//! Calls that wait for a person: whether a call needs one, the question a person is shown,
//! and asking the run's [`Approver`] (or the answers the run was given). The
//! [gate](super::gate) asks: a person's approval is its last check, and covers exactly the tool
//! and arguments approved.

use futures_util::FutureExt;

use super::context::{Approvals, RunContext};
use crate::approval::{ApprovalContext, Decision, PendingApproval, WaitReason};
use crate::chat::ToolCall;
use crate::events::Event;
use crate::sanitize::scrub;
use crate::tool::ToolDef;

/// Whether a call of `tool` might need a person at all: the tool requires approval, or the
/// agent has a rule that picks calls. False for the usual call, which then skips the question.
#[inline]
pub(crate) fn may_be_required(ctx: &RunContext, tool: &ToolDef) -> bool {
    tool.is_approval_required() || ctx.approvals().is_some_and(|a| a.rule.is_some())
}

/// Whether `call` (the tool about to run and the arguments it would receive) needs a person's
/// approval before it runs: the tool requires it, or the agent's rule says so (a rule that
/// panics has said so).
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

/// The question for a call about to send `sent` to `tool`: the arguments as a person is shown
/// them (redacted, bounded), and whether they are shown whole (not cut to the bound).
pub(crate) fn question(
    ctx: &RunContext,
    tool: &ToolDef,
    call: &ToolCall,
    sent: &str,
    reason: WaitReason,
) -> (PendingApproval, bool) {
    let shown = scrub(sent, ctx.limits().max_message_chars);
    let whole = !crate::redact::scan_bound(sent).1 && shown == scrub(sent, usize::MAX);
    (
        PendingApproval::new(&*call.id, tool.name(), shown, reason),
        whole,
    )
}

/// The answer for `pending`, reported as an event: see [`answer_for`]. `awaited` is the
/// question the run saved when it stopped to wait for this call, if it did.
pub(crate) async fn decision(
    ctx: &RunContext,
    pending: &PendingApproval,
    awaited: Option<&PendingApproval>,
) -> Decision {
    let decision = answer_for(ctx, pending, awaited).await;
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
///
/// An answer given to the run answers the question a person was shown: it is used only when
/// `pending` is the very question the run saved as `awaited` (same call id, tool, arguments
/// shown and reason). Call ids are the provider's text and can come back on a later call (some
/// number them per turn), so an id alone would let a person's answer approve arguments, or a
/// tool, they never saw.
async fn answer_for(
    ctx: &RunContext,
    pending: &PendingApproval,
    awaited: Option<&PendingApproval>,
) -> Decision {
    let Some(approvals) = ctx.approvals() else {
        return Decision::Later;
    };
    let given = approvals
        .answers
        .iter()
        .find(|(id, _)| *id == pending.call_id);
    if let Some((_, given)) = given.filter(|_| awaited == Some(pending)) {
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
