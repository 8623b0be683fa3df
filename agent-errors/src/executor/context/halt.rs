//! How a run stops its calls: the caller's [`Cancellation`], and the halt the executor adds when
//! one call's answer ends the run, so the calls still running answer "operation cancelled"
//! instead of holding the run open.

use std::sync::OnceLock;

use tokio_util::sync::CancellationToken;

use super::super::cancel::Cancellation;

/// The run's cancellation and its halt. The halt is a child of the cancellation, made the first
/// time something waits on it or halts the run: a run whose calls all finish on their first
/// poll never links one into the caller's cancellation tree (and never unlinks it).
#[derive(Debug)]
pub(crate) struct Halt {
    cancel: Cancellation,
    halt: OnceLock<CancellationToken>,
}

impl Halt {
    pub(super) fn new(cancel: Cancellation) -> Self {
        Halt {
            cancel,
            halt: OnceLock::new(),
        }
    }

    /// The caller's handle.
    pub(crate) fn cancellation(&self) -> &Cancellation {
        &self.cancel
    }

    /// Whether the run was cancelled or halted.
    pub(crate) fn is_halted(&self) -> bool {
        self.cancel.is_cancelled() || self.halt.get().is_some_and(|h| h.is_cancelled())
    }

    /// Completes when the run is cancelled or halted.
    pub(crate) fn token(&self) -> &CancellationToken {
        self.halt.get_or_init(|| self.cancel.child())
    }

    /// Ends the calls still running in this run: they answer "operation cancelled". Unlike
    /// [`Cancellation::cancel`] it does not touch the caller's handle.
    pub(crate) fn halt(&self) {
        self.token().cancel();
    }
}
