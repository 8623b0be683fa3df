//! Calls that wait for a person: whether a call needs one, the question a person is shown,
//! and asking the run's [`Approver`] (or the answers the run was given). The
//! [gate](super::gate) asks: a person's approval is its last check, and covers exactly the tool
//! and arguments approved.

use futures_util::FutureExt;

use super::context::{Approvals, RunContext};
use crate::approval::{
    self as person, ApprovalContext, Decision, PendingApproval, Verdict, WaitReason,
};
use crate::chat::ToolCall;
use crate::events::Event;
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

/// The question for a call about to send `sent` to `tool`: the whole arguments as a person is
/// shown them (character for character, but for escaped invisible characters and redacted
/// secrets, cut only past [`MAX_SHOWN_CHARS`](person::MAX_SHOWN_CHARS); each saying so), and
/// the digest of what the tool would receive, in the run named `run_id` when it has one (so an
/// answer to the same call in another run answers nothing here).
pub(crate) fn question(
    tool: &ToolDef,
    call: &ToolCall,
    sent: &str,
    reason: WaitReason,
    run_id: Option<&str>,
) -> PendingApproval {
    let pending = PendingApproval::asked(&call.id, tool.name(), sent, person::shown(sent), reason);
    match run_id {
        Some(run) => pending.in_run(run),
        None => pending,
    }
}

/// The answer for `pending`, reported as an event: see [`answer_for`]. `awaited` is the
/// question the run saved when it stopped to wait for this call, if it did. A plain approval of
/// a question shown cut or altered is refused: the person did not see what would run.
pub(crate) async fn decision(
    ctx: &RunContext,
    pending: &PendingApproval,
    awaited: Option<&PendingApproval>,
) -> Decision {
    let decision = match answer_for(ctx, pending, awaited).await {
        Decision::Approve if pending.arguments_cut => Decision::Deny(
            "approved without seeing the whole arguments (the question showed them cut); \
             answer ApproveUnseen to run them anyway"
                .into(),
        ),
        Decision::Approve if pending.arguments_altered => Decision::Deny(
            "approved without seeing the arguments as they are (the question showed a value \
             redacted or a hidden character escaped); answer ApproveUnseen to run them anyway"
                .into(),
        ),
        decision => decision,
    };
    let answer = match &decision {
        Decision::Approve | Decision::ApproveUnseen => "approved",
        Decision::ApproveWith(_) => "edited",
        Decision::Deny(_) => "denied",
        Decision::Later => "later",
        Decision::Expired => {
            expired(ctx, pending);
            return decision;
        }
    };
    let tool = pending.tool.clone();
    ctx.events().emit(Event::PersonAsked { tool, answer });
    decision
}

/// Reports a call whose answer expired before the run reached it (the event is traced as a
/// warning).
fn expired(ctx: &RunContext, pending: &PendingApproval) {
    ctx.events().emit(Event::AnswerExpired {
        tool: pending.tool.clone(),
        call_id: pending.call_id.clone(),
        digest: pending.digest.clone(),
    });
}

/// The answer given to the run for `pending`, taken for its one use: the first unused answer
/// under its call id that is bound to this question, which must be the question the run saved
/// as `awaited` when it stopped to wait (and, for an answer given with a digest, have that
/// digest), and, when the agent has an answer key, signed with it. An expired one is
/// [`Decision::Expired`]. One for another question, for a question this run never stopped on,
/// or not signed as it must be, is refused, reported, and left for its own question.
fn given_answer(
    ctx: &RunContext,
    approvals: &Approvals,
    pending: &PendingApproval,
    awaited: Option<&PendingApproval>,
) -> Option<Decision> {
    let mut refusal = None;
    let (key, now) = (approvals.key.as_ref(), approvals.clock.now());
    let unused = approvals
        .answers
        .iter()
        .filter(|given| given.answer.call_id() == pending.call_id && !given.is_used());
    // A digest names a question, not a run: replayed on a run that never asked it (the same
    // call under the same id, in another run), it would approve what nobody saw.
    let stopped_on = awaited.is_some_and(|awaited| same_question(awaited, pending));
    for given in unused {
        let digest = match given.answer.digest() {
            "" => "",
            _ => &pending.digest,
        };
        let verdict = match stopped_on {
            true => person::judge(&given.answer, (&pending.call_id, digest), key, now),
            false => Verdict::Refused(person::OTHER_QUESTION),
        };
        match verdict {
            Verdict::Refused(why) => refusal = Some(why),
            _ if !given.take() => {}
            Verdict::Use(decision) => return Some(decision),
            Verdict::Expired => return Some(Decision::Expired),
        }
    }
    if let Some(why) = refusal {
        person::refused(ctx.events(), pending, why);
    }
    None
}

/// Whether `saved` and `asked` are one question: by digest, or field by field for a question
/// saved before questions had one.
fn same_question(saved: &PendingApproval, asked: &PendingApproval) -> bool {
    if !saved.digest.is_empty() {
        return saved.digest == asked.digest && saved.call_id == asked.call_id;
    }
    (&saved.call_id, &saved.tool, &saved.arguments, &saved.reason)
        == (&asked.call_id, &asked.tool, &asked.arguments, &asked.reason)
}

/// The answer for `pending`: one given to the run and bound to it (used once), else the
/// approver's, else "later". An approver that panics has denied the call.
///
/// An answer given to the run answers the question a person was shown, in the run that asked
/// it: only when `pending` is the very question the run saved as `awaited`, and one given with
/// its digest only for a question with that digest. Call ids are the provider's text and can come back on a later call (some
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
    if let Some(given) = given_answer(ctx, approvals, pending, awaited) {
        return given;
    }
    let Some(approver) = &approvals.approver else {
        return Decision::Later;
    };
    let run = ApprovalContext {
        run_id: ctx.run_id(),
        extensions: ctx.extensions(),
        key: approvals.key.as_ref(),
        clock: &approvals.clock,
        events: ctx.events(),
        taken: &approvals.taken,
    };
    let asked = std::panic::AssertUnwindSafe(approver.decide(pending, run));
    asked
        .catch_unwind()
        .await
        .unwrap_or_else(|_| Decision::Deny("the approver crashed, so the call did not run".into()))
}
