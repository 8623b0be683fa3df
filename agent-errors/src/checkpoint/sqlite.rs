//! Checkpoints in a SQLite file (feature `sqlite`): durable runs that survive the process, on
//! one machine, with nothing to install.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};
use tokio::sync::oneshot;

use super::{Checkpoint, CheckpointError, CheckpointStore, StoredRun, follows};
use crate::error::BoxFuture;

/// How long a save waits for another process holding the file's write lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The page size of a file this store creates. Every save is flushed on its own, and writes each
/// page it changes whole to the write-ahead log (then once more to the file): small pages keep a
/// save's bytes near its record's size. At SQLite's default 4 KB, a 4 KB tool answer's record
/// wrote three pages (its leaf, an overflow page, the header page), and a turn's small record a
/// whole page; at 512 bytes a call writes about half as many bytes (BENCHMARKS.md).
const PAGE_SIZE: u32 = 512;

/// The size the write-ahead log grows to before SQLite copies it into the file: SQLite's
/// default (1,000 pages) at its default 4 KB pages. Counted in pages, the default would copy a
/// log of 512-byte pages eight times as often, and write each page changed since the last copy
/// (the run's latest leaves, the file's header page) that much more often.
const LOG_BYTES: u32 = 4 * 1024 * 1024;

/// A [`CheckpointStore`] in a SQLite file, shared by every process that opens the same path.
///
/// The file is in WAL mode with `synchronous = FULL`: a save (an append or a snapshot) reads the
/// run's latest sequence, checks the fencing rule and writes, inside a transaction, and returns
/// only once that transaction is on disk, so a process killed mid-save leaves the run as its
/// previous save left it. Saves of many runs made at once share a transaction and its flush to
/// disk: while one transaction is being written, the saves that arrive queue up and go together
/// in the next (each in a savepoint of its own, so one that loses its fencing check stores
/// nothing and fails alone). Calls run on tokio's blocking pool, never on the runtime's threads.
///
/// Snapshots are kept in the table `agent_errors_checkpoints` (one row per run), the records
/// after them in `agent_errors_checkpoint_records`, clustered by run and sequence: an append
/// writes its record's pages and nothing else. A file written before the journal opens as it
/// is, its rows read as snapshots.
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
    queue: Arc<Mutex<Queue>>,
}

/// Makes SQLite copy its write-ahead log into the file when the log holds `bytes`, in the file's
/// own pages (a file made before this store used smaller pages keeps larger ones).
fn checkpoint_log_at(connection: &Connection, bytes: u32) -> Result<(), CheckpointError> {
    let page: u32 = connection
        .pragma_query_value(None, "page_size", |row| row.get(0))
        .map_err(store_error)?;
    let pages = bytes / page.max(1);
    connection
        .pragma_update(None, "wal_autocheckpoint", pages)
        .map_err(store_error)
}

/// The saves waiting for the next transaction.
#[derive(Default)]
struct Queue {
    writes: Vec<Write>,
    /// Whether a task on the blocking pool is writing them: it takes every save queued
    /// before it stops.
    flushing: bool,
}

/// One save waiting to be written, and who waits for it.
struct Write {
    snapshot: bool,
    checkpoint: Checkpoint,
    done: oneshot::Sender<Result<(), CheckpointError>>,
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
        // The page size applies to a file this creates (it is set before anything is written);
        // a file made before keeps its own.
        connection
            .execute_batch(&format!(
                "PRAGMA page_size = {PAGE_SIZE};
                 PRAGMA journal_mode = WAL;
                 PRAGMA synchronous = FULL;
                 CREATE TABLE IF NOT EXISTS agent_errors_checkpoints (
                     run_id   TEXT PRIMARY KEY NOT NULL,
                     sequence INTEGER NOT NULL,
                     state    BLOB NOT NULL
                 );
                 CREATE TABLE IF NOT EXISTS agent_errors_checkpoint_records (
                     run_id   TEXT NOT NULL,
                     sequence INTEGER NOT NULL,
                     record   BLOB NOT NULL,
                     PRIMARY KEY (run_id, sequence)
                 ) WITHOUT ROWID;"
            ))
            .map_err(store_error)?;
        checkpoint_log_at(&connection, LOG_BYTES)?;
        Ok(SqliteCheckpoints {
            path,
            connection: Arc::new(Mutex::new(connection)),
            queue: Arc::default(),
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
        let joined = tokio::task::spawn_blocking(move || work(&mut lock(&connection)));
        joined.await.map_err(store_error)?
    }

    /// Queues a save for the next transaction and waits until it is on disk (or refused).
    async fn write(&self, snapshot: bool, checkpoint: &Checkpoint) -> Result<(), CheckpointError> {
        let (done, written) = oneshot::channel();
        let write = Write {
            snapshot,
            checkpoint: checkpoint.clone(),
            done,
        };
        let start = {
            let mut queue = lock(&self.queue);
            queue.writes.push(write);
            !std::mem::replace(&mut queue.flushing, true)
        };
        if start {
            let (connection, queue) = (Arc::clone(&self.connection), Arc::clone(&self.queue));
            drop(tokio::task::spawn_blocking(move || {
                flush(&connection, &queue)
            }));
        }
        written.await.unwrap_or_else(|_| {
            Err(CheckpointError::Store(
                "the checkpoint writer stopped before this save was written".into(),
            ))
        })
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic inside a statement leaves no transaction open (rusqlite rolls back on drop), and
    // the queue is changed by single pushes and takes: a poisoned lock guards usable state.
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// Writes the queued saves, a transaction at a time, until none is left.
fn flush(connection: &Mutex<Connection>, queue: &Mutex<Queue>) {
    let _stopped = Stopped(queue);
    loop {
        let writes = {
            let mut queue = lock(queue);
            if queue.writes.is_empty() {
                queue.flushing = false;
                return;
            }
            std::mem::take(&mut queue.writes)
        };
        let results = write_batch(&mut lock(connection), &writes);
        for (write, result) in writes.into_iter().zip(results) {
            let _ = write.done.send(result);
        }
    }
}

/// Hands the queue to the next save if the writer panics: its own saves fail (their senders
/// are dropped) and the ones queued behind them start a new writer.
struct Stopped<'a>(&'a Mutex<Queue>);

impl Drop for Stopped<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let mut queue = lock(self.0);
            queue.flushing = false;
            queue.writes.clear();
        }
    }
}

/// Writes `writes` in one transaction, each in a savepoint of its own: what each save gets.
fn write_batch(connection: &mut Connection, writes: &[Write]) -> Vec<Result<(), CheckpointError>> {
    let failed = |error: &rusqlite::Error| -> Vec<Result<(), CheckpointError>> {
        let text = error.to_string();
        (writes.iter())
            .map(|_| Err(CheckpointError::store(std::io::Error::other(text.clone()))))
            .collect()
    };
    let mut tx = match connection.transaction_with_behavior(TransactionBehavior::Immediate) {
        Ok(tx) => tx,
        Err(error) => return failed(&error),
    };
    let mut results = Vec::with_capacity(writes.len());
    for write in writes {
        results.push(write_one(&mut tx, write));
    }
    match tx.commit() {
        Ok(()) => results,
        Err(error) => failed(&error),
    }
}

/// One save, in a savepoint: stored whole, or not at all when it fails.
fn write_one(tx: &mut Transaction<'_>, write: &Write) -> Result<(), CheckpointError> {
    let savepoint = tx.savepoint().map_err(store_error)?;
    let checkpoint = &write.checkpoint;
    let found = latest_sequence(&savepoint, &checkpoint.run_id)?;
    if !follows(checkpoint.sequence, found) {
        return Err(CheckpointError::conflict(
            &checkpoint.run_id,
            checkpoint.sequence,
            found,
        ));
    }
    let sequence = to_sql(checkpoint.sequence)?;
    let run_id = &checkpoint.run_id;
    if write.snapshot {
        savepoint
            .prepare_cached(
                "INSERT INTO agent_errors_checkpoints (run_id, sequence, state)
                 VALUES (?1, ?2, ?3)
                 ON CONFLICT (run_id) DO UPDATE SET sequence = ?2, state = ?3",
            )
            .and_then(|mut s| s.execute(params![run_id, sequence, checkpoint.state]))
            .map_err(store_error)?;
        savepoint
            .prepare_cached("DELETE FROM agent_errors_checkpoint_records WHERE run_id = ?1")
            .and_then(|mut s| s.execute(params![run_id]))
            .map_err(store_error)?;
    } else {
        if found.is_none() {
            return Err(CheckpointError::Store(
                "a run's first save must be a snapshot".into(),
            ));
        }
        savepoint
            .prepare_cached(
                "INSERT INTO agent_errors_checkpoint_records (run_id, sequence, record)
                 VALUES (?1, ?2, ?3)",
            )
            .and_then(|mut s| s.execute(params![run_id, sequence, checkpoint.state]))
            .map_err(store_error)?;
    }
    savepoint.commit().map_err(store_error)
}

/// The run's latest sequence: its last record's, or its snapshot's when it has none (the
/// records of a run all follow its snapshot).
fn latest_sequence(connection: &Connection, run_id: &str) -> Result<Option<u64>, CheckpointError> {
    let found: Option<i64> = connection
        .prepare_cached(
            "SELECT coalesce(
                 (SELECT max(sequence) FROM agent_errors_checkpoint_records WHERE run_id = ?1),
                 (SELECT sequence FROM agent_errors_checkpoints WHERE run_id = ?1))",
        )
        .and_then(|mut s| s.query_row(params![run_id], |row| row.get(0)))
        .map_err(store_error)?;
    found.map(|sequence| from_sql(run_id, sequence)).transpose()
}

/// The run's snapshot and the records after it, read in one transaction.
fn read_journal(
    connection: &mut Connection,
    run_id: &str,
) -> Result<Option<StoredRun>, CheckpointError> {
    let tx = connection.transaction().map_err(store_error)?;
    let row: Option<(i64, Vec<u8>)> = tx
        .query_row(
            "SELECT sequence, state FROM agent_errors_checkpoints WHERE run_id = ?1",
            params![run_id],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .optional()
        .map_err(store_error)?;
    let Some((sequence, state)) = row else {
        return Ok(None);
    };
    let mut statement = tx
        .prepare(
            "SELECT sequence, record FROM agent_errors_checkpoint_records
             WHERE run_id = ?1 ORDER BY sequence",
        )
        .map_err(store_error)?;
    let rows = statement
        .query_map(params![run_id], |row| {
            Ok((row.get::<_, i64>(0)?, row.get(1)?))
        })
        .map_err(store_error)?;
    let mut records = Vec::new();
    for row in rows {
        let (sequence, state) = row.map_err(store_error)?;
        records.push(Checkpoint {
            run_id: run_id.to_owned(),
            sequence: from_sql(run_id, sequence)?,
            state,
        });
    }
    let snapshot = Checkpoint {
        run_id: run_id.to_owned(),
        sequence: from_sql(run_id, sequence)?,
        state,
    };
    Ok(Some(StoredRun { snapshot, records }))
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
        Box::pin(self.write(true, checkpoint))
    }

    fn load<'a>(
        &'a self,
        run_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Checkpoint>, CheckpointError>> {
        Box::pin(async move {
            let stored = self.load_journal(run_id).await?;
            Ok(stored.map(|stored| stored.snapshot))
        })
    }

    fn delete<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<(), CheckpointError>> {
        let run_id = run_id.to_owned();
        Box::pin(self.with_connection(move |connection| {
            let tx = connection.transaction().map_err(store_error)?;
            for table in [
                "agent_errors_checkpoints",
                "agent_errors_checkpoint_records",
            ] {
                tx.execute(
                    &format!("DELETE FROM {table} WHERE run_id = ?1"),
                    params![run_id],
                )
                .map_err(store_error)?;
            }
            tx.commit().map_err(store_error)
        }))
    }

    fn journals(&self) -> bool {
        true
    }

    fn append<'a>(&'a self, record: &'a Checkpoint) -> BoxFuture<'a, Result<(), CheckpointError>> {
        Box::pin(self.write(false, record))
    }

    fn load_journal<'a>(
        &'a self,
        run_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<StoredRun>, CheckpointError>> {
        let run_id = run_id.to_owned();
        Box::pin(self.with_connection(move |connection| read_journal(connection, &run_id)))
    }
}
