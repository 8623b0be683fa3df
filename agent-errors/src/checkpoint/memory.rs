//! Checkpoints in this process's memory: for tests, and for runs that must survive a failed
//! turn but not a dead process.

use std::collections::HashMap;
use std::sync::Mutex;

use super::{Checkpoint, CheckpointError, CheckpointStore, StoredRun, follows};
use crate::error::BoxFuture;

/// A [`CheckpointStore`] in memory, keeping a journal: each run's latest snapshot and the
/// records after it.
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
/// let record = Checkpoint { sequence: 1, state: b"[]".to_vec(), ..first.clone() };
/// store.append(&record).await.unwrap();
/// let stored = store.load_journal("run-1").await.unwrap().unwrap();
/// assert_eq!((stored.snapshot, stored.records), (first, vec![record]));
/// # });
/// ```
#[derive(Debug, Default)]
pub struct MemoryCheckpoints {
    runs: Mutex<HashMap<String, StoredRun>>,
}

impl MemoryCheckpoints {
    /// An empty store.
    pub fn new() -> Self {
        MemoryCheckpoints::default()
    }

    fn runs(&self) -> std::sync::MutexGuard<'_, HashMap<String, StoredRun>> {
        // A panic while holding the lock cannot leave a map half-updated: every write is one
        // insert or one push, after the fencing check.
        self.runs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Checks the fencing rule for a save of `checkpoint` against what the map holds.
    fn fenced(
        runs: &HashMap<String, StoredRun>,
        checkpoint: &Checkpoint,
    ) -> Result<(), CheckpointError> {
        let found = runs.get(&checkpoint.run_id).map(StoredRun::last_sequence);
        if follows(checkpoint.sequence, found) {
            Ok(())
        } else {
            Err(CheckpointError::conflict(
                &checkpoint.run_id,
                checkpoint.sequence,
                found,
            ))
        }
    }
}

impl CheckpointStore for MemoryCheckpoints {
    fn save<'a>(
        &'a self,
        checkpoint: &'a Checkpoint,
    ) -> BoxFuture<'a, Result<(), CheckpointError>> {
        Box::pin(async move {
            let mut runs = self.runs();
            Self::fenced(&runs, checkpoint)?;
            let stored = StoredRun {
                snapshot: checkpoint.clone(),
                records: Vec::new(),
            };
            runs.insert(checkpoint.run_id.clone(), stored);
            Ok(())
        })
    }

    fn load<'a>(
        &'a self,
        run_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Checkpoint>, CheckpointError>> {
        Box::pin(async move { Ok(self.runs().get(run_id).map(|run| run.snapshot.clone())) })
    }

    fn delete<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<(), CheckpointError>> {
        Box::pin(async move {
            self.runs().remove(run_id);
            Ok(())
        })
    }

    fn journals(&self) -> bool {
        true
    }

    fn append<'a>(&'a self, record: &'a Checkpoint) -> BoxFuture<'a, Result<(), CheckpointError>> {
        Box::pin(async move {
            let mut runs = self.runs();
            Self::fenced(&runs, record)?;
            // A record follows a snapshot: a run's first save (sequence 0) is one.
            let Some(run) = runs.get_mut(&record.run_id) else {
                return Err(CheckpointError::Store(
                    "a run's first save must be a snapshot".into(),
                ));
            };
            run.records.push(record.clone());
            Ok(())
        })
    }

    fn load_journal<'a>(
        &'a self,
        run_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<StoredRun>, CheckpointError>> {
        Box::pin(async move { Ok(self.runs().get(run_id).cloned()) })
    }
}
