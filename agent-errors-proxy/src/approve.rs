//! A person through the host: a call that needs approval is put to the client's user with
//! MCP's elicitation request, showing the tool and its exact arguments.

use agent_errors::approval::{ApprovalContext, Approver, Decision, PendingApproval};
use agent_errors::call::BoxFuture;
use rmcp::model::{ElicitRequestParams, ElicitationAction, ElicitationSchema};
use rmcp::service::{ElicitationMode, Peer, RoleServer};

/// The answer the model reads when the client cannot ask anyone.
pub(crate) const NO_ELICITATION: &str = "this call needs a person's approval, and the MCP client \
     cannot ask its user (it did not declare the elicitation capability), so the call was not made";

/// Asks the client's user, through the session's peer.
#[derive(Debug, Clone)]
pub(crate) struct AskTheClient {
    peer: Peer<RoleServer>,
}

impl AskTheClient {
    pub(crate) fn new(peer: Peer<RoleServer>) -> Self {
        AskTheClient { peer }
    }

    async fn ask(&self, pending: &PendingApproval) -> Decision {
        if !self
            .peer
            .supported_elicitation_modes()
            .contains(&ElicitationMode::Form)
        {
            return Decision::Deny(NO_ELICITATION.to_owned());
        }
        // A question shown cut cannot be approved as seen: the person must see all of it.
        if pending.arguments_cut {
            return Decision::Deny(
                "the arguments are too long to show a person whole, so the call needing approval was not made".to_owned(),
            );
        }
        let Ok(schema) = ElicitationSchema::builder()
            .required_bool("approve")
            .build()
        else {
            return Decision::Deny("the approval question could not be built".to_owned());
        };
        let params = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: question(pending),
            requested_schema: schema,
        };
        match self.peer.create_elicitation(params).await {
            Ok(answer) if answer.action == ElicitationAction::Accept => {
                let approved = answer
                    .content
                    .as_ref()
                    .and_then(|content| content.get("approve"))
                    .and_then(serde_json::Value::as_bool);
                if approved == Some(true) {
                    Decision::Approve
                } else {
                    Decision::Deny("the user did not approve the call".to_owned())
                }
            }
            Ok(_) => Decision::Deny("the user declined the call".to_owned()),
            Err(_) => Decision::Deny(
                "the user could not be asked (the client did not answer the approval request)"
                    .to_owned(),
            ),
        }
    }
}

/// What the person reads: the tool, and its arguments exactly as they would run (sanitized:
/// control characters and secrets are never shown raw, and the library's question says so).
fn question(pending: &PendingApproval) -> String {
    format!(
        "Approve this tool call?\n\ntool: {}\narguments: {}\n\nAnswer approve = true to run it as shown.",
        pending.tool, pending.arguments
    )
}

impl Approver for AskTheClient {
    fn decide<'a>(
        &'a self,
        pending: &'a PendingApproval,
        _run: ApprovalContext<'a>,
    ) -> BoxFuture<'a, Decision> {
        Box::pin(self.ask(pending))
    }
}
