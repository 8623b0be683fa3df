//! What every `CheckpointStore` must do, as one suite a store passes or fails: the fencing rule,
//! exact state round trips, delete, concurrent savers and independent runs; and, for a store
//! that keeps a journal, appends fenced with the snapshots, compaction and concurrent appenders.
//!
//! `open` gives a handle onto the same storage each time it is called: the same store again for
//! an in-memory one, a new connection for a database, so the concurrent savers are as
//! independent as the store allows (separate processes, for a shared database). Run ids carry a
//! prefix unique to the call, so the suite can run twice on one database.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use agent_errors::checkpoint::{Checkpoint, CheckpointError, CheckpointStore, StoredRun};

type Store = Arc<dyn CheckpointStore>;

/// Runs the whole suite; panics at the first rule the store breaks, naming it.
pub async fn conformance(open: impl AsyncFn() -> Store) {
    let runs = Runs::new();
    let store = open().await;
    first_save_is_sequence_zero(&*store, &runs.id("first")).await;
    saves_follow_one_another(&*store, &runs.id("follow")).await;
    stale_and_skipped_saves_conflict_and_change_nothing(&*store, &runs.id("stale")).await;
    states_round_trip_exactly(&*store, &runs.id("bytes")).await;
    delete_then_save_zero(&*store, &runs.id("delete")).await;
    independent_runs_do_not_interfere(&*store, &runs).await;
    let mut handles = vec![store];
    for _ in 1..CONCURRENT_HANDLES {
        handles.push(open().await);
    }
    one_of_many_concurrent_savers_wins(&handles, &runs.id("race")).await;
    if handles[0].journals() {
        journal_conformance(&handles, &runs).await;
    }
}

/// The journal's part of the suite.
async fn journal_conformance(handles: &[Store], runs: &Runs) {
    let store = &*handles[0];
    records_follow_their_snapshot(store, &runs.id("journal")).await;
    a_snapshot_drops_the_records_it_covers(store, &runs.id("compact")).await;
    delete_drops_the_records(store, &runs.id("delete-journal")).await;
    one_of_many_concurrent_appenders_wins(handles, &runs.id("race-journal")).await;
}

async fn append(store: &dyn CheckpointStore, run_id: &str, sequence: u64, state: &[u8]) {
    store
        .append(&checkpoint(run_id, sequence, state))
        .await
        .unwrap_or_else(|e| panic!("append of sequence {sequence} of {run_id:?} failed: {e}"));
}

async fn journal(store: &dyn CheckpointStore, run_id: &str) -> Option<StoredRun> {
    store
        .load_journal(run_id)
        .await
        .unwrap_or_else(|e| panic!("load of {run_id:?}'s journal failed: {e}"))
}

async fn records_follow_their_snapshot(store: &dyn CheckpointStore, run: &str) {
    assert!(
        store.append(&checkpoint(run, 0, b"alone")).await.is_err(),
        "a run's first save is a snapshot"
    );
    assert_eq!(
        journal(store, run).await,
        None,
        "a refused append stores nothing"
    );
    save(store, run, 0, b"snapshot").await;
    append(store, run, 1, b"one").await;
    append(store, run, 2, b"two").await;
    let expected = StoredRun {
        snapshot: checkpoint(run, 0, b"snapshot"),
        records: vec![checkpoint(run, 1, b"one"), checkpoint(run, 2, b"two")],
    };
    assert_eq!(journal(store, run).await.as_ref(), Some(&expected));
    assert_eq!(
        load(store, run).await,
        Some(checkpoint(run, 0, b"snapshot")),
        "load returns the snapshot, with its own sequence"
    );
    for refused in [0, 1, 2, 4, u64::MAX] {
        assert_conflict(
            store.append(&checkpoint(run, refused, b"lost")).await,
            refused,
            Some(2),
        );
        assert_conflict(
            store.save(&checkpoint(run, refused, b"lost")).await,
            refused,
            Some(2),
        );
        assert_eq!(
            journal(store, run).await.as_ref(),
            Some(&expected),
            "a refused save or append of {refused} changed the run"
        );
    }
}

async fn a_snapshot_drops_the_records_it_covers(store: &dyn CheckpointStore, run: &str) {
    save(store, run, 0, b"first").await;
    for sequence in 1..=3 {
        append(store, run, sequence, b"step").await;
    }
    save(store, run, 4, b"second").await;
    let compacted = StoredRun {
        snapshot: checkpoint(run, 4, b"second"),
        records: Vec::new(),
    };
    assert_eq!(journal(store, run).await, Some(compacted));
    append(store, run, 5, b"after").await;
    let stored = journal(store, run).await.expect("the run was saved");
    assert_eq!((stored.snapshot.sequence, stored.records.len()), (4, 1));
}

async fn delete_drops_the_records(store: &dyn CheckpointStore, run: &str) {
    save(store, run, 0, b"first").await;
    append(store, run, 1, b"step").await;
    store.delete(run).await.expect("delete succeeds");
    assert_eq!(
        journal(store, run).await,
        None,
        "a deleted run has no journal"
    );
    save(store, run, 0, b"again").await;
    let stored = journal(store, run).await.expect("the run was saved");
    assert_eq!(
        stored.records,
        Vec::new(),
        "no record of the deleted run is left"
    );
}

/// Every appender tries the same next sequence at once: one wins, the others conflict on it.
async fn one_of_many_concurrent_appenders_wins(handles: &[Store], run: &str) {
    save(&*handles[0], run, 0, b"start").await;
    for sequence in 1..5 {
        let appenders = handles.iter().enumerate().flat_map(|(h, handle)| {
            (0..SAVERS_PER_HANDLE).map(move |n| {
                let handle = Arc::clone(handle);
                let state = format!("appender {n} on handle {h}").into_bytes();
                let record = checkpoint(run, sequence, &state);
                tokio::spawn(async move { (handle.append(&record).await, record.state) })
            })
        });
        let results = futures_util::future::join_all(appenders.collect::<Vec<_>>()).await;
        let mut winners = Vec::new();
        for joined in results {
            let (result, state) = joined.expect("an appender does not panic");
            match result {
                Ok(()) => winners.push(state),
                refused => assert_conflict(refused, sequence, Some(sequence)),
            }
        }
        assert_eq!(
            winners.len(),
            1,
            "exactly one concurrent append of {sequence} wins"
        );
        let stored = journal(&*handles[0], run).await.expect("the run was saved");
        assert!(stored.records.last().is_some_and(|r| r.state == winners[0]));
    }
}

const CONCURRENT_HANDLES: usize = 4;
const SAVERS_PER_HANDLE: usize = 4;

struct Runs(String);

impl Runs {
    fn new() -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let call = NEXT.fetch_add(1, Ordering::Relaxed);
        Runs(format!("{}-{call}-{nanos}", std::process::id()))
    }

    /// A run id with characters SQL and file names treat specially.
    fn id(&self, name: &str) -> String {
        format!("{name}/{}: ü 'quoted' \"too\" %_", self.0)
    }
}

fn checkpoint(run_id: &str, sequence: u64, state: &[u8]) -> Checkpoint {
    Checkpoint {
        run_id: run_id.to_owned(),
        sequence,
        state: state.to_vec(),
    }
}

async fn save(store: &dyn CheckpointStore, run_id: &str, sequence: u64, state: &[u8]) {
    store
        .save(&checkpoint(run_id, sequence, state))
        .await
        .unwrap_or_else(|e| panic!("save of sequence {sequence} of {run_id:?} failed: {e}"));
}

async fn load(store: &dyn CheckpointStore, run_id: &str) -> Option<Checkpoint> {
    store
        .load(run_id)
        .await
        .unwrap_or_else(|e| panic!("load of {run_id:?} failed: {e}"))
}

/// Asserts `result` is the conflict of a save of `sequence` with `found` stored.
fn assert_conflict(result: Result<(), CheckpointError>, sequence: u64, found: Option<u64>) {
    match result {
        Err(CheckpointError::Conflict {
            expected,
            found: reported,
            ..
        }) => {
            assert_eq!(
                expected,
                sequence.checked_sub(1),
                "the conflict names the sequence the save follows"
            );
            assert_eq!(reported, found, "the conflict names the stored sequence");
        }
        other => panic!("a save of {sequence} over {found:?} must conflict, got {other:?}"),
    }
}

async fn first_save_is_sequence_zero(store: &dyn CheckpointStore, run: &str) {
    assert_eq!(load(store, run).await, None, "a new run has no checkpoint");
    assert_conflict(store.save(&checkpoint(run, 1, b"one")).await, 1, None);
    assert_eq!(
        load(store, run).await,
        None,
        "a refused first save stores nothing"
    );
    save(store, run, 0, b"zero").await;
    assert_eq!(load(store, run).await, Some(checkpoint(run, 0, b"zero")));
}

async fn saves_follow_one_another(store: &dyn CheckpointStore, run: &str) {
    for sequence in 0..5 {
        save(store, run, sequence, format!("state {sequence}").as_bytes()).await;
        assert_eq!(
            load(store, run).await,
            Some(checkpoint(
                run,
                sequence,
                format!("state {sequence}").as_bytes()
            )),
            "load returns the latest save"
        );
    }
}

async fn stale_and_skipped_saves_conflict_and_change_nothing(
    store: &dyn CheckpointStore,
    run: &str,
) {
    for sequence in 0..3 {
        save(store, run, sequence, b"kept").await;
    }
    let stored = Some(checkpoint(run, 2, b"kept"));
    for refused in [0, 1, 2, 4, 9, u64::MAX] {
        let result = store.save(&checkpoint(run, refused, b"lost")).await;
        assert_conflict(result, refused, Some(2));
        assert_eq!(
            load(store, run).await,
            stored,
            "a refused save of {refused} changed the run"
        );
    }
    save(store, run, 3, b"next").await;
}

async fn states_round_trip_exactly(store: &dyn CheckpointStore, run: &str) {
    let every_byte: Vec<u8> = (0..=255).collect();
    // Deterministic noise: incompressible, every byte value, no pattern a store could exploit.
    let mut seed = 0x9E37_79B9_7F4A_7C15_u64;
    let one_mib: Vec<u8> = (0..1 << 20)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed.to_le_bytes()[0]
        })
        .collect();
    let states: [&[u8]; 5] = [b"", b"\0", &every_byte, &one_mib, b""];
    for (sequence, state) in (0..).zip(states) {
        save(store, run, sequence, state).await;
        let loaded = load(store, run).await.expect("the run was just saved");
        assert_eq!(loaded.sequence, sequence);
        assert!(
            loaded.state == state,
            "a state of {} bytes came back as {} different bytes",
            state.len(),
            loaded.state.len()
        );
    }
}

async fn delete_then_save_zero(store: &dyn CheckpointStore, run: &str) {
    store
        .delete(run)
        .await
        .expect("deleting a run that has no checkpoint is not an error");
    for sequence in 0..3 {
        save(store, run, sequence, b"before").await;
    }
    store.delete(run).await.expect("delete succeeds");
    assert_eq!(
        load(store, run).await,
        None,
        "a deleted run has no checkpoint"
    );
    assert_conflict(store.save(&checkpoint(run, 3, b"late")).await, 3, None);
    save(store, run, 0, b"again").await;
    assert_eq!(load(store, run).await, Some(checkpoint(run, 0, b"again")));
}

async fn independent_runs_do_not_interfere(store: &dyn CheckpointStore, runs: &Runs) {
    let (a, b) = (runs.id("independent-a"), runs.id("independent-b"));
    save(store, &a, 0, b"a0").await;
    save(store, &b, 0, b"b0").await;
    save(store, &a, 1, b"a1").await;
    assert_eq!(load(store, &b).await, Some(checkpoint(&b, 0, b"b0")));
    assert_conflict(store.save(&checkpoint(&b, 2, b"b2")).await, 2, Some(0));
    store.delete(&a).await.expect("delete succeeds");
    assert_eq!(
        load(store, &b).await,
        Some(checkpoint(&b, 0, b"b0")),
        "deleting one run kept another"
    );
    save(store, &b, 1, b"b1").await;
    save(store, &a, 0, b"a again").await;
    assert_eq!(load(store, &a).await, Some(checkpoint(&a, 0, b"a again")));
    assert_eq!(load(store, &b).await, Some(checkpoint(&b, 1, b"b1")));
}

/// Every saver tries the same next sequence with its own state, all at once: one wins, the
/// others conflict on the winner's sequence, and the winner's state is the one stored.
async fn one_of_many_concurrent_savers_wins(handles: &[Store], run: &str) {
    for sequence in 0..5 {
        let savers = handles.iter().enumerate().flat_map(|(h, handle)| {
            (0..SAVERS_PER_HANDLE).map(move |n| {
                let handle = Arc::clone(handle);
                let state = format!("saver {n} on handle {h}").into_bytes();
                let checkpoint = checkpoint(run, sequence, &state);
                tokio::spawn(async move { (handle.save(&checkpoint).await, checkpoint.state) })
            })
        });
        let results: Vec<_> = futures_util::future::join_all(savers.collect::<Vec<_>>()).await;
        let mut winners = Vec::new();
        for joined in results {
            let (result, state) = joined.expect("a saver does not panic");
            match result {
                Ok(()) => winners.push(state),
                refused => assert_conflict(refused, sequence, Some(sequence)),
            }
        }
        assert_eq!(
            winners.len(),
            1,
            "exactly one concurrent save of {sequence} wins"
        );
        let stored = load(&*handles[0], run).await.expect("the run was saved");
        assert_eq!(stored.sequence, sequence);
        assert!(
            stored.state == winners[0],
            "the stored state is the winner's"
        );
    }
}
