//! How a run is cancelled from outside: a [`Cancellation`] handle, shared by its clones.

use tokio_util::sync::CancellationToken;

/// A handle that cancels a run. Clones share the same state.
///
/// # Examples
///
/// ```
/// use agent_errors::Cancellation;
///
/// let cancel = Cancellation::new();
/// let handle = cancel.clone();
/// handle.cancel();
/// assert!(cancel.is_cancelled());
/// ```
#[derive(Debug, Clone, Default)]
pub struct Cancellation(CancellationToken);

impl Cancellation {
    /// A handle not yet cancelled.
    pub fn new() -> Self {
        Cancellation::default()
    }

    /// Cancels: pending and running tool calls answer "operation cancelled" and the run ends.
    pub fn cancel(&self) {
        self.0.cancel();
    }

    /// Whether `cancel` was called.
    pub fn is_cancelled(&self) -> bool {
        self.0.is_cancelled()
    }

    /// Completes once cancelled.
    pub async fn cancelled(&self) {
        self.0.cancelled().await;
    }

    /// A token cancelled with this handle, or on its own.
    pub(super) fn child(&self) -> CancellationToken {
        self.0.child_token()
    }
}
