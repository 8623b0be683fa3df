//! What bounds a run: its [`Limits`], and the allowance of retries every layer spends from.

use std::sync::Arc;

use crate::retry::RetryAllowance;

use super::super::limits::Limits;

/// The run's limits and its retry allowance, made from them.
#[derive(Debug)]
pub(crate) struct RunLimits {
    limits: Limits,
    /// The run's retries, spent by every layer that calls something again.
    retries: Arc<RetryAllowance>,
}

impl RunLimits {
    pub(super) fn new(limits: Limits) -> Self {
        RunLimits {
            retries: Arc::new(RetryAllowance::new(limits.max_retries)),
            limits,
        }
    }

    pub(crate) fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The run's retry allowance: every retry of the run, at any layer, spends from it.
    pub(crate) fn retries(&self) -> &Arc<RetryAllowance> {
        &self.retries
    }
}
