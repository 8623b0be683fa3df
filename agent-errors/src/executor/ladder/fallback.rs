//! The `fallback(tool = ..)` rung: the call handed to another tool with the same arguments,
//! under that tool's own retry rungs, one level deep.
//!
//! Which failure drives the rest of the ladder after a fallback fails: the called tool's. The
//! ladder (and the run-ending rules after it: auth, an open circuit, retries used up) was
//! written for the called tool's failure, so a permanent failure (a 400) that falls back to a
//! tool answering 503 stays permanent: the model is shown the called tool's own failure, with
//! a note that the fallback was tried and failed too, and is never told "transient" about a
//! call it should not repeat. Only an auth failure of the fallback ends the run, naming the
//! fallback: its credentials need checking whatever the called tool's failure was. The
//! fallback's failure is also an event of its own, so the run's report keeps both.

use super::{Next, Sending, Walk};
use crate::classify::ErrorKind;
use crate::events::Event;
use crate::executor::attempt::{Missed, attempt};
use crate::executor::gate::{Cleared, Refused};
use crate::executor::outcome::{Failure, Handled, TerminationReason};
use crate::policy::{Action, ResolvedPolicy};
use crate::sanitize::scrub;
use crate::tool::ToolDef;

impl<'a> Walk<'a> {
    /// `fallback(tool = ..)`: call another tool with the same arguments, under the retry rungs
    /// of its own resolved policy (paid for by the same retry allowance), but not its fallback
    /// rungs: fallbacks do not chain. The arguments pass the gate as the fallback's (a person
    /// is asked when the fallback needs approval): an unavailable fallback is skipped, a denied
    /// one answers the call as a denial. Auth ends
    /// the run, naming the fallback; any other failure is noted on the called tool's failure,
    /// which goes on down the ladder.
    pub(super) async fn fallback(&mut self, target: &str) -> Next {
        let Some((fallback, policy, _)) = self.registry.entry(target) else {
            return Next::Down;
        };
        let cleared = match self.clear_for(fallback, None).await {
            Ok(cleared) => cleared,
            Err(Refused::Unavailable(_)) => return Next::Down,
            Err(Refused::Answered(handled)) => return Next::Done(handled),
            Err(Refused::Invalid(error)) => {
                let failure =
                    Failure::new(error, self.failure.attempts, self.ctx.hooks().classifier());
                return self.fallback_failed(fallback, failure);
            }
        };
        self.ctx.events().emit(Event::FellBack {
            tool: self.tool.name().to_owned(),
            to: fallback.name().to_owned(),
            attempt: self.failure.attempts,
            kind: self.failure.class.kind,
        });
        self.failure.attempts += 1;
        if !self.save(None, None).await {
            return Next::Done(Handled::Cancelled);
        }
        let failure = match attempt(self.ctx, &cleared, &self.extensions).await {
            Ok(output) => return Next::Done(Handled::Ok(output)),
            Err(Missed::Tripped { failures }) => return self.tripped(fallback.name(), failures),
            Err(Missed::Failed(error)) => {
                Failure::new(error, self.failure.attempts, self.ctx.hooks().classifier())
            }
        };
        match self
            .fallback_retries((fallback, policy), failure, cleared)
            .await
        {
            Ok(handled) => Next::Done(handled),
            Err(failure) => self.fallback_failed(fallback, failure),
        }
    }

    /// The fallback's own retries after its first call failed with `failure`: a walk of the
    /// fallback's ladders that takes only their retry rungs. Its answer, or its last failure.
    async fn fallback_retries(
        &self,
        (fallback, policy): (&'a ToolDef, &'a ResolvedPolicy),
        failure: Failure,
        cleared: Cleared<'a>,
    ) -> Result<Handled, Failure> {
        // The arguments cleared for the fallback, as the same variant as the walk's, so a saved
        // progress keeps a fixer's rewrite.
        let mut walk = Walk::new(
            self.registry,
            self.ctx,
            (fallback, policy),
            self.call,
            (failure, Sending::Cleared(cleared)),
            (self.extensions.clone(), self.approved.clone()),
            None,
        );
        walk.repair_steps = self.repair_steps;
        walk.nested = true;
        walk.retries_only().await
    }

    /// Walks only the retry rungs of the ladders, a new key's ladder when a retry fails in
    /// another way: the answer, or the failure in hand when no retry rung is left.
    async fn retries_only(mut self) -> Result<Handled, Failure> {
        'ladders: loop {
            let (key, ladder) = self.entry();
            self.walked.push(key);
            for (index, action) in ladder.actions().iter().enumerate() {
                let Action::Retry(retry) = action else {
                    continue;
                };
                self.rung = (key, index);
                match self.retry(retry).await {
                    Next::Done(handled) => return Ok(handled),
                    Next::Stop(reason) => return Ok(Handled::stop(reason, self.failure)),
                    Next::Down => {}
                    Next::Switch => continue 'ladders,
                }
            }
            return Err(self.failure);
        }
    }

    /// The fallback failed with `failure`: auth ends the run naming the fallback; anything else
    /// is an event of its own and a note on the called tool's failure, which stays the one the
    /// rest of the ladder answers.
    fn fallback_failed(&mut self, fallback: &ToolDef, mut failure: Failure) -> Next {
        self.failure.attempts = self.failure.attempts.max(failure.attempts);
        let name = fallback.name();
        if failure.class.kind == ErrorKind::Auth {
            failure.blamed = Some(name.to_owned());
            self.failure = failure;
            return Next::Stop(TerminationReason::Auth);
        }
        let limit = self.ctx.limits().max_message_chars;
        let kind = failure.class.kind;
        self.ctx.events().emit(Event::ToolFailed {
            tool: name.to_owned(),
            kind,
            message: scrub(&failure.message(), limit / 2),
        });
        // The note is read by the model: the fallback's words for the model only.
        let message = scrub(&failure.model_message(), limit / 2);
        self.failure.fallback_failed = Some(format!(
            "the fallback `{name}` was tried and failed too, {}: {message}",
            kind.as_str()
        ));
        Next::Down
    }
}
