//! The checkpoint stores against the conformance suite, and what is particular to PostgreSQL:
//! its table, sequences past `bigint`, a fleet starting at once, a server that goes away, and
//! passwords. Every PostgreSQL test starts its own server (`initdb` + `postgres`).

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use agent_errors::checkpoint::{
    Checkpoint, CheckpointError, CheckpointStore, MemoryCheckpoints, PostgresCheckpoints,
    PostgresStoreError, SqliteCheckpoints,
};
use support::checkpoints::conformance;
use support::postgres::{PostgresOptions, PostgresServer};

/// Bounds a call that talks to a server, so a store that hangs fails the test instead.
async fn bounded<T>(work: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), work)
        .await
        .expect("the store answered within 60 s")
}

async fn connect(server: &PostgresServer) -> PostgresCheckpoints {
    bounded(PostgresCheckpoints::connect(&server.connection_string()))
        .await
        .expect("the store connects to the test server")
}

async fn client(server: &PostgresServer) -> tokio_postgres::Client {
    let (client, connection) =
        tokio_postgres::connect(&server.connection_string(), tokio_postgres::NoTls)
            .await
            .expect("the test connects to its server");
    tokio::spawn(connection);
    client
}

fn checkpoint(run_id: &str, sequence: u64) -> Checkpoint {
    Checkpoint {
        run_id: run_id.to_owned(),
        sequence,
        state: format!("state {sequence}").into_bytes(),
    }
}

/// The PostgreSQL error inside a `Store` error; panics on any other error.
fn store_error(error: CheckpointError) -> PostgresStoreError {
    match error {
        CheckpointError::Store(source) => *source
            .downcast::<PostgresStoreError>()
            .expect("a PostgreSQL store's failures are PostgresStoreError"),
        other => panic!("expected a Store error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_checkpoints_conform() {
    let store: Arc<dyn CheckpointStore> = Arc::new(MemoryCheckpoints::new());
    conformance(async || Arc::clone(&store)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_checkpoints_conform() {
    // Every handle opens the same file, as the processes of one machine would.
    let dir = std::env::temp_dir().join(format!("agent-errors-conform-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let path = dir.join("runs.db");
    conformance(async || Arc::new(SqliteCheckpoints::open(&path).expect("opens")) as _).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// The page size a SQLite file's header records (bytes 16-17, big-endian).
fn page_size(path: &std::path::Path) -> u16 {
    let header = std::fs::read(path).expect("the file reads");
    u16::from_be_bytes([header[16], header[17]])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_file_made_with_4_kb_pages_keeps_them_and_its_runs() {
    let dir = std::env::temp_dir().join(format!("agent-errors-pages-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    // A file as the store made it before it chose its page size: SQLite's default 4 KB pages,
    // a run's snapshot and a record after it.
    let old = dir.join("old.db");
    let made = rusqlite::Connection::open(&old).expect("the old file opens");
    made.execute_batch(
        "PRAGMA journal_mode = WAL;
         CREATE TABLE agent_errors_checkpoints (
             run_id TEXT PRIMARY KEY NOT NULL, sequence INTEGER NOT NULL, state BLOB NOT NULL);
         CREATE TABLE agent_errors_checkpoint_records (
             run_id TEXT NOT NULL, sequence INTEGER NOT NULL, record BLOB NOT NULL,
             PRIMARY KEY (run_id, sequence)) WITHOUT ROWID;
         INSERT INTO agent_errors_checkpoints VALUES ('run-1', 0, x'7b7d');
         INSERT INTO agent_errors_checkpoint_records VALUES ('run-1', 1, x'5b5d');",
    )
    .expect("the old layout is written");
    drop(made);
    assert_eq!(page_size(&old), 4096);

    let store = SqliteCheckpoints::open(&old).expect("the old file opens");
    store.append(&checkpoint("run-1", 2)).await.unwrap();
    let stored = store.load_journal("run-1").await.unwrap().unwrap();
    assert_eq!(stored.snapshot.state, b"{}");
    let sequences: Vec<u64> = stored.records.iter().map(|r| r.sequence).collect();
    assert_eq!(sequences, [1, 2]);
    assert_eq!(page_size(&old), 4096, "a file made before keeps its pages");

    // A file the store makes has small pages: each save writes the pages it changes whole.
    let new = dir.join("new.db");
    let store = SqliteCheckpoints::open(&new).expect("a new file opens");
    store.save(&checkpoint("run-1", 0)).await.unwrap();
    assert_eq!(page_size(&new), 512);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_checkpoints_conform() {
    let server = PostgresServer::start();
    conformance(async || Arc::new(connect(&server).await) as _).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_checkpoints_on_a_given_client_conform() {
    let server = PostgresServer::start();
    conformance(async || {
        let store = PostgresCheckpoints::from_client(client(&server).await).await;
        Arc::new(store.expect("the store takes the client")) as _
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_table_has_the_documented_columns_under_the_name_given() {
    let server = PostgresServer::start();
    let admin = client(&server).await;
    admin
        .batch_execute("CREATE SCHEMA ops")
        .await
        .expect("a schema");
    let default = connect(&server).await;
    assert_eq!(default.table(), "\"agent_errors_checkpoints\"");
    let named = bounded(
        PostgresCheckpoints::builder()
            .table("ops.Run_States")
            .connect(&server.connection_string()),
    )
    .await
    .expect("a schema-qualified name is accepted");
    named.save(&checkpoint("r", 0)).await.expect("saved");
    for (schema, table) in [
        ("public", "agent_errors_checkpoints"),
        ("ops", "Run_States"),
    ] {
        let rows = admin
            .query(
                "SELECT column_name, data_type FROM information_schema.columns \
                 WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position",
                &[&schema, &table],
            )
            .await
            .expect("the catalog answers");
        let columns: Vec<(String, String)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        let expected = [
            ("run_id", "text"),
            ("sequence", "bigint"),
            ("state", "bytea"),
            ("updated_at", "timestamp with time zone"),
        ];
        let expected: Vec<(String, String)> = expected
            .iter()
            .map(|(c, t)| (c.to_string(), t.to_string()))
            .collect();
        assert_eq!(columns, expected, "columns of {schema}.{table}");
    }
    let saved: i64 = admin
        .query_one(
            "SELECT sequence FROM ops.\"Run_States\" WHERE run_id = 'r'",
            &[],
        )
        .await
        .expect("the named table holds the save")
        .get(0);
    assert_eq!(saved, 0);
}

#[tokio::test]
async fn a_table_name_that_is_not_an_identifier_is_refused_before_connecting() {
    for name in ["runs; DROP TABLE users", "a.b.c", "", "9lives"] {
        let refused = PostgresCheckpoints::builder()
            .table(name)
            .connect("host=127.0.0.1 port=1 user=nobody")
            .await
            .expect_err("an unsafe table name");
        assert!(matches!(store_error(refused), PostgresStoreError::TableName(n) if n == name));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequences_past_bigint_are_stored_and_fenced_without_panic() {
    let server = PostgresServer::start();
    let store = connect(&server).await;
    let admin = client(&server).await;
    let set = "INSERT INTO agent_errors_checkpoints (run_id, sequence, state) VALUES ($1, $2, '') \
               ON CONFLICT (run_id) DO UPDATE SET sequence = EXCLUDED.sequence";
    let top = i64::MAX as u64;
    admin
        .execute(set, &[&"high", &i64::MAX])
        .await
        .expect("set");
    store
        .save(&checkpoint("high", top + 1))
        .await
        .expect("i64::MAX + 1 follows i64::MAX");
    store
        .save(&checkpoint("high", top + 2))
        .await
        .expect("and goes on");
    let loaded = store.load("high").await.expect("loads").expect("saved");
    assert_eq!(loaded.sequence, top + 2);

    admin.execute(set, &[&"last", &-2_i64]).await.expect("set");
    store
        .save(&checkpoint("last", u64::MAX))
        .await
        .expect("u64::MAX follows u64::MAX - 1");
    let after_last = store.save(&checkpoint("last", 0)).await;
    assert!(
        matches!(
            after_last,
            Err(CheckpointError::Conflict {
                found: Some(u64::MAX),
                ..
            })
        ),
        "{after_last:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_starting_at_once_creates_the_table_once() {
    let server = PostgresServer::start();
    let config = server.connection_string();
    let stores = (0..12).map(|_| {
        let config = config.clone();
        tokio::spawn(async move {
            PostgresCheckpoints::builder()
                .table("fleet_checkpoints")
                .connect(&config)
                .await
        })
    });
    let stores: Vec<_> = bounded(futures_util::future::join_all(stores)).await;
    for store in stores {
        let store = store
            .expect("no panic")
            .expect("every process starts, the table is shared");
        store.load("none").await.expect("the table is usable");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_server_is_a_store_error_and_the_store_reconnects_to_its_return() {
    let mut server = PostgresServer::start();
    let store = bounded(
        PostgresCheckpoints::builder()
            .timeout(Duration::from_secs(10))
            .connect(&server.connection_string()),
    )
    .await
    .expect("connects");
    let given = PostgresCheckpoints::from_client(client(&server).await)
        .await
        .expect("takes the client");
    store.save(&checkpoint("survivor", 0)).await.expect("saved");

    server.stop();
    for _ in 0..2 {
        let failed = bounded(store.save(&checkpoint("survivor", 1))).await;
        store_error(failed.expect_err("no server, no save"));
        let failed = bounded(store.load("survivor")).await;
        store_error(failed.expect_err("no server, no load"));
    }
    store_error(
        bounded(given.load("survivor"))
            .await
            .expect_err("no server"),
    );

    server.restart();
    bounded(store.save(&checkpoint("survivor", 1)))
        .await
        .expect("reconnected and saved");
    let loaded = bounded(store.load("survivor"))
        .await
        .expect("loads")
        .expect("kept");
    assert_eq!(loaded, checkpoint("survivor", 1));
    let closed = bounded(given.load("survivor"))
        .await
        .expect_err("a given client stays closed");
    assert!(matches!(store_error(closed), PostgresStoreError::Closed));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_password_stays_out_of_debug_and_errors() {
    let password = "Hunter2-correct-horse";
    let server = PostgresServer::start_with(PostgresOptions {
        password: Some(password.to_owned()),
        durable: false,
    });
    let port = server.port();
    let store = connect(&server).await;
    let shown = format!("{store:?}");
    assert!(!shown.contains(password), "{shown}");
    assert!(shown.contains("agent_errors_checkpoints"), "{shown}");

    let wrong = "Wrong-pass-0123456";
    let attempts = [
        format!("host=127.0.0.1 port={port} user=postgres password={wrong}"),
        format!("postgres://postgres:{wrong}@127.0.0.1:{port}/postgres"),
        // Nothing listens on port 1: the connection itself fails.
        format!("host=127.0.0.1 port=1 user=postgres password={wrong}"),
        // Unparseable: the text must not be echoed.
        format!("host=127.0.0.1 port=not-a-port password={wrong}"),
    ];
    for config in attempts {
        let error = bounded(PostgresCheckpoints::connect(&config))
            .await
            .expect_err("refused");
        let mut text = format!("{error} {error:?}");
        let mut source = std::error::Error::source(&error);
        while let Some(cause) = source {
            text.push_str(&format!(" {cause} {cause:?}"));
            source = cause.source();
        }
        assert!(!text.contains(wrong), "{config}: {text}");
        assert!(!text.contains(password), "{config}: {text}");
    }
}
