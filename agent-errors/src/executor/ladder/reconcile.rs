//! Before any rung: a failure that leaves the call's outcome unknown is taken to the tool's
//! reconciler first, and a call answered while its outcome is still unknown is recorded so a
//! repeat of it is not run (see [`unknown`](crate::executor::unknown)).

use super::{Next, Walk};
use crate::classify::{Classification, ErrorKind, Evidence};
use crate::executor::outcome::Handled;
use crate::executor::unknown::{self, MAX_RECONCILES};
use crate::reconcile::Reconciled;

impl Walk<'_> {
    /// Asks the tool's reconciler whether the call took effect, when its failure in hand may
    /// have and the tool has one: `happened` answers the call with the reconciler's output;
    /// `did not happen` runs a call that had no failure of its own (a crash mid-call) again,
    /// with the same key, and lets any other failure go down its ladder like one that did
    /// nothing; `still unknown` hands the failure to the `outcome_unknown` ladder. `None` when
    /// nobody was asked, or the walk goes on with the failure in hand.
    pub(super) async fn reconciled(&mut self) -> Option<Next> {
        if !unknown::may_have_taken_effect(self.tool, &self.failure)
            || self.reconciles >= MAX_RECONCILES
        {
            return None;
        }
        let reconciler = self.registry.reconciler_of(self.tool)?;
        self.reconciles += 1;
        let (tool, call_id) = (self.tool.name(), &*self.call.id);
        let reason = self.failure.model_message();
        let asked = unknown::reconcile(self.ctx, reconciler, tool, call_id, self.raw(), &reason);
        match asked.await {
            Reconciled::Happened(output) => {
                self.uncertain = false;
                Some(Next::Done(Handled::Ok(output)))
            }
            Reconciled::DidNotHappen => {
                self.uncertain = false;
                if self.failure.class.kind != ErrorKind::OutcomeUnknown {
                    return None;
                }
                Some(self.run_again().await)
            }
            Reconciled::StillUnknown if self.tool.is_idempotent() => {
                // Running an idempotent tool's call again does no harm.
                Some(self.run_again().await)
            }
            Reconciled::StillUnknown => {
                if self.failure.class.kind != ErrorKind::OutcomeUnknown {
                    let evidence = Evidence::Type("Reconciled::StillUnknown");
                    self.failure.class = Classification::new(ErrorKind::OutcomeUnknown, evidence);
                }
                None
            }
        }
    }

    /// The call again, with the same arguments and key, as one more attempt, saved first.
    async fn run_again(&mut self) -> Next {
        self.failure.attempts += 1;
        if !self.save(None, None).await {
            return Next::Done(Handled::Cancelled);
        }
        self.try_again(None).await
    }

    /// Records the call as one whose outcome is unknown when a failure of it may have taken
    /// effect and nothing since said whether it did.
    pub(super) fn record_unknown(&self) {
        if self.uncertain && !self.nested {
            let reason = self.failure.model_message();
            unknown::record(self.ctx, self.tool, self.call, self.raw(), &reason);
        }
    }
}
