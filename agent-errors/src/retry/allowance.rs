//! The run's retry allowance: one count that every retry of a run spends, at every layer (tool
//! retries, the provider's transport, model-call wrappers, `on_llm_error`), so the total number
//! of retries a run makes is bounded by one number, and a durable run carries what it spent
//! across a restart.

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

#[cfg(test)]
mod tests {
    use super::RetryAllowance;

    #[test]
    fn spends_up_to_its_limit_and_no_further() {
        let allowance = RetryAllowance::new(2);
        assert!(allowance.try_spend());
        assert!(allowance.try_spend());
        assert!(!allowance.try_spend());
        assert_eq!(allowance.spent(), 2);
    }

    #[test]
    fn a_restored_count_stays_spent() {
        let allowance = RetryAllowance::new(3);
        allowance.restore(3);
        assert!(!allowance.try_spend());
    }
}
