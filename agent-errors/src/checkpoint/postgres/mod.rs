//! Checkpoints in PostgreSQL (feature `postgres`): one row per run, fenced by sequence in the
//! statement that writes it, so a fleet of processes sharing one database cannot both carry a
//! run on. This file holds the store (settings, connecting and reconnecting, timeouts, errors);
//! [`session`] holds the statements.

use std::error::Error as _;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::{Instant, timeout_at};
use tokio_postgres::{Client, Config, NoTls};

use super::{Checkpoint, CheckpointError, CheckpointStore, StoredRun};
use crate::error::BoxFuture;
use crate::redact::Redactor;
use session::{Session, Table};

mod session;

/// The table a [`PostgresCheckpoints`] uses unless told otherwise.
pub const DEFAULT_TABLE: &str = "agent_errors_checkpoints";

const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the PostgreSQL store failed: the source of [`CheckpointError::Store`] (downcast it to
/// tell the cases apart). Messages are redacted: no password reaches them.
///
/// # Examples
///
/// A bad table name is refused before any connection is made, so this runs without a server:
///
/// ```
/// use agent_errors::checkpoint::{CheckpointError, PostgresCheckpoints, PostgresStoreError};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let refused = PostgresCheckpoints::builder().table("runs; drop").connect("host=127.0.0.1").await;
/// let Err(CheckpointError::Store(error)) = refused else { unreachable!() };
/// let retry_later = match error.downcast_ref::<PostgresStoreError>() {
///     Some(PostgresStoreError::Database { .. } | PostgresStoreError::TimedOut(_)) => true,
///     Some(PostgresStoreError::Closed) => false, // build a new store on a new client
///     Some(PostgresStoreError::Config(_) | PostgresStoreError::TableName(_)) => false, // fix the settings
///     Some(_) | None => false, // the enum is non-exhaustive
/// };
/// assert!(!retry_later);
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PostgresStoreError {
    /// The connection string was refused. Its text is not repeated: it may hold a password.
    #[error("invalid PostgreSQL connection string: {0}")]
    Config(String),
    /// The table name is not `name` or `schema.name` made of ASCII letters, digits and `_`.
    #[error(
        "invalid checkpoint table name {0:?}: expected `name` or `schema.name`, each part ASCII \
         letters, digits and `_`, not starting with a digit, at most 63 bytes"
    )]
    TableName(String),
    /// PostgreSQL refused a statement, or the connection failed or was lost. The next call
    /// opens a new connection when the store was built from a connection string.
    #[error("PostgreSQL failed: {message}")]
    Database {
        /// What went wrong, redacted.
        message: String,
        /// The SQLSTATE code, when the server sent one (`"40001"`, `"57P01"`, ...).
        code: Option<String>,
    },
    /// The connection is closed and this store, built on a client it was given, cannot open
    /// another: build a new store on a new client.
    #[error("the PostgreSQL connection is closed and a store built from a client cannot reconnect")]
    Closed,
    /// PostgreSQL did not answer in time. The connection is dropped; whether a save that timed
    /// out was applied is not known until the run is loaded again.
    #[error("PostgreSQL did not answer within {0:?}")]
    TimedOut(Duration),
}

impl From<PostgresStoreError> for CheckpointError {
    fn from(error: PostgresStoreError) -> Self {
        CheckpointError::Store(Box::new(error))
    }
}

/// Settings of a [`PostgresCheckpoints`]: the table and how long to wait for PostgreSQL.
///
/// # Examples
///
/// It needs a PostgreSQL server, hence `no_run`:
///
/// ```no_run
/// use std::time::Duration;
/// use agent_errors::checkpoint::PostgresCheckpoints;
///
/// # async fn demo() -> Result<(), agent_errors::checkpoint::CheckpointError> {
/// let store = PostgresCheckpoints::builder()
///     .table("support.checkpoints")
///     .timeout(Duration::from_secs(2))
///     .connect("postgres://agent@127.0.0.1/runs")
///     .await?;
/// # let _ = store; Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct PostgresCheckpointsBuilder {
    table: String,
    timeout: Duration,
}

impl Default for PostgresCheckpointsBuilder {
    fn default() -> Self {
        PostgresCheckpointsBuilder {
            table: DEFAULT_TABLE.to_owned(),
            timeout: DEFAULT_TIMEOUT,
        }
    }
}

impl PostgresCheckpointsBuilder {
    /// The table to keep checkpoints in, `name` or `schema.name` (default
    /// [`DEFAULT_TABLE`]); created when missing, with `<name>_records` beside it for the
    /// records after each snapshot (so `name` is at most 55 bytes: PostgreSQL cuts identifiers
    /// at 63). Processes that share runs use the same table.
    #[must_use]
    pub fn table(mut self, name: impl Into<String>) -> Self {
        self.table = name.into();
        self
    }

    /// How long one call (connecting included) may wait for PostgreSQL before failing with
    /// [`PostgresStoreError::TimedOut`] (default 10 s).
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Connects without TLS, creates the table when missing, and reconnects on a later call
    /// whenever the connection is lost. `config` is a libpq-style connection string
    /// (`host=127.0.0.1 user=agent dbname=runs`) or URL (`postgres://agent@127.0.0.1/runs`).
    ///
    /// Without TLS, the password and the checkpoints cross the network in the clear: use it on
    /// loopback, a Unix socket or a trusted network, and [`client`](Self::client) elsewhere.
    /// Must be called inside a Tokio runtime, which runs the connection.
    pub async fn connect(self, config: &str) -> Result<PostgresCheckpoints, CheckpointError> {
        let table = Table::parse(&self.table)?;
        let config = Config::from_str(config).map_err(|e| {
            PostgresStoreError::Config(Redactor::new().redact(&error_text(&e)).into_owned())
        })?;
        let store = PostgresCheckpoints::new(table, self.timeout, Source::Config(Box::new(config)));
        store
            .within(Instant::now() + store.timeout, store.session())
            .await?;
        Ok(store)
    }

    /// Uses a client you connected yourself (with the TLS connector you need, with its
    /// connection already spawned), and creates the table when missing. Such a store cannot
    /// reconnect: once the connection is lost every call fails with
    /// [`PostgresStoreError::Closed`].
    pub async fn client(self, client: Client) -> Result<PostgresCheckpoints, CheckpointError> {
        let table = Table::parse(&self.table)?;
        let store = PostgresCheckpoints::new(table, self.timeout, Source::Client);
        let prepare = async {
            let prepared = Session::prepare(client, &store.table).await;
            prepared.map_err(|e| store.database_error(&e))
        };
        let session = store
            .within(Instant::now() + store.timeout, prepare)
            .await?;
        *store.session.lock().await = Some(Arc::new(session));
        Ok(store)
    }
}

/// A [`CheckpointStore`](super::CheckpointStore) in a PostgreSQL table, shared by every
/// process that uses the same database and table (feature `postgres`).
///
/// The table (default [`DEFAULT_TABLE`]) is created when missing:
///
/// ```sql
/// CREATE TABLE agent_errors_checkpoints (
///     run_id     text PRIMARY KEY,
///     sequence   bigint NOT NULL,
///     state      bytea NOT NULL,
///     updated_at timestamptz NOT NULL DEFAULT now()
/// )
/// ```
///
/// Beside it, `<table>_records` holds the records appended after each run's snapshot:
///
/// ```sql
/// CREATE TABLE agent_errors_checkpoints_records (
///     run_id   text NOT NULL,
///     sequence bigint NOT NULL,
///     record   bytea NOT NULL,
///     PRIMARY KEY (run_id, sequence)
/// )
/// ```
///
/// The run's row holds its latest snapshot and, in `sequence`, its latest sequence, snapshot
/// or record. A save is one statement that checks and writes together: sequence 0 inserts the
/// row only if the run has none; a snapshot of sequence `n` updates it only where the stored
/// sequence is `n - 1` and drops the run's records; a record of sequence `n` is inserted only
/// where the row's sequence moved from `n - 1` to `n`. Two
/// processes saving the same run at once are ordered by the row's lock, and the second finds
/// the sequence moved and gets [`CheckpointError::Conflict`]. Sequences are `u64` and the
/// column is `bigint`: a sequence above `i64::MAX` is stored as the `bigint` with the same
/// bits (negative in SQL), so every sequence round-trips.
///
/// One store holds one connection, which concurrent calls share (tokio-postgres pipelines
/// them). Every call, connecting included, is bounded by
/// [`timeout`](PostgresCheckpointsBuilder::timeout). A lost connection fails the call with
/// [`CheckpointError::Store`]; a store built from a connection string opens a new one on its
/// next call. Neither its `Debug` nor its errors show the password.
///
/// # Examples
///
/// It needs a PostgreSQL server, hence `no_run`:
///
/// ```no_run
/// # async fn demo() -> Result<(), agent_errors::checkpoint::CheckpointError> {
/// use std::time::Duration;
/// use agent_errors::checkpoint::{Checkpoint, CheckpointStore, PostgresCheckpoints};
///
/// // Loopback or a trusted network: this connection is not encrypted.
/// let store = PostgresCheckpoints::connect("host=127.0.0.1 user=agent dbname=runs").await?;
/// store.save(&Checkpoint { run_id: "run-1".into(), sequence: 0, state: b"{}".to_vec() }).await?;
///
/// // Another table, a shorter bound on each call:
/// let store = PostgresCheckpoints::builder()
///     .table("support.checkpoints")
///     .timeout(Duration::from_secs(2))
///     .connect("postgres://agent@127.0.0.1/runs")
///     .await?;
/// # Ok(()) }
/// ```
pub struct PostgresCheckpoints {
    table: Table,
    timeout: Duration,
    source: Source,
    redactor: Redactor,
    session: Mutex<Option<Arc<Session>>>,
}

enum Source {
    Config(Box<Config>),
    Client,
}

impl PostgresCheckpoints {
    /// Settings: the table and the timeout.
    pub fn builder() -> PostgresCheckpointsBuilder {
        PostgresCheckpointsBuilder::default()
    }

    /// [`builder().connect(config)`](PostgresCheckpointsBuilder::connect): no TLS, so for
    /// loopback and trusted networks; reconnects after a lost connection.
    pub async fn connect(config: &str) -> Result<Self, CheckpointError> {
        Self::builder().connect(config).await
    }

    /// [`builder().client(client)`](PostgresCheckpointsBuilder::client): a client you
    /// connected, with TLS if you need it.
    pub async fn from_client(client: Client) -> Result<Self, CheckpointError> {
        Self::builder().client(client).await
    }

    /// The table, as written in SQL (quoted).
    pub fn table(&self) -> &str {
        &self.table.quoted
    }

    fn new(table: Table, timeout: Duration, source: Source) -> Self {
        let redactor = match &source {
            Source::Config(config) => password_redactor(config),
            Source::Client => Redactor::new(),
        };
        PostgresCheckpoints {
            table,
            timeout,
            source,
            redactor,
            session: Mutex::new(None),
        }
    }

    /// The open session, or a new one when there is none or it was lost. Callers queue on the
    /// lock while one of them reconnects, so a fleet coming back does not storm the server.
    async fn session(&self) -> Result<Arc<Session>, PostgresStoreError> {
        let mut slot = self.session.lock().await;
        if let Some(session) = slot.as_ref().filter(|s| !s.client.is_closed()) {
            return Ok(Arc::clone(session));
        }
        let Source::Config(config) = &self.source else {
            return Err(PostgresStoreError::Closed);
        };
        let (client, connection) = config
            .connect(NoTls)
            .await
            .map_err(|e| self.database_error(&e))?;
        tokio::spawn(async move {
            // The failure reaches the next call as a closed client; nothing to report here.
            let _ = connection.await;
        });
        let session = Arc::new(
            Session::prepare(client, &self.table)
                .await
                .map_err(|e| self.database_error(&e))?,
        );
        *slot = Some(Arc::clone(&session));
        Ok(session)
    }

    /// Forgets `session` if it is still the current one, so the next call connects afresh.
    async fn forget(&self, session: &Arc<Session>) {
        let mut slot = self.session.lock().await;
        if slot.as_ref().is_some_and(|s| Arc::ptr_eq(s, session)) {
            *slot = None;
        }
    }

    async fn within<T>(
        &self,
        deadline: Instant,
        work: impl Future<Output = Result<T, PostgresStoreError>>,
    ) -> Result<T, PostgresStoreError> {
        timeout_at(deadline, work)
            .await
            .unwrap_or(Err(PostgresStoreError::TimedOut(self.timeout)))
    }

    /// Runs `work` on the session within the timeout; a connection that timed out or closed
    /// under it is dropped.
    async fn run<T>(
        &self,
        work: impl AsyncFnOnce(&Session) -> Result<T, tokio_postgres::Error>,
    ) -> Result<T, CheckpointError> {
        let deadline = Instant::now() + self.timeout;
        let session = self.within(deadline, self.session()).await?;
        match timeout_at(deadline, work(&session)).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => {
                if error.is_closed() || session.client.is_closed() {
                    self.forget(&session).await;
                }
                Err(self.database_error(&error).into())
            }
            Err(_) => {
                self.forget(&session).await;
                Err(PostgresStoreError::TimedOut(self.timeout).into())
            }
        }
    }

    fn database_error(&self, error: &tokio_postgres::Error) -> PostgresStoreError {
        PostgresStoreError::Database {
            message: self.redactor.redact(&error_text(error)).into_owned(),
            code: error.code().map(|code| code.code().to_owned()),
        }
    }
}

impl CheckpointStore for PostgresCheckpoints {
    fn save<'a>(
        &'a self,
        checkpoint: &'a Checkpoint,
    ) -> BoxFuture<'a, Result<(), CheckpointError>> {
        Box::pin(async move {
            let refused = self
                .run(async |session| {
                    if session.write(checkpoint).await? {
                        return Ok(None);
                    }
                    // What stands in the way, for the conflict's report: read after the refusal,
                    // so it is the save that won (a snapshot taken before could predate it).
                    session.stored_sequence(&checkpoint.run_id).await.map(Some)
                })
                .await?;
            match refused {
                None => Ok(()),
                Some(found) => Err(CheckpointError::conflict(
                    &checkpoint.run_id,
                    checkpoint.sequence,
                    found,
                )),
            }
        })
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

    fn journals(&self) -> bool {
        true
    }

    fn append<'a>(&'a self, record: &'a Checkpoint) -> BoxFuture<'a, Result<(), CheckpointError>> {
        Box::pin(async move {
            let refused = self
                .run(async |session| {
                    if session.append(record).await? {
                        return Ok(None);
                    }
                    session.stored_sequence(&record.run_id).await.map(Some)
                })
                .await?;
            match refused {
                None => Ok(()),
                Some(None) if record.sequence == 0 => Err(CheckpointError::Store(
                    "a run's first save must be a snapshot".into(),
                )),
                Some(found) => Err(CheckpointError::conflict(
                    &record.run_id,
                    record.sequence,
                    found,
                )),
            }
        })
    }

    fn load_journal<'a>(
        &'a self,
        run_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<StoredRun>, CheckpointError>> {
        Box::pin(async move { self.run(async |session| session.load(run_id).await).await })
    }

    fn delete<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<(), CheckpointError>> {
        Box::pin(async move { self.run(async |session| session.delete(run_id).await).await })
    }
}

impl fmt::Debug for PostgresCheckpoints {
    // The config's own Debug is not used: what it shows of a password depends on its version.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = f.debug_struct("PostgresCheckpoints");
        out.field("table", &self.table.quoted);
        match &self.source {
            Source::Config(config) => out
                .field("hosts", &config.get_hosts())
                .field("ports", &config.get_ports())
                .field("user", &config.get_user())
                .field("dbname", &config.get_dbname()),
            Source::Client => out.field("client", &"given by the caller"),
        };
        out.field("timeout", &self.timeout).finish()
    }
}

/// The error with its causes: tokio-postgres keeps the useful part ("connection refused", the
/// server's message) in the source.
fn error_text(error: &tokio_postgres::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Redacts the config's password wherever it appears verbatim, besides the built-in rules
/// (which catch `password=...` and `user:password@`). Shorter passwords than a redactor accepts
/// rely on those rules alone.
fn password_redactor(config: &Config) -> Redactor {
    let redactor = Redactor::new();
    match config.get_password().map(std::str::from_utf8) {
        Some(Ok(password)) => redactor.clone().with_secret(password).unwrap_or(redactor),
        _ => redactor,
    }
}
