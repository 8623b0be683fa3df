//! The `fix(agent = ..)` rung: a fixer asked for new arguments (which pass the gate and are
//! tried) or for a result in the tool's place, a bounded number of times; and `fix(builtin)`,
//! the built-in repair, whose arguments take the same way.

use std::num::NonZeroU32;
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;

use super::{Next, Sending, Walk};
use crate::events::Event;
use crate::executor::failure::ToolPanic;
use crate::executor::gate::Refused;
use crate::executor::outcome::{Handled, TerminationReason};
use crate::fix::{Fix, FixRequest, FixerDef, FixerError};
use crate::policy::{FixAction, PolicyKey};
use crate::repair::repair_arguments;
use crate::sanitize::scrub;
use crate::tool::to_output;

/// The name events give the built-in repair, as they give a fixer's.
const BUILTIN: &str = "builtin";

impl Walk<'_> {
    /// `fix(agent = ..)`: ask the fixer for new arguments (and call again) or for a result.
    pub(super) async fn fix(&mut self, fix: &FixAction) -> Next {
        let Some(fixer) = self.registry.fixer(&fix.agent) else {
            return Next::Down;
        };
        let key = self.entry().0;
        for attempt_no in 1..=fix.retries.get() {
            if self.repair_steps >= self.ctx.limits().max_repair_steps {
                break;
            }
            self.repair_steps += 1;
            let request = self.fix_request(key, attempt_no);
            let next = match ask(fixer, request).await {
                Ok(Ok(Fix::Result(value))) => {
                    self.fixed_by(fixer.name(), attempt_no);
                    let output = to_output(&value).unwrap_or_else(|_| value.to_string());
                    Next::Done(Handled::Ok(output))
                }
                Ok(Ok(Fix::Args(new_raw))) => {
                    self.rerun_fixed(fixer.name(), attempt_no, new_raw).await
                }
                Ok(Err(FixerError::Escalate { reason, severity })) => {
                    let kind = self.failure.class.kind;
                    let tool = self.tool.name();
                    Next::Done(Handled::escalate(self.ctx, tool, kind, &reason, severity))
                }
                Ok(Err(FixerError::Throw(reason))) => {
                    let reason = scrub(&reason, self.ctx.limits().max_message_chars);
                    Next::Stop(TerminationReason::Thrown(reason))
                }
                Ok(Err(FixerError::Other(error))) => {
                    let error = scrub(&error.to_string(), self.ctx.limits().max_message_chars);
                    let (tool, fixer) = (self.tool.name(), fixer.name());
                    tracing::warn!(tool, fixer, attempt = attempt_no, %error, "fixer failed");
                    Next::Down
                }
                Err(panic) => {
                    let (tool, fixer) = (self.tool.name(), fixer.name());
                    let error = scrub(&panic.to_string(), self.ctx.limits().max_message_chars);
                    tracing::warn!(tool, fixer, attempt = attempt_no, %error, "fixer panicked");
                    Next::Down
                }
            };
            // `Down` here means "this try did not help": the next try of the same fixer.
            if !matches!(next, Next::Down) {
                return next;
            }
        }
        Next::Down
    }

    fn fix_request(&self, key: PolicyKey, attempt: u32) -> FixRequest {
        FixRequest {
            tool: self.tool.name().to_owned(),
            raw_args: self.raw().to_owned(),
            args: serde_json::from_str(self.raw()).ok(),
            failure: scrub(
                &self.failure.model_message(),
                self.ctx.limits().max_message_chars,
            ),
            kind: self.failure.class.kind,
            key,
            attempt,
            context: self.extensions.clone(),
            meter: self.ctx.meter().clone(),
        }
    }

    /// Calls the tool again with the arguments a fixer wrote, once they pass the gate (a
    /// person asked again when one must approve): a fixer chooses what the tool receives no
    /// more than the model does.
    async fn rerun_fixed(&mut self, fixer: &str, attempt_no: u32, new_raw: String) -> Next {
        self.send(new_raw);
        match self.clear_for(self.tool, None).await {
            Ok(cleared) => self.sending = Sending::Cleared(cleared),
            Err(Refused::Unavailable(handled) | Refused::Answered(handled)) => {
                return Next::Done(handled);
            }
            Err(Refused::Invalid(error)) => {
                let attempts = self.failure.attempts;
                return self.after_failure(error, attempts);
            }
        }
        // From here the call goes on with the fixer's arguments: a success now, or after the
        // retries of a failure of another kind, is the fix's.
        self.fixed_by(fixer, attempt_no);
        self.ctx.events().emit(Event::ToolRerun {
            tool: self.tool.name().to_owned(),
            fixer: fixer.to_owned(),
            attempt: self.failure.attempts,
            kind: self.failure.class.kind,
        });
        self.failure.attempts += 1;
        if !self.save(None, None).await {
            return Next::Done(Handled::Cancelled);
        }
        self.attempt_cleared().await
    }

    fn fixed_by(&mut self, fixer: &str, attempt: u32) {
        self.fixed_by = Some((fixer.to_owned(), attempt));
    }

    /// `fix(builtin)`: the built-in repair of the arguments against the tool's schema, at most
    /// `retries` times. Arguments it cannot repair (or that fit already) go down the ladder.
    pub(super) async fn fix_builtin(&mut self, retries: NonZeroU32) -> Next {
        for attempt_no in 1..=retries.get() {
            if self.repair_steps >= self.ctx.limits().max_repair_steps {
                break;
            }
            let repaired = match repair_arguments(self.raw(), self.tool.parameters()) {
                Ok(repaired) => repaired,
                Err(refused) => {
                    tracing::debug!(tool = self.tool.name(), %refused, "no built-in repair");
                    break;
                }
            };
            self.repair_steps += 1;
            let changes: Vec<String> = repaired.changes().iter().map(|c| c.to_string()).collect();
            let changes = changes.join("; ");
            tracing::debug!(tool = self.tool.name(), %changes, "arguments repaired");
            let next = self
                .rerun_fixed(BUILTIN, attempt_no, repaired.into_arguments())
                .await;
            if !matches!(next, Next::Down) {
                return next;
            }
        }
        Next::Down
    }
}

/// Asks a fixer, catching a panic whether the fixer is sync (panics when called) or async
/// (panics when polled).
async fn ask(fixer: &FixerDef, request: FixRequest) -> Result<Result<Fix, FixerError>, ToolPanic> {
    let answer = match std::panic::catch_unwind(AssertUnwindSafe(|| fixer.fix(request))) {
        Ok(future) => AssertUnwindSafe(future).catch_unwind().await,
        Err(payload) => Err(payload),
    };
    answer.map_err(ToolPanic::from_payload)
}
