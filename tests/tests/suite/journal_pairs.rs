//! Durable runs whose turns ask two tools at once (one of them applies an effect), stopped right
//! after any of their saves and resumed on a fresh agent. The calls of a turn run together and
//! save their answers one after the other, so a stop right after one call's save can land
//! after its sibling applied its effect and before the sibling's answer was saved. The
//! documented guarantee for that sibling is at-least-once: resumed, it runs again, once, with
//! the same idempotency key (an idempotent tool; one that is not is reported as interrupted,
//! never run twice). Every other call keeps exactly its one saved result.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use agent_errors::call::BoxFuture;
use agent_errors::checkpoint::{CheckpointStore, MemoryCheckpoints};
use agent_errors::testing::transcript_violations;
use agent_errors::{
    Agent, BoxError, ChatModel, ChatRequest, ChatResponse, Message, RunError, RunOptions, ToolCall,
    ToolDef,
    run::{FinishedRun, ResumeError},
};

use super::journal::{Crash, Disk, Kind, World, digest, tool};

const TURNS: usize = 24;
const SNAPSHOT_EVERY: u32 = 8;

/// A model that asks `read` (which changes nothing) and `write` (which applies an effect under
/// the call's idempotency key) at once every turn, in turns that alternate which comes first;
/// after `TURNS` turns it answers with a digest of every result it was shown.
struct Pairs;

impl ChatModel for Pairs {
    fn chat<'a>(
        &'a self,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChatResponse, BoxError>> {
        let asked = (request.messages.iter())
            .filter(|m| matches!(m, Message::Assistant { .. }))
            .count();
        let response = if asked < TURNS {
            let args = format!(r#"{{"turn": {asked}}}"#);
            let mut calls = vec![
                ToolCall::new(format!("r{asked}"), "read", args.clone()),
                ToolCall::new(format!("w{asked}"), "write", args),
            ];
            if asked % 2 == 1 {
                calls.reverse();
            }
            ChatResponse::tool_calls(calls)
        } else {
            ChatResponse::text(digest(&request.messages))
        };
        Box::pin(async move { Ok(response) })
    }
}

fn read() -> ToolDef {
    ToolDef::new("read", "Reads.", |args: serde_json::Value| async move {
        Ok::<_, std::convert::Infallible>(format!("read {args}"))
    })
    .idempotent(true)
}

/// The agent, its `write` idempotent or not.
fn agent(world: &Arc<World>, disk: Arc<Disk>, idempotent: bool) -> Agent {
    let write = tool("write", Kind::Write, world).idempotent(idempotent);
    Agent::builder("pairs")
        .model(Pairs)
        .tools([write, read()])
        .max_turns(u32::try_from(TURNS).unwrap() + 1)
        .snapshot_every(SNAPSHOT_EVERY)
        .shared_checkpoints(disk as Arc<dyn CheckpointStore>)
        .build()
        .expect("a valid agent")
}

/// How many times the effect of each idempotency key was applied.
fn applied(world: &World) -> BTreeMap<String, usize> {
    let mut applied = BTreeMap::new();
    for key in world.effects.lock().unwrap().iter() {
        *applied.entry(key.clone()).or_default() += 1;
    }
    applied
}

/// The run's answer and effects, stopped at `crash` and resumed; `None` when the crash point
/// lies past the run's last write.
async fn crash_and_resume(
    crash: Crash,
    idempotent: bool,
) -> Option<(String, BTreeMap<String, usize>)> {
    let (world, memory) = (
        Arc::new(World::default()),
        Arc::new(MemoryCheckpoints::new()),
    );
    let disk = Disk::new(&memory, crash);
    let first = agent(&world, Arc::clone(&disk), idempotent);
    let mut run = tokio::spawn(async move {
        first
            .run_with("go", RunOptions::new().run_id("pairs"))
            .await
    });
    tokio::select! {
        outcome = &mut run => {
            outcome.expect("the run does not panic").result.expect("the run answers");
            return None;
        }
        () = disk.crashed.notified() => run.abort(),
    }
    let resumer = agent(&world, Disk::new(&memory, Crash::Never), idempotent);
    let outcome = resumer.resume("pairs", RunOptions::new()).await;
    let violations = transcript_violations(&outcome.transcript);
    assert!(violations.is_empty(), "{crash:?}: {violations:?}");
    let answer = match outcome.result {
        Ok(answer) => answer,
        Err(RunError::Resume(ResumeError::Finished {
            outcome: FinishedRun::Answered { text: Some(text) },
            ..
        })) => text,
        Err(error) => panic!("{crash:?}: the resumed run failed: {error}"),
    };
    Some((answer, applied(&world)))
}

/// The uninterrupted run: its answer, and every stop point of it.
async fn uninterrupted(idempotent: bool) -> (String, Vec<Crash>) {
    let (world, memory) = (
        Arc::new(World::default()),
        Arc::new(MemoryCheckpoints::new()),
    );
    let disk = Disk::new(&memory, Crash::Never);
    let outcome = agent(&world, Arc::clone(&disk), idempotent)
        .run_with("go", RunOptions::new().run_id("pairs"))
        .await;
    let expected = outcome.result.expect("the uninterrupted run answers");
    assert_eq!(expected.lines().count(), 2 * TURNS);
    let once = applied(&world);
    assert_eq!(once.len(), TURNS);
    assert!(once.values().all(|&n| n == 1));
    let appends = disk.appends.load(Ordering::SeqCst);
    let snapshots = disk.snapshots.load(Ordering::SeqCst);
    let stops = (1..=appends).map(Crash::AfterAppend);
    let stops = stops.chain((1..=snapshots).map(Crash::AfterSnapshot));
    (expected, stops.collect())
}

/// The key of each turn's `write`, as the world records it, in the world's order.
fn keys() -> Vec<String> {
    let mut keys: Vec<String> = (0..TURNS).map(|turn| format!("pairs:w{turn}")).collect();
    keys.sort();
    keys
}

#[tokio::test(start_paused = true)]
async fn two_calls_a_turn_stopped_after_any_save_run_an_unsaved_sibling_once_more_at_most() {
    let (expected, stops) = uninterrupted(true).await;
    let mut ran_again = 0;
    for crash in stops {
        let (answer, resumed) = crash_and_resume(crash, true)
            .await
            .unwrap_or_else(|| panic!("{crash:?}: the run was never stopped"));
        // Every call has its one result, the one the uninterrupted run got.
        assert_eq!(answer, expected, "{crash:?}: the answer");
        // Every effect applied, each under its own call's key (a run again carries the same).
        assert!(
            resumed.keys().eq(keys().iter()),
            "{crash:?}: the keys applied {resumed:?}"
        );
        let twice: Vec<_> = resumed.iter().filter(|&(_, &n)| n > 1).collect();
        assert!(
            resumed.values().all(|&n| n <= 2) && twice.len() <= 1,
            "{crash:?}: only the call in flight beside the stopped save runs again, once: {twice:?}"
        );
        ran_again += twice.len();
    }
    // The shape is real: some stops land after a `write` applied its effect, unsaved.
    assert!(ran_again > 0, "no stop left a sibling's effect unsaved");
}

#[tokio::test(start_paused = true)]
async fn two_calls_a_turn_stopped_after_any_save_never_run_a_non_idempotent_call_twice() {
    let (expected, stops) = uninterrupted(false).await;
    let mut interrupted = 0;
    for crash in stops {
        let (answer, resumed) = crash_and_resume(crash, false)
            .await
            .unwrap_or_else(|| panic!("{crash:?}: the run was never stopped"));
        assert!(
            resumed.values().all(|&n| n == 1),
            "{crash:?}: an effect applied twice: {resumed:?}"
        );
        // Each call has one result: the uninterrupted run's, or, for the `write` the stop left
        // unsaved, an error saying its outcome is unknown.
        let differ: Vec<&str> = (answer.lines().zip(expected.lines()))
            .filter(|(got, want)| got != want)
            .map(|(got, _)| got)
            .collect();
        assert_eq!(answer.lines().count(), 2 * TURNS, "{crash:?}");
        assert!(
            differ.len() <= 1
                && differ
                    .iter()
                    .all(|line| line.starts_with('w') && line.contains("outcome_unknown")),
            "{crash:?}: {differ:?}"
        );
        interrupted += differ.len();
    }
    assert!(interrupted > 0, "no stop left a `write` unsaved");
}
