//! Checkpoints: a run's state saved after every model turn and every tool result, so that the
//! run can be resumed by another process after this one dies.
//!
//! A run's checkpoints are a journal: a **snapshot** of the whole state now and then, and after
//! it a **record** per save of what that save changed (the new messages, one call's progress,
//! the changed counts). Loading a run reads its latest snapshot and the records after it. The
//! library serializes both; a store sees opaque bytes, a run id and a sequence number, and has
//! three duties:
//!
//! - **Atomic saves.** An append or a snapshot is stored whole or not at all: a crash mid-write
//!   never leaves a half-state to resume from.
//! - **Fencing by sequence.** Sequence numbers of one run go 0, 1, 2, ..., shared by records and
//!   snapshots. A save of sequence `n` (either kind) succeeds only when the run's latest stored
//!   sequence is `n - 1` (or, for `n == 0`, when nothing is stored). Otherwise it fails with
//!   [`CheckpointError::Conflict`] and stores nothing, so two processes that resumed the same
//!   run cannot both carry it on.
//! - **Compaction.** A snapshot of sequence `n` holds everything up to `n`: the records before
//!   it are dropped with it.
//!
//! A store that keeps only whole states (one that implements [`save`](CheckpointStore::save),
//! [`load`](CheckpointStore::load) and [`delete`](CheckpointStore::delete), as every store did
//! before the journal) still works: [`journals`](CheckpointStore::journals) says `false` and
//! every save of the run is a snapshot. To move such a store onto the journal, implement
//! [`append`](CheckpointStore::append) and [`load_journal`](CheckpointStore::load_journal),
//! make `save` drop the records it covers, and answer `true` from `journals`; runs it saved
//! before load as snapshots without records.

mod memory;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;

pub use memory::MemoryCheckpoints;
#[cfg(feature = "postgres")]
pub use postgres::{
    DEFAULT_TABLE, PostgresCheckpoints, PostgresCheckpointsBuilder, PostgresStoreError,
};
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteCheckpoints;

use std::fmt;

use crate::error::BoxError;
use crate::error::BoxFuture;

/// One saved state of a run.
///
/// # Examples
///
/// ```
/// use agent_errors::checkpoint::Checkpoint;
///
/// let first = Checkpoint { run_id: "run-1".into(), sequence: 0, state: b"{}".to_vec() };
/// let next = Checkpoint { sequence: first.sequence + 1, ..first.clone() };
/// assert_eq!(format!("{next:?}"), r#"Checkpoint { run_id: "run-1", sequence: 1, state_bytes: 2 }"#);
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The run this state belongs to.
    pub run_id: String,
    /// The save's place in the run: 0 for the first, one more for each save after it.
    pub sequence: u64,
    /// The run's state, serialized by the library. Stores keep it as it is.
    pub state: Vec<u8>,
}

impl fmt::Debug for Checkpoint {
    // The state holds the transcript: tool outputs and user text stay out of logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Checkpoint")
            .field("run_id", &self.run_id)
            .field("sequence", &self.sequence)
            .field("state_bytes", &self.state.len())
            .finish()
    }
}

/// Why a checkpoint could not be saved or loaded.
///
/// # Examples
///
/// A second save of the same sequence loses, as a second process would:
///
/// ```
/// use agent_errors::checkpoint::{Checkpoint, CheckpointError, CheckpointStore, MemoryCheckpoints};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), CheckpointError> {
/// let store = MemoryCheckpoints::new();
/// let first = Checkpoint { run_id: "run-1".into(), sequence: 0, state: b"{}".to_vec() };
/// store.save(&first).await?;
/// match store.save(&first).await {
///     Err(CheckpointError::Conflict { found, .. }) => assert_eq!(found, Some(0)), // someone else owns the run
///     Err(CheckpointError::Store(error)) => return Err(CheckpointError::Store(error)), // retry later
///     Err(error) => return Err(error), // `Corrupt`, and the non-exhaustive rest
///     Ok(()) => unreachable!("sequence 0 is taken"),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// The stored checkpoint is not the one this save follows: another process saved the run
    /// since this one loaded it, or the sequence skipped.
    #[error(
        "checkpoint conflict for run {run_id}: expected to follow sequence {expected:?}, found {found:?}"
    )]
    Conflict {
        /// The run.
        run_id: String,
        /// The sequence this save follows (`None` for a first save).
        expected: Option<u64>,
        /// The sequence stored (`None` when nothing is).
        found: Option<u64>,
    },
    /// The store failed: I/O, a lost connection, a database error.
    #[error("checkpoint store failed: {0}")]
    Store(#[source] BoxError),
    /// A stored state could not be read back: written by an incompatible version, or damaged.
    #[error("checkpoint of run {run_id} cannot be read: {reason}")]
    Corrupt {
        /// The run.
        run_id: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl CheckpointError {
    /// A store's failure, its `source()` chain redacted when it is made (every level's words
    /// with their secrets replaced): a database error can print its connection string. What
    /// the library's stores return; a store of yours should too. An error of your store that
    /// reaches a run's error is redacted there anyway.
    ///
    /// ```
    /// use agent_errors::checkpoint::CheckpointError;
    ///
    /// let down = std::io::Error::other("cannot reach postgres://app:hunter22@db.internal/prod");
    /// let error = CheckpointError::store(down);
    /// let cause = std::error::Error::source(&error).unwrap().to_string();
    /// assert_eq!(cause, "cannot reach postgres://app:[REDACTED]@db.internal/prod");
    /// ```
    pub fn store(error: impl Into<BoxError>) -> Self {
        CheckpointError::Store(redacted_chain(error.into()))
    }

    /// This error with every text it shows redacted, and a `Store` error's chain replaced by
    /// a redacted copy: what a run hands out.
    pub(crate) fn redacted(self) -> Self {
        let text = |t: String| crate::redact::redact(&t).into_owned();
        match self {
            CheckpointError::Conflict {
                run_id,
                expected,
                found,
            } => CheckpointError::Conflict {
                run_id: text(run_id),
                expected,
                found,
            },
            CheckpointError::Store(error) => CheckpointError::Store(redacted_chain(error)),
            CheckpointError::Corrupt { run_id, reason } => CheckpointError::Corrupt {
                run_id: text(run_id),
                reason: text(reason),
            },
        }
    }

    /// The conflict a save of `sequence` meets when `found` is stored.
    pub fn conflict(run_id: &str, sequence: u64, found: Option<u64>) -> Self {
        CheckpointError::Conflict {
            run_id: run_id.to_owned(),
            expected: sequence.checked_sub(1),
            found,
        }
    }
}

/// `error`'s chain redacted; kept as it is when it is redacted already (a copy made before,
/// or a PostgreSQL store's error, whose messages are redacted when made and which callers
/// downcast to).
fn redacted_chain(error: BoxError) -> BoxError {
    #[cfg(feature = "postgres")]
    if error.is::<PostgresStoreError>() {
        return error;
    }
    if error.is::<crate::classify::RedactedError>() {
        return error;
    }
    crate::classify::RedactedError::chain_of(error.as_ref())
}

/// Whether a save of `sequence` may follow the stored sequence `found`: the fencing rule every
/// store applies.
///
/// # Examples
///
/// The check a store of yours makes before it writes:
///
/// ```
/// use agent_errors::checkpoint::follows;
///
/// assert!(follows(0, None)); // a first save
/// assert!(follows(4, Some(3)));
/// assert!(!follows(4, Some(4))); // another process saved first
/// ```
pub fn follows(sequence: u64, found: Option<u64>) -> bool {
    match found {
        None => sequence == 0,
        Some(found) => found.checked_add(1) == Some(sequence),
    }
}

/// A run as a journaling store holds it: its latest snapshot and the records saved after it, in
/// sequence order.
///
/// # Examples
///
/// ```
/// use agent_errors::checkpoint::{Checkpoint, StoredRun};
///
/// let snapshot = Checkpoint { run_id: "run-1".into(), sequence: 0, state: b"{}".to_vec() };
/// let record = Checkpoint { sequence: 1, ..snapshot.clone() };
/// let stored = StoredRun { snapshot, records: vec![record] };
/// assert_eq!(stored.last_sequence(), 1);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRun {
    /// The latest snapshot: the whole state at its sequence.
    pub snapshot: Checkpoint,
    /// What each save after the snapshot changed, sequences `snapshot.sequence + 1` onwards.
    pub records: Vec<Checkpoint>,
}

impl StoredRun {
    /// The run's latest sequence: its last record's, or the snapshot's when it has none.
    pub fn last_sequence(&self) -> u64 {
        self.records
            .last()
            .map_or(self.snapshot.sequence, |record| record.sequence)
    }
}

/// Where checkpoints live. See the [module documentation](self) for the rules a store keeps.
///
/// # Examples
///
/// A store of your own (here a map behind a mutex; a real one writes to a database in one
/// conditional statement):
///
/// ```
/// use std::collections::HashMap;
/// use std::sync::Mutex;
/// use agent_errors::call::BoxFuture;
/// use agent_errors::checkpoint::{Checkpoint, CheckpointError, CheckpointStore, follows};
///
/// #[derive(Debug, Default)]
/// struct MapStore(Mutex<HashMap<String, Checkpoint>>);
///
/// impl CheckpointStore for MapStore {
///     fn save<'a>(&'a self, checkpoint: &'a Checkpoint) -> BoxFuture<'a, Result<(), CheckpointError>> {
///         Box::pin(async move {
///             let mut runs = self.0.lock().unwrap();
///             let found = runs.get(&checkpoint.run_id).map(|c| c.sequence);
///             if !follows(checkpoint.sequence, found) {
///                 return Err(CheckpointError::conflict(&checkpoint.run_id, checkpoint.sequence, found));
///             }
///             runs.insert(checkpoint.run_id.clone(), checkpoint.clone());
///             Ok(())
///         })
///     }
///     fn load<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<Option<Checkpoint>, CheckpointError>> {
///         Box::pin(async move { Ok(self.0.lock().unwrap().get(run_id).cloned()) })
///     }
///     fn delete<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<(), CheckpointError>> {
///         Box::pin(async move { Ok(drop(self.0.lock().unwrap().remove(run_id))) })
///     }
/// }
///
/// let agent = agent_errors::Agent::builder("a")
///     .model(agent_errors::testing::ScriptedModel::new())
///     .checkpoints(MapStore::default())
///     .build();
/// assert!(agent.is_ok());
/// ```
pub trait CheckpointStore: Send + Sync + fmt::Debug + 'static {
    /// Saves `checkpoint` as the run's snapshot, atomically, if its sequence follows the run's
    /// latest (snapshot or record); otherwise fails with [`CheckpointError::Conflict`] and
    /// changes nothing. A journaling store drops the run's records with it.
    fn save<'a>(&'a self, checkpoint: &'a Checkpoint)
    -> BoxFuture<'a, Result<(), CheckpointError>>;

    /// The latest snapshot of `run_id`, if any.
    fn load<'a>(
        &'a self,
        run_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Checkpoint>, CheckpointError>>;

    /// Forgets `run_id`, its snapshot and records; forgetting a run that has no checkpoint is
    /// not an error.
    fn delete<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<(), CheckpointError>>;

    /// Whether this store keeps a journal ([`append`](Self::append) and
    /// [`load_journal`](Self::load_journal)). A store that does not is sent every save as a
    /// snapshot.
    fn journals(&self) -> bool {
        false
    }

    /// Appends `record` after the run's latest snapshot or record, atomically, if its sequence
    /// follows the run's latest; otherwise fails with [`CheckpointError::Conflict`] and changes
    /// nothing. Called only when [`journals`](Self::journals) answers `true`; the default
    /// refuses.
    fn append<'a>(&'a self, record: &'a Checkpoint) -> BoxFuture<'a, Result<(), CheckpointError>> {
        let refused = CheckpointError::Store(
            format!(
                "this store keeps no journal: record {} of run not saved",
                record.sequence
            )
            .into(),
        );
        Box::pin(std::future::ready(Err(refused)))
    }

    /// The run's latest snapshot and the records after it, if it has any. The default reads the
    /// snapshot alone, as a store without a journal keeps it.
    fn load_journal<'a>(
        &'a self,
        run_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<StoredRun>, CheckpointError>> {
        Box::pin(async move {
            let snapshot = self.load(run_id).await?;
            Ok(snapshot.map(|snapshot| StoredRun {
                snapshot,
                records: Vec::new(),
            }))
        })
    }
}
