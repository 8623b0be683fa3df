//! One connection of the PostgreSQL store and the statements prepared on it: the fencing rule
//! as SQL (snapshots and appends alike), the tables' names made safe to write into it, and
//! sequences as `bigint`.

use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, Statement};

use super::PostgresStoreError;
use crate::checkpoint::{Checkpoint, StoredRun};

/// Identifiers longer than this are cut by PostgreSQL without an error.
const MAX_IDENTIFIER_BYTES: usize = 63;

/// What the records table's name adds to the snapshot table's.
const RECORDS_SUFFIX: &str = "_records";

/// One connection with the store's statements prepared on it.
pub(super) struct Session {
    pub(super) client: Client,
    insert_first: Statement,
    advance: Statement,
    append: Statement,
    read_sequence: Statement,
    load: Statement,
    delete: Statement,
}

impl Session {
    pub(super) async fn prepare(
        client: Client,
        table: &Table,
    ) -> Result<Session, tokio_postgres::Error> {
        create_table(&client, table).await?;
        let sql = &table.sql;
        let (insert_first, advance, append, read_sequence, load, delete) = tokio::try_join!(
            client.prepare(&sql.insert_first),
            client.prepare(&sql.advance),
            client.prepare(&sql.append),
            client.prepare(&sql.read_sequence),
            client.prepare(&sql.load),
            client.prepare(&sql.delete),
        )?;
        Ok(Session {
            client,
            insert_first,
            advance,
            append,
            read_sequence,
            load,
            delete,
        })
    }

    /// Whether the save was written: false when the fencing rule refused it.
    pub(super) async fn write(
        &self,
        checkpoint: &Checkpoint,
    ) -> Result<bool, tokio_postgres::Error> {
        let run_id = checkpoint.run_id.as_str();
        let written = match checkpoint.sequence.checked_sub(1) {
            None => {
                let params = [&run_id as _, &checkpoint.state as _];
                self.client.execute(&self.insert_first, &params).await?
            }
            Some(previous) => {
                let sequence = to_bigint(checkpoint.sequence);
                let previous = to_bigint(previous);
                let params = [
                    &run_id as _,
                    &sequence as _,
                    &checkpoint.state as _,
                    &previous as _,
                ];
                self.client.execute(&self.advance, &params).await?
            }
        };
        Ok(written == 1)
    }

    /// Whether the record was appended: false when the fencing rule refused it. A record never
    /// has sequence 0 (a run's first save is a snapshot): such a record is refused.
    pub(super) async fn append(&self, record: &Checkpoint) -> Result<bool, tokio_postgres::Error> {
        let Some(previous) = record.sequence.checked_sub(1) else {
            return Ok(false);
        };
        let run_id = record.run_id.as_str();
        let (sequence, previous) = (to_bigint(record.sequence), to_bigint(previous));
        let params = [
            &run_id as _,
            &sequence as _,
            &previous as _,
            &record.state as _,
        ];
        Ok(self.client.execute(&self.append, &params).await? == 1)
    }

    pub(super) async fn stored_sequence(
        &self,
        run_id: &str,
    ) -> Result<Option<u64>, tokio_postgres::Error> {
        let row = self
            .client
            .query_opt(&self.read_sequence, &[&run_id])
            .await?;
        row.map(|row| row.try_get(0).map(from_bigint)).transpose()
    }

    /// The run's snapshot and records, read by one statement (so from one view of the
    /// tables): the snapshot row first, then the records in order.
    pub(super) async fn load(
        &self,
        run_id: &str,
    ) -> Result<Option<StoredRun>, tokio_postgres::Error> {
        let rows = self.client.query(&self.load, &[&run_id]).await?;
        let mut rows = rows.iter().map(|row| -> Result<_, tokio_postgres::Error> {
            Ok(Checkpoint {
                run_id: run_id.to_owned(),
                sequence: from_bigint(row.try_get(0)?),
                state: row.try_get(1)?,
            })
        });
        let Some(mut snapshot) = rows.next().transpose()? else {
            return Ok(None);
        };
        let records = rows.collect::<Result<Vec<_>, _>>()?;
        // The row holds the run's latest sequence; the records follow the snapshot without a
        // gap, so the snapshot's own is the one before the first record's.
        if let Some(first) = records.first() {
            snapshot.sequence = first.sequence.wrapping_sub(1);
        }
        Ok(Some(StoredRun { snapshot, records }))
    }

    pub(super) async fn delete(&self, run_id: &str) -> Result<(), tokio_postgres::Error> {
        self.client
            .execute(&self.delete, &[&run_id])
            .await
            .map(drop)
    }
}

async fn create_table(client: &Client, table: &Table) -> Result<(), tokio_postgres::Error> {
    match client.batch_execute(&table.sql.create).await {
        // Processes starting together race in the catalog: IF NOT EXISTS checks before it
        // inserts, so the losers meet the winner's table, row type or index entry as a
        // duplicate, after the winner committed. The table is there.
        Err(e) if e.code().is_some_and(is_duplicate) => Ok(()),
        other => other,
    }
}

fn is_duplicate(code: &SqlState) -> bool {
    [
        SqlState::UNIQUE_VIOLATION,
        SqlState::DUPLICATE_TABLE,
        SqlState::DUPLICATE_OBJECT,
    ]
    .contains(code)
}

/// The statements of one table, written once its name is validated.
#[derive(Debug, Clone)]
struct Sql {
    create: String,
    insert_first: String,
    advance: String,
    append: String,
    read_sequence: String,
    load: String,
    delete: String,
}

impl Sql {
    /// The statements of the snapshot table `t` and its records table `r`. The snapshot row's
    /// `sequence` is the run's latest, snapshot or record: every save checks and moves it.
    fn for_tables(t: &str, r: &str) -> Sql {
        Sql {
            create: format!(
                "CREATE TABLE IF NOT EXISTS {t} (run_id text PRIMARY KEY, \
                 sequence bigint NOT NULL, state bytea NOT NULL, \
                 updated_at timestamptz NOT NULL DEFAULT now()); \
                 CREATE TABLE IF NOT EXISTS {r} (run_id text NOT NULL, \
                 sequence bigint NOT NULL, record bytea NOT NULL, \
                 PRIMARY KEY (run_id, sequence))"
            ),
            // The fencing rule, checked by the statement that writes: a first save only where
            // the run has no row, a later one only where the stored sequence precedes it.
            insert_first: format!(
                "INSERT INTO {t} (run_id, sequence, state, updated_at) \
                 VALUES ($1, 0, $2, now()) ON CONFLICT (run_id) DO NOTHING"
            ),
            // A snapshot drops the records it covers, in the statement that writes it.
            advance: format!(
                "WITH moved AS (UPDATE {t} SET sequence = $2, state = $3, updated_at = now() \
                 WHERE run_id = $1 AND sequence = $4 RETURNING run_id), \
                 dropped AS (DELETE FROM {r} WHERE run_id IN (SELECT run_id FROM moved)) \
                 SELECT run_id FROM moved"
            ),
            // A record is written only where the row's sequence moved from the one before it.
            append: format!(
                "WITH moved AS (UPDATE {t} SET sequence = $2, updated_at = now() \
                 WHERE run_id = $1 AND sequence = $3 RETURNING run_id) \
                 INSERT INTO {r} (run_id, sequence, record) SELECT run_id, $2, $4 FROM moved"
            ),
            read_sequence: format!("SELECT sequence FROM {t} WHERE run_id = $1"),
            load: format!(
                "SELECT sequence, state, 0 AS part FROM {t} WHERE run_id = $1 \
                 UNION ALL SELECT sequence, record, 1 FROM {r} \
                 WHERE run_id = $1 AND EXISTS (SELECT 1 FROM {t} WHERE run_id = $1) \
                 ORDER BY part, sequence"
            ),
            delete: format!(
                "WITH dropped AS (DELETE FROM {r} WHERE run_id = $1) \
                 DELETE FROM {t} WHERE run_id = $1"
            ),
        }
    }
}

/// A validated table name, quoted, and its statements.
#[derive(Debug, Clone)]
pub(super) struct Table {
    pub(super) quoted: String,
    sql: Sql,
}

impl Table {
    /// The table `name` (`table` or `schema.table`) and its records table beside it, named
    /// with `_records` after it: so a name leaves room for that within PostgreSQL's 63 bytes.
    pub(super) fn parse(name: &str) -> Result<Table, PostgresStoreError> {
        let parts: Vec<&str> = name.split('.').collect();
        let fits = |part: &&str| is_identifier(part);
        let last_fits = parts
            .last()
            .is_some_and(|last| last.len() + RECORDS_SUFFIX.len() <= MAX_IDENTIFIER_BYTES);
        if parts.len() > 2 || !parts.iter().all(fits) || !last_fits {
            return Err(PostgresStoreError::TableName(name.to_owned()));
        }
        let quote = |parts: &[&str]| {
            (parts.iter().map(|part| format!("\"{part}\"")))
                .collect::<Vec<_>>()
                .join(".")
        };
        let quoted = quote(&parts);
        let records_name = format!("{}{RECORDS_SUFFIX}", parts[parts.len() - 1]);
        let mut records = parts[..parts.len() - 1].to_vec();
        records.push(&records_name);
        let sql = Sql::for_tables(&quoted, &quote(&records));
        Ok(Table { quoted, sql })
    }
}

fn is_identifier(part: &str) -> bool {
    let mut chars = part.chars();
    part.len() <= MAX_IDENTIFIER_BYTES
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The bigint with the same bits: sequences past `i64::MAX` stay distinct and round-trip.
fn to_bigint(sequence: u64) -> i64 {
    i64::from_ne_bytes(sequence.to_ne_bytes())
}

fn from_bigint(stored: i64) -> u64 {
    u64::from_ne_bytes(stored.to_ne_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_are_plain_identifiers_quoted() {
        assert_eq!(
            Table::parse("agent_errors_checkpoints").unwrap().quoted,
            "\"agent_errors_checkpoints\""
        );
        assert_eq!(
            Table::parse("ops.Runs_2").unwrap().quoted,
            "\"ops\".\"Runs_2\""
        );
        for bad in [
            "",
            "1runs",
            "runs; drop table x",
            "a.b.c",
            "runs\"",
            "ops.",
            "é",
            &"x".repeat(64),
            &"x".repeat(56), // no room for the records table's `_records`
        ] {
            assert!(
                matches!(Table::parse(bad), Err(PostgresStoreError::TableName(_))),
                "{bad:?} was accepted"
            );
        }
    }

    #[test]
    fn every_sequence_round_trips_through_bigint() {
        for sequence in [
            0,
            1,
            i64::MAX as u64,
            i64::MAX as u64 + 1,
            u64::MAX - 1,
            u64::MAX,
        ] {
            assert_eq!(from_bigint(to_bigint(sequence)), sequence);
        }
        assert_eq!(to_bigint(41), 41);
    }
}
