//! How a run is cancelled from outside: a [`Cancellation`] handle, shared by its clones.

use std::fmt;
use std::sync::OnceLock;

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
#[derive(Default)]
pub struct Cancellation(
    /// Made the first time it is needed: a handle nobody cloned, cancelled or waited on (every
    /// run's default one, most of the time) never allocates a token nor takes its lock. A clone
    /// makes it, so that the two share it.
    OnceLock<CancellationToken>,
);

impl Clone for Cancellation {
    fn clone(&self) -> Self {
        Cancellation(OnceLock::from(self.token().clone()))
    }
}

impl fmt::Debug for Cancellation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cancellation")
            .field("is_cancelled", &self.is_cancelled())
            .finish()
    }
}

impl Cancellation {
    /// A handle not yet cancelled.
    pub fn new() -> Self {
        Cancellation::default()
    }

    /// Cancels: pending and running tool calls answer "operation cancelled" and the run ends.
    pub fn cancel(&self) {
        self.token().cancel();
    }

    /// Whether `cancel` was called.
    pub fn is_cancelled(&self) -> bool {
        // No token yet: nobody could have cancelled it.
        self.0.get().is_some_and(CancellationToken::is_cancelled)
    }

    /// Completes once cancelled.
    pub async fn cancelled(&self) {
        self.token().cancelled().await;
    }

    /// A token cancelled with this handle, or on its own.
    pub(super) fn child(&self) -> CancellationToken {
        self.token().child_token()
    }

    fn token(&self) -> &CancellationToken {
        self.0.get_or_init(CancellationToken::new)
    }
}

#[cfg(test)]
mod tests {
    use super::Cancellation;

    #[test]
    fn a_handle_cancelled_before_it_is_cloned_gives_a_cancelled_clone() {
        let cancel = Cancellation::new();
        cancel.cancel();
        assert!(cancel.clone().is_cancelled());
    }

    #[tokio::test]
    async fn a_clone_made_before_anything_else_cancels_the_original_and_its_children() {
        let cancel = Cancellation::new();
        let handle = cancel.clone();
        let child = cancel.child();
        assert!(!cancel.is_cancelled());
        handle.cancel();
        cancel.cancelled().await;
        assert!(child.is_cancelled());
    }

    #[test]
    fn a_handle_nobody_touched_is_not_cancelled_and_its_child_hears_of_a_later_cancel() {
        let cancel = Cancellation::default();
        assert!(!cancel.is_cancelled());
        let child = cancel.child();
        cancel.cancel();
        assert!(child.is_cancelled());
    }
}
