//! The `ask_person` rung: hand the failure to a person, who approves another try (perhaps with
//! edited arguments), denies it, or answers later.

use std::borrow::Cow;

use super::{Next, Walk};
use crate::approval::WaitReason;
use crate::executor::approval;
use crate::executor::attempt::{Missed, attempt};
use crate::executor::outcome::Handled;
use crate::sanitize::scrub;

impl Walk<'_> {
    /// `ask_person`: approved, the tool is called again with what the person approved (through
    /// the gate) and a new failure goes on like a retry's; denied or waiting, that answers the
    /// call.
    pub(super) async fn ask_person(&mut self) -> Next {
        let limit = self.ctx.limits().max_message_chars;
        let reason = WaitReason::Failure {
            kind: self.failure.class.kind,
            message: scrub(&self.failure.message(), limit),
        };
        let pending = approval::question(self.ctx, self.call, &self.raw, reason);
        let wait = (pending, Some(self.rung.0));
        let asked = approval::ask(
            self.ctx,
            self.tool,
            self.call,
            &self.raw,
            wait,
            self.progress(),
        );
        let edited = match asked.await {
            Ok(Cow::Owned(edited)) => Some(edited),
            Ok(Cow::Borrowed(_)) => None,
            Err(handled) => return Next::Done(handled),
        };
        if let Some(edited) = edited {
            self.raw = Cow::Owned(edited);
        }
        self.failure.attempts += 1;
        if !self.save(None, None).await {
            return Next::Done(Handled::Cancelled);
        }
        match attempt(self.ctx, self.tool, &self.raw, &self.extensions).await {
            Ok(output) => Next::Done(Handled::Ok(output)),
            Err(Missed::Tripped { failures }) => self.tripped(self.tool.name(), failures),
            Err(Missed::Failed(error)) => {
                let attempts = self.failure.attempts;
                self.after_failure(error, attempts)
            }
        }
    }
}
