//! Checkpoints in a SQLite file (feature `sqlite`): durable runs that survive the process, on
//! one machine, with nothing to install.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::{Checkpoint, CheckpointError, CheckpointStore, follows};
use crate::error::BoxFuture;

/// How long a save waits for another process holding the file's write lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// A [`CheckpointStore`] in a SQLite file, shared by every process that opens the same path.
///
/// The file is in WAL mode with `synchronous = FULL`: a save is one transaction that reads the
/// stored sequence, checks the fencing rule and writes the new state, and returns only once it
/// is on disk, so a process killed mid-save leaves the previous checkpoint whole. Calls run on
/// tokio's blocking pool, never on the runtime's threads.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use agent_errors::checkpoint::{Checkpoint, CheckpointStore, SqliteCheckpoints};
///
/// let dir = std::env::temp_dir().join(format!("agent-errors-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let store = SqliteCheckpoints::open(dir.join("runs.db"))?;
/// let first = Checkpoint { run_id: "run-1".into(), sequence: 0, state: b"{}".to_vec() };
/// store.save(&first).await?;
/// assert!(store.save(&first).await.is_err(), "sequence 0 again is a conflict");
/// assert_eq!(store.load("run-1").await?, Some(first));
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct SqliteCheckpoints {
    path: PathBuf,
    connection: Arc<Mutex<Connection>>,
}

impl std::fmt::Debug for SqliteCheckpoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteCheckpoints")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

fn store_error(error: impl std::error::Error + Send + Sync + 'static) -> CheckpointError {
    CheckpointError::store(error)
}

impl SqliteCheckpoints {
    /// Opens (creating when missing) the checkpoint file at `path`. Blocks while the file is
    /// opened and its table created: call it at start-up.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, CheckpointError> {
        let path = path.as_ref().to_path_buf();
        let connection = Connection::open(&path).map_err(store_error)?;
        connection.busy_timeout(BUSY_TIMEOUT).map_err(store_error)?;
        connection
            .execute_batch(
                "PRAGMA journal_mode = WAL;
                 PRAGMA synchronous = FULL;
                 CREATE TABLE IF NOT EXISTS agent_errors_checkpoints (
                     run_id   TEXT PRIMARY KEY NOT NULL,
                     sequence INTEGER NOT NULL,
                     state    BLOB NOT NULL
                 );",
            )
            .map_err(store_error)?;
        Ok(SqliteCheckpoints {
            path,
            connection: Arc::new(Mutex::new(connection)),
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `work` on the connection on tokio's blocking pool.
    async fn with_connection<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Connection) -> Result<T, CheckpointError> + Send + 'static,
    ) -> Result<T, CheckpointError> {
        let connection = Arc::clone(&self.connection);
        let joined = tokio::task::spawn_blocking(move || {
            // A panic inside a statement leaves no transaction open (rusqlite rolls back on
            // drop), so a poisoned lock still guards a usable connection.
            let mut connection = connection.lock().unwrap_or_else(|p| p.into_inner());
            work(&mut connection)
        });
        joined.await.map_err(store_error)?
    }
}

/// Sequences are `u64` in the contract and `INTEGER` (i64) in SQLite.
fn to_sql(sequence: u64) -> Result<i64, CheckpointError> {
    i64::try_from(sequence).map_err(store_error)
}

fn from_sql(run_id: &str, sequence: i64) -> Result<u64, CheckpointError> {
    u64::try_from(sequence).map_err(|_| CheckpointError::Corrupt {
        run_id: run_id.to_owned(),
        reason: format!("negative sequence {sequence}"),
    })
}

impl CheckpointStore for SqliteCheckpoints {
    fn save<'a>(
        &'a self,
        checkpoint: &'a Checkpoint,
    ) -> BoxFuture<'a, Result<(), CheckpointError>> {
        let checkpoint = checkpoint.clone();
        Box::pin(self.with_connection(move |connection| {
            let tx = connection
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(store_error)?;
            let found: Option<i64> = tx
                .query_row(
                    "SELECT sequence FROM agent_errors_checkpoints WHERE run_id = ?1",
                    params![checkpoint.run_id],
                    |row| row.get(0),
                )
                .optional()
                .map_err(store_error)?;
            let found = found
                .map(|sequence| from_sql(&checkpoint.run_id, sequence))
                .transpose()?;
            if !follows(checkpoint.sequence, found) {
                return Err(CheckpointError::conflict(
                    &checkpoint.run_id,
                    checkpoint.sequence,
                    found,
                ));
            }
            tx.execute(
                "INSERT INTO agent_errors_checkpoints (run_id, sequence, state)
                 VALUES (?1, ?2, ?3)
                 ON CONFLICT (run_id) DO UPDATE SET sequence = ?2, state = ?3",
                params![
                    checkpoint.run_id,
                    to_sql(checkpoint.sequence)?,
                    checkpoint.state
                ],
            )
            .map_err(store_error)?;
            tx.commit().map_err(store_error)
        }))
    }

    fn load<'a>(
        &'a self,
        run_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Checkpoint>, CheckpointError>> {
        let run_id = run_id.to_owned();
        Box::pin(self.with_connection(move |connection| {
            let row: Option<(i64, Vec<u8>)> = connection
                .query_row(
                    "SELECT sequence, state FROM agent_errors_checkpoints WHERE run_id = ?1",
                    params![run_id],
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )
                .optional()
                .map_err(store_error)?;
            row.map(|(sequence, state)| {
                Ok(Checkpoint {
                    sequence: from_sql(&run_id, sequence)?,
                    run_id: run_id.clone(),
                    state,
                })
            })
            .transpose()
        }))
    }

    fn delete<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<(), CheckpointError>> {
        let run_id = run_id.to_owned();
        Box::pin(self.with_connection(move |connection| {
            connection
                .execute(
                    "DELETE FROM agent_errors_checkpoints WHERE run_id = ?1",
                    params![run_id],
                )
                .map(drop)
                .map_err(store_error)
        }))
    }
}
