//! A person in the loop inside Restate: a call that needs a person waits on an awakeable, and
//! the invocation holds no process while nobody answers.

use std::fmt;
use std::sync::Arc;

use tokio::sync::oneshot;

use super::journal::{HandlerChannel, Notify, StepRequest};
use crate::approval::{ApprovalContext, Approver, Decision, PendingApproval};
use crate::error::BoxFuture;

/// An [`Approver`] for runs on Restate: each call that needs a person waits on a Restate
/// awakeable, announced once (a journaled step) through the `notify` callback with the
/// awakeable's id and the call. A person answers through Restate's API with the
/// [`Decision`] as JSON:
///
/// ```text
/// curl -X POST http://localhost:8080/restate/awakeables/<id>/resolve \
///      -H 'content-type: application/json' -d '"Approve"'
/// curl -X POST http://localhost:8080/restate/awakeables/<id>/resolve \
///      -H 'content-type: application/json' -d '{"Deny": "too much"}'
/// curl -X POST http://localhost:8080/restate/awakeables/<id>/resolve \
///      -H 'content-type: application/json' \
///      -d '{"ApproveWith": "{\"to\": \"Acme\", \"amount\": 900}"}'
/// ```
///
/// The last approves with edited arguments: `ApproveWith` holds the tool's whole arguments as
/// JSON *text* (a string, its quotes escaped), not a JSON object, exactly as the model's
/// arguments arrive:
///
/// ```
/// use agent_errors::approval::Decision;
///
/// let body = r#"{"ApproveWith": "{\"to\": \"Acme\", \"amount\": 900}"}"#;
/// let decision: Decision = serde_json::from_str(body)?;
/// assert_eq!(decision, Decision::ApproveWith(r#"{"to": "Acme", "amount": 900}"#.into()));
/// assert_eq!(serde_json::to_string(&Decision::Approve)?, r#""Approve""#);
/// # Ok::<(), serde_json::Error>(())
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
///     // A real service posts this to a queue or a chat for a person to answer.
///     println!("{pending} waits: resolve awakeable {awakeable}");
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
    /// per call, with the awakeable's id and the call; not again when the run is replayed).
    pub fn new(notify: impl Fn(&str, &PendingApproval) + Send + Sync + 'static) -> Self {
        AwakeableApprover {
            notify: Arc::new(notify),
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
            answered.await.unwrap_or(Decision::Later)
        })
    }
}
