//! A person in the loop inside Restate: a call that needs a person waits on an awakeable, and
//! the invocation holds no process while nobody answers.

use std::fmt;
use std::sync::Arc;

use tokio::sync::oneshot;

use super::journal::{HandlerChannel, Notify, StepRequest, step_on};
use crate::approval::{Answer, ApprovalContext, Approver, Decision, PendingApproval};
use crate::error::BoxFuture;

/// An [`Approver`] for runs on Restate: each call that needs a person waits on a Restate
/// awakeable, announced once (a journaled step) through the `notify` callback with the
/// awakeable's id and the question. A person answers through Restate's API with an
/// [`Answer`] to that question, as its JSON (`serde_json::to_string(&answer)`, which
/// [`Answer::from_token`] reads as it reads a token):
///
/// ```text
/// curl -X POST http://localhost:8080/restate/awakeables/<id>/resolve \
///      -H 'content-type: application/json' \
///      -d '{"call_id": "call_1", "digest": "<the digest notify was given>", "decision": "Approve"}'
/// ```
///
/// The answer is bound to the question *and the awakeable*: the
/// [`digest`](PendingApproval::digest) `notify` is given covers the awakeable's id, so an
/// answer written for one awakeable (or an earlier question) and delivered to another is
/// refused, as is one that is not an answer at all; the refusal is reported (a
/// [`PersonAsked`](crate::Event::PersonAsked) event answered `refused`, a warning) and the
/// person is asked again on a new awakeable, announced through `notify` again. An answer's
/// expiry holds: one that expired when it arrived does not run the call, and the model is told
/// it expired. On an agent with an [answer key](crate::AgentBuilder::answer_key) the answer must
/// be signed with it ([`Answer::signed`]). Whether an answer was taken is itself a journaled
/// step, so a replay after a restart decides the same.
///
/// A decision's JSON: `"Approve"`, `{"Deny": "too much"}`, or `{"ApproveWith": "..."}` with
/// the tool's whole edited arguments as JSON *text* (a string, its quotes escaped), exactly as
/// the model's arguments arrive:
///
/// ```
/// use agent_errors::approval::{Answer, Decision, PendingApproval, WaitReason};
///
/// let pending = PendingApproval::new("call_1", "transfer", r#"{"amount": 9000}"#, WaitReason::ApprovalRequired);
/// let body = format!(
///     r#"{{"call_id": "call_1", "digest": "{}", "decision": {{"ApproveWith": "{{\"to\": \"Acme\", \"amount\": 900}}"}}}}"#,
///     pending.digest,
/// );
/// let answer = Answer::from_token(&body)?;
/// assert_eq!(answer.decision(), &Decision::ApproveWith(r#"{"to": "Acme", "amount": 900}"#.into()));
/// assert_eq!(answer, Answer::to(&pending, answer.decision().clone()));
/// # Ok::<(), agent_errors::approval::AnswerError>(())
/// ```
///
/// Approved, the call's arguments pass the same checks as any other and its tool runs (once: its
/// attempt is a journaled step); denied (or the awakeable rejected), the tool never runs and the
/// model is told why. While nobody answers, Restate suspends the invocation, after the
/// service's inactivity timeout (bind it with [`service_options`](super::service_options) for
/// 5 s rather than the server's default minute): then no process and no retry budget is held. Outside a Restate run (a checkpointed run, say) it answers
/// [`Decision::Later`].
///
/// # Examples
///
/// ```
/// use agent_errors::Agent;
/// use agent_errors::restate::AwakeableApprover;
/// use agent_errors::testing::ScriptedModel;
///
/// let approver = AwakeableApprover::new(|awakeable, pending| {
///     // A real service posts this to a queue or a chat for a person to answer, with the
///     // question (`pending`, its digest included) to build the answer from.
///     println!("{pending} waits: resolve awakeable {awakeable} (digest {})", pending.digest);
/// });
/// let agent = Agent::builder("payments")
///     .model(ScriptedModel::new().text("nothing to do"))
///     .approver(approver)
///     .build();
/// assert!(agent.is_ok());
/// ```
#[derive(Clone)]
pub struct AwakeableApprover {
    notify: Arc<Notify>,
}

impl AwakeableApprover {
    /// An approver that tells a person about each waiting call through `notify` (called once
    /// per awakeable, with its id and the question bound to it; not again when the run is
    /// replayed).
    pub fn new(notify: impl Fn(&str, &PendingApproval) + Send + Sync + 'static) -> Self {
        let bound = move |awakeable: &str, pending: &PendingApproval| {
            notify(awakeable, &pending.asked_at(awakeable));
        };
        AwakeableApprover {
            notify: Arc::new(bound),
        }
    }
}

impl fmt::Debug for AwakeableApprover {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AwakeableApprover").finish_non_exhaustive()
    }
}

impl Approver for AwakeableApprover {
    fn decide<'a>(
        &'a self,
        pending: &'a PendingApproval,
        run: ApprovalContext<'a>,
    ) -> BoxFuture<'a, Decision> {
        Box::pin(async move {
            let Some(HandlerChannel(requests)) = run.extensions().get::<HandlerChannel>() else {
                return Decision::Later;
            };
            loop {
                let (done, answered) = oneshot::channel();
                let request = StepRequest::Person {
                    pending: pending.clone(),
                    notify: Arc::clone(&self.notify),
                    done,
                };
                if requests.send(request).is_err() {
                    return Decision::Later;
                }
                // A handler gone before the answer ends the invocation, and the run with it.
                let Ok((awakeable, answer)) = answered.await else {
                    return Decision::Later;
                };
                let asked = pending.asked_at(&awakeable);
                let verdict = async { checked(run, &asked, answer) };
                let verdict =
                    Box::pin(async { serde_json::to_value(verdict.await).unwrap_or_default() });
                let Some(journaled) = step_on(requests, "check answer", verdict).await else {
                    return Decision::Later;
                };
                // A refused answer (`null`) is asked again, on a new awakeable.
                if let Ok(Some(decision)) = serde_json::from_value(journaled) {
                    return decision;
                }
            }
        })
    }
}

/// The decision `answer` (what resolved the awakeable `asked` was asked at) gives: a rejection
/// denies; an answer passes [`ApprovalContext::accept`]; anything else is refused (`None`).
fn checked(
    run: ApprovalContext<'_>,
    asked: &PendingApproval,
    answer: Result<Vec<u8>, String>,
) -> Option<Decision> {
    let bytes = match answer {
        Ok(bytes) => bytes,
        Err(rejected) => return Some(Decision::Deny(rejected)),
    };
    let text = std::str::from_utf8(&bytes).unwrap_or("not UTF-8");
    match Answer::from_token(text) {
        Ok(answer) => run.accept(asked, &answer),
        Err(error) => {
            crate::approval::refused(run.events, asked, &format!("was not an answer ({error})"));
            None
        }
    }
}
