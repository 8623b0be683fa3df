//! The seam a durable run records through: every run has a recorder, and a run without a
//! checkpoint store has [`NoRecorder`], which records nothing and costs nothing.
//!
//! The executor tells it how far each call got ([`CallRecorder::progress`]); the agent loop
//! tells the same recorder about turns, answers and the run's end.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, LazyLock};
use std::task::{Context, Poll};

use super::context::recovery::RecoveryState;
use super::resume::CallProgress;
use crate::error::BoxFuture;

/// Told how each call of a run gets on, so a durable run's checkpoint can say so.
pub(crate) trait CallRecorder: Send + Sync + 'static {
    /// Whether this recorder keeps anything: when it does not, callers skip building what they
    /// would have told it.
    fn records(&self) -> bool;

    /// Records `progress` for the call `call_id`, with the run's `recovery` state as it is now
    /// (the caller reads it, so the recorder needs nothing of the run that holds it); false when
    /// the save failed (the run is then halting, and the call must not go on to run its tool).
    fn progress<'a>(
        &'a self,
        call_id: &'a str,
        progress: CallProgress,
        recovery: RecoveryState,
    ) -> BoxFuture<'a, bool>;
}

/// The recorder of a run that is not durable.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct NoRecorder;

impl NoRecorder {
    /// The one shared instance every non-durable run holds.
    pub(crate) fn shared() -> Arc<NoRecorder> {
        static SHARED: LazyLock<Arc<NoRecorder>> = LazyLock::new(|| Arc::new(NoRecorder));
        Arc::clone(&SHARED)
    }
}

impl CallRecorder for NoRecorder {
    fn records(&self) -> bool {
        false
    }

    fn progress<'a>(
        &'a self,
        _: &'a str,
        _: CallProgress,
        _: RecoveryState,
    ) -> BoxFuture<'a, bool> {
        Box::pin(Recorded)
    }
}

/// A record with nothing to save: ready at once with "saved". Zero-sized, so boxing it does not
/// allocate and a run without a store pays nothing per call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Recorded;

impl Future for Recorded {
    type Output = bool;

    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<bool> {
        Poll::Ready(true)
    }
}
