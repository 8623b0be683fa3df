//! What bounds a run: its [`Limits`], the allowance of retries every layer spends from, and the
//! meter its usage caps hold on.

use std::sync::Arc;

use crate::retry::RetryAllowance;
use crate::usage::RunMeter;

use super::super::limits::Limits;

/// The run's limits and its retry allowance, made from them.
#[derive(Debug)]
pub(crate) struct RunLimits {
    limits: Limits,
    /// The run's retries, spent by every layer that calls something again.
    retries: Arc<RetryAllowance>,
    /// The run's one usage meter: every model request and tool body of the run is counted on
    /// it (none in a run without usage caps).
    meter: RunMeter,
}

impl RunLimits {
    pub(super) fn new(limits: Limits, meter: RunMeter) -> Self {
        RunLimits {
            retries: Arc::new(RetryAllowance::new(limits.max_retries)),
            limits,
            meter,
        }
    }

    pub(crate) fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The run's retry allowance: every retry of the run, at any layer, spends from it.
    pub(crate) fn retries(&self) -> &Arc<RetryAllowance> {
        &self.retries
    }

    pub(crate) fn meter(&self) -> &RunMeter {
        &self.meter
    }
}
