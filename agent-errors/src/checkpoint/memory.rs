//! Checkpoints in this process's memory: for tests, and for runs that must survive a failed
//! turn but not a dead process.

use std::collections::HashMap;
use std::sync::Mutex;

use super::{Checkpoint, CheckpointError, CheckpointStore, follows};
use crate::error::BoxFuture;

/// A [`CheckpointStore`] in memory.
///
/// # Examples
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use agent_errors::checkpoint::{Checkpoint, CheckpointStore, MemoryCheckpoints};
///
/// let store = MemoryCheckpoints::new();
/// let first = Checkpoint { run_id: "run-1".into(), sequence: 0, state: b"{}".to_vec() };
/// store.save(&first).await.unwrap();
/// // A second save of sequence 0 is a conflict: someone else already carried the run on.
/// assert!(store.save(&first).await.is_err());
/// assert_eq!(store.load("run-1").await.unwrap(), Some(first));
/// # });
/// ```
#[derive(Debug, Default)]
pub struct MemoryCheckpoints {
    runs: Mutex<HashMap<String, Checkpoint>>,
}

impl MemoryCheckpoints {
    /// An empty store.
    pub fn new() -> Self {
        MemoryCheckpoints::default()
    }

    fn runs(&self) -> std::sync::MutexGuard<'_, HashMap<String, Checkpoint>> {
        // A panic while holding the lock cannot leave a map half-updated: every write is one insert.
        self.runs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl CheckpointStore for MemoryCheckpoints {
    fn save<'a>(
        &'a self,
        checkpoint: &'a Checkpoint,
    ) -> BoxFuture<'a, Result<(), CheckpointError>> {
        Box::pin(async move {
            let mut runs = self.runs();
            let found = runs.get(&checkpoint.run_id).map(|saved| saved.sequence);
            if !follows(checkpoint.sequence, found) {
                return Err(CheckpointError::conflict(
                    &checkpoint.run_id,
                    checkpoint.sequence,
                    found,
                ));
            }
            runs.insert(checkpoint.run_id.clone(), checkpoint.clone());
            Ok(())
        })
    }

    fn load<'a>(
        &'a self,
        run_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Checkpoint>, CheckpointError>> {
        Box::pin(async move { Ok(self.runs().get(run_id).cloned()) })
    }

    fn delete<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<(), CheckpointError>> {
        Box::pin(async move {
            self.runs().remove(run_id);
            Ok(())
        })
    }
}
