//! The `ask_person` rung: hand the failure to a person, who approves another try (perhaps with
//! edited arguments), denies it, or answers later.

use super::{Next, Sending, Walk};
use crate::approval::WaitReason;
use crate::executor::gate::Refused;
use crate::executor::outcome::{Failure, Handled};
use crate::sanitize::scrub;

impl Walk<'_> {
    /// `ask_person`: the gate asks a person about the arguments in hand whatever the approval
    /// rules say; approved (perhaps edited, and then checked again), the tool is called again
    /// and a new failure goes on like a retry's; denied or waiting, that answers the call.
    pub(super) async fn ask_person(&mut self) -> Next {
        let limit = self.ctx.limits().max_message_chars;
        let reason = WaitReason::Failure {
            kind: self.failure.class.kind,
            message: scrub(&self.failure.message(), limit),
        };
        match self.clear_for(self.tool, Some(reason)).await {
            Ok(cleared) => self.sending = Sending::Cleared(cleared),
            Err(Refused::Unavailable(handled) | Refused::Answered(handled)) => {
                return Next::Done(handled);
            }
            Err(Refused::Invalid(error)) => {
                let failure =
                    Failure::new(error, self.failure.attempts, self.ctx.hooks().classifier());
                let tool = self.tool.name();
                return Next::Done(Handled::escalate_failure(self.ctx, tool, &failure));
            }
        }
        self.failure.attempts += 1;
        if !self.save(None, None).await {
            return Next::Done(Handled::Cancelled);
        }
        self.attempt_cleared().await
    }
}
