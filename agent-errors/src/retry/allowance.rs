//! The run's retry allowance: one count that every retry of a run spends, at every layer (tool
//! retries, the provider's transport, model-call wrappers, `on_llm_error`), so the total number
//! of retries a run makes is bounded by one number, and a durable run carries what it spent
//! across a restart.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

/// How many retries a run may still make. Shared (behind an `Arc`) by every layer of one run.
#[derive(Debug)]
pub(crate) struct RetryAllowance {
    limit: u32,
    spent: AtomicU32,
}

impl RetryAllowance {
    /// An allowance of `limit` retries, none spent.
    pub(crate) fn new(limit: u32) -> Self {
        RetryAllowance {
            limit,
            spent: AtomicU32::new(0),
        }
    }

    /// Spends one retry; false (and nothing spent) when none is left.
    pub(crate) fn try_spend(&self) -> bool {
        self.spent
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |spent| {
                (spent < self.limit).then_some(spent + 1)
            })
            .is_ok()
    }

    /// Retries spent so far.
    pub(crate) fn spent(&self) -> u32 {
        self.spent.load(Ordering::SeqCst)
    }

    /// Takes up what an interrupted run had spent: spent retries stay spent.
    pub(crate) fn restore(&self, spent: u32) {
        self.spent.store(spent, Ordering::SeqCst);
    }
}

/// The allowance a model call spends from: the run's inside an agent run, none outside one (a
/// model wrapper used on its own is bounded by its own limits only). Carried by every
/// `ChatRequest`, so the layers inside `ChatModel::chat` spend the same count as the loop.
/// Not part of a request's identity: any two compare equal.
#[derive(Clone, Default)]
pub(crate) struct RunRetries(Option<Arc<RetryAllowance>>);

impl RunRetries {
    /// Spending from `allowance`.
    pub(crate) fn new(allowance: Arc<RetryAllowance>) -> Self {
        RunRetries(Some(allowance))
    }

    /// Spends one retry; false when the run has none left. Always true outside a run.
    pub(crate) fn try_spend(&self) -> bool {
        self.0
            .as_ref()
            .is_none_or(|allowance| allowance.try_spend())
    }
}

impl PartialEq for RunRetries {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl fmt::Debug for RunRetries {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Some(allowance) => write!(f, "RunRetries({} spent)", allowance.spent()),
            None => f.write_str("RunRetries(none)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{RetryAllowance, RunRetries};
    use std::sync::Arc;

    #[test]
    fn spends_up_to_its_limit_and_no_further() {
        let allowance = RetryAllowance::new(2);
        assert!(allowance.try_spend());
        assert!(allowance.try_spend());
        assert!(!allowance.try_spend());
        assert_eq!(allowance.spent(), 2);
    }

    #[test]
    fn a_request_outside_a_run_is_bounded_by_its_own_limits_only() {
        assert!(RunRetries::default().try_spend());
        let shared = RunRetries::new(Arc::new(RetryAllowance::new(1)));
        assert!(shared.try_spend());
        assert!(!shared.clone().try_spend());
    }

    #[test]
    fn a_restored_count_stays_spent() {
        let allowance = RetryAllowance::new(3);
        allowance.restore(3);
        assert!(!allowance.try_spend());
    }
}
