//! Durable runs on the checkpoint journal: a run stopped right after any of its saves (every
//! append and every snapshot of a run with retries, a fixer, a fallback and an approval) resumes
//! on a fresh agent to the answer an uninterrupted run gives; a long run resumes reading a
//! bounded tail; checkpoints written by the format before the journal still resume.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_errors::approval::{Decision, PendingApproval};
use agent_errors::breaker::ServiceBreaker;
use agent_errors::call::{BoxFuture, Extensions, IdempotencyKey, ToolFuture, ToolHandler};
use agent_errors::checkpoint::{
    Checkpoint, CheckpointError, CheckpointStore, MemoryCheckpoints, StoredRun,
};
use agent_errors::policy::{Action, Policy, PolicyKey, RetryAction};
use agent_errors::testing::transcript_violations;
use agent_errors::{
    Agent, BoxError, ChatModel, ChatRequest, ChatResponse, Fix, FixRequest, HttpError, Message,
    RunError, RunOptions, ToolCall, ToolDef, ToolError,
    build::FixerDef,
    run::{FinishedRun, ResumeError},
};
use tokio::sync::Notify;

/// Which write of the run the process dies right after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Crash {
    Never,
    AfterAppend(u64),
    AfterSnapshot(u64),
}

/// A journaling store in front of a shared [`MemoryCheckpoints`]: it counts the writes of each
/// kind and the records it hands back, and, at its crash point, keeps the write and never
/// answers: the process died with the write on disk.
#[derive(Debug)]
pub(super) struct Disk {
    inner: Arc<MemoryCheckpoints>,
    crash: Crash,
    pub(super) appends: AtomicU64,
    pub(super) snapshots: AtomicU64,
    /// The bytes written by appends and by snapshots.
    appended_bytes: AtomicUsize,
    snapshot_bytes: AtomicUsize,
    /// What each append wrote, in order.
    appended: Mutex<Vec<String>>,
    records_read: AtomicUsize,
    pub(super) crashed: Arc<Notify>,
    dead: AtomicBool,
}

impl Disk {
    pub(super) fn new(inner: &Arc<MemoryCheckpoints>, crash: Crash) -> Arc<Disk> {
        Arc::new(Disk {
            inner: Arc::clone(inner),
            crash,
            appends: AtomicU64::new(0),
            snapshots: AtomicU64::new(0),
            appended_bytes: AtomicUsize::new(0),
            snapshot_bytes: AtomicUsize::new(0),
            appended: Mutex::new(Vec::new()),
            records_read: AtomicUsize::new(0),
            crashed: Arc::new(Notify::new()),
            dead: AtomicBool::new(false),
        })
    }

    /// After a write: dies here when this is the crash point.
    async fn after(&self, written: Crash) {
        if written == self.crash {
            self.dead.store(true, Ordering::SeqCst);
            self.crashed.notify_one();
            std::future::pending::<()>().await;
        }
    }
}

impl CheckpointStore for Disk {
    fn save<'a>(&'a self, c: &'a Checkpoint) -> BoxFuture<'a, Result<(), CheckpointError>> {
        Box::pin(async move {
            self.inner.save(c).await?;
            self.snapshot_bytes
                .fetch_add(c.state.len(), Ordering::SeqCst);
            let n = self.snapshots.fetch_add(1, Ordering::SeqCst) + 1;
            self.after(Crash::AfterSnapshot(n)).await;
            Ok(())
        })
    }

    fn load<'a>(
        &'a self,
        run_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Checkpoint>, CheckpointError>> {
        self.inner.load(run_id)
    }

    fn delete<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<(), CheckpointError>> {
        self.inner.delete(run_id)
    }

    fn journals(&self) -> bool {
        true
    }

    fn append<'a>(&'a self, c: &'a Checkpoint) -> BoxFuture<'a, Result<(), CheckpointError>> {
        Box::pin(async move {
            self.inner.append(c).await?;
            self.appended_bytes
                .fetch_add(c.state.len(), Ordering::SeqCst);
            let state = String::from_utf8_lossy(&c.state).into_owned();
            self.appended.lock().unwrap().push(state);
            let n = self.appends.fetch_add(1, Ordering::SeqCst) + 1;
            self.after(Crash::AfterAppend(n)).await;
            Ok(())
        })
    }

    fn load_journal<'a>(
        &'a self,
        run_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<StoredRun>, CheckpointError>> {
        Box::pin(async move {
            let stored = self.inner.load_journal(run_id).await?;
            let read = stored.as_ref().map_or(0, |s| s.records.len());
            self.records_read.fetch_add(read, Ordering::SeqCst);
            Ok(stored)
        })
    }
}

/// What the tools did to the world, across every process of a run.
#[derive(Debug, Default)]
pub(super) struct World {
    /// Effects applied, by idempotency key, in order.
    pub(super) effects: Mutex<Vec<String>>,
    /// Attempts of each call of the always-failing tool.
    attempts: Mutex<BTreeMap<String, u32>>,
    /// Fixer invocations.
    repairs: AtomicU64,
}

#[derive(Debug, Clone, Copy)]
pub(super) enum Kind {
    /// Applies its effect and answers.
    Write,
    /// Always fails with a 503: retried, then shown to the model.
    Broken,
    /// Fails with a 400 until a fixer rewrote its arguments.
    Picky,
    /// Fails with a 503: its policy falls back to `backup`.
    Primary,
}

struct WorldTool {
    kind: Kind,
    world: Arc<World>,
}

impl ToolHandler for WorldTool {
    fn call(&self, raw_args: &str) -> Result<ToolFuture, ToolError> {
        self.call_with(raw_args, &Extensions::new())
    }

    fn call_with(&self, raw_args: &str, extensions: &Extensions) -> Result<ToolFuture, ToolError> {
        let key = (extensions.get::<IdempotencyKey>())
            .map(ToString::to_string)
            .unwrap_or_default();
        let world = Arc::clone(&self.world);
        let (kind, args) = (self.kind, raw_args.to_owned());
        Ok(Box::pin(async move {
            match kind {
                Kind::Broken => {
                    *world.attempts.lock().unwrap().entry(key).or_default() += 1;
                    Err(HttpError::new(503, "down").into())
                }
                Kind::Primary => Err(HttpError::new(503, "primary down").into()),
                Kind::Picky if !args.contains("fixed") => Err(HttpError::new(400, "bad v").into()),
                Kind::Write | Kind::Picky => {
                    world.effects.lock().unwrap().push(key);
                    Ok(format!("done {args}"))
                }
            }
        }))
    }
}

pub(super) fn tool(name: &'static str, kind: Kind, world: &Arc<World>) -> ToolDef {
    let schema = serde_json::json!({"type": "object"});
    let handler = WorldTool {
        kind,
        world: Arc::clone(world),
    };
    ToolDef::from_handler(name, "A tool of the world.", schema, handler).idempotent(true)
}

fn tools(world: &Arc<World>) -> Vec<ToolDef> {
    let retry = Action::Retry(RetryAction {
        max_attempts: std::num::NonZeroU32::new(3).unwrap(),
        initial: Some(Duration::from_secs(1)),
        max: None,
        when_safe: false,
    });
    let broken = Policy::new().on(PolicyKey::Execution, vec![retry, Action::Escalate]);
    let picky = Policy::new().on(PolicyKey::Execution, Action::fix("repair", 2).unwrap());
    let primary = Policy::new().on(PolicyKey::Execution, Action::fallback("backup"));
    vec![
        tool("write", Kind::Write, world),
        tool("broken", Kind::Broken, world).with_policy(broken),
        tool("picky", Kind::Picky, world).with_policy(picky),
        tool("primary", Kind::Primary, world).with_policy(primary),
        tool("backup", Kind::Write, world),
        tool("transfer", Kind::Write, world).requires_approval(true),
    ]
}

/// A model that plans from what it is sent: turn `t` calls the `t`-th tool of the rotation;
/// after `turns` turns it answers with a digest of every result it was shown, so two runs
/// answer alike only if every call got the same result. One call a turn: at each save point
/// nothing else is in flight, so what a stop loses is exactly what was not saved.
struct Planner {
    turns: usize,
    rotation: &'static [&'static str],
}

impl ChatModel for Planner {
    fn chat<'a>(
        &'a self,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChatResponse, BoxError>> {
        let asked = (request.messages.iter())
            .filter(|m| matches!(m, Message::Assistant { .. }))
            .count();
        let response = if asked < self.turns {
            let name = self.rotation[asked % self.rotation.len()];
            let args = format!(r#"{{"turn": {asked}}}"#);
            ChatResponse::tool_calls(vec![ToolCall::new(format!("c{asked}"), name, args)])
        } else {
            ChatResponse::text(digest(&request.messages))
        };
        Box::pin(async move { Ok(response) })
    }
}

pub(super) fn digest(messages: &[Message]) -> String {
    let results: Vec<String> = (messages.iter())
        .filter_map(|m| match m {
            Message::Tool(r) => Some(format!("{}:{}:{}", r.call_id, r.is_error, r.content)),
            _ => None,
        })
        .collect();
    results.join("\n")
}

fn repair(world: &Arc<World>) -> FixerDef {
    let world = Arc::clone(world);
    FixerDef::from_fn("repair", move |_: FixRequest| {
        world.repairs.fetch_add(1, Ordering::SeqCst);
        Ok(Fix::args(r#"{"v": "fixed"}"#))
    })
}

const ROTATION: &[&str] = &["write", "broken", "picky", "primary", "transfer"];

fn agent(world: &Arc<World>, store: Arc<Disk>, turns: usize, snapshot_every: u32) -> Agent {
    Agent::builder("journal")
        .model(Planner {
            turns,
            rotation: ROTATION,
        })
        .tools(tools(world))
        .fixer(repair(world))
        // Fifteen failed attempts of `broken` are the point, not a reason to stop calling it
        // (a service breaker's state is the process's, not the run's: a new process starts
        // it closed).
        .breaker_threshold(100)
        .service_breaker(Arc::new(
            ServiceBreaker::new(100, Duration::from_secs(1)).unwrap(),
        ))
        .approver(|_: &PendingApproval| Decision::Approve)
        .max_turns(u32::try_from(turns).unwrap() + 1)
        .snapshot_every(snapshot_every)
        .shared_checkpoints(store as Arc<dyn CheckpointStore>)
        .build()
        .expect("a valid agent")
}

/// What a run did: its answer and what the world saw.
#[derive(Debug, PartialEq)]
struct Observed {
    answer: String,
    effects: Vec<String>,
    attempts: BTreeMap<String, u32>,
    repairs: u64,
}

fn observed(answer: String, world: &World) -> Observed {
    let mut effects = world.effects.lock().unwrap().clone();
    let applied = effects.len();
    effects.sort();
    effects.dedup();
    assert_eq!(effects.len(), applied, "an effect was applied twice");
    Observed {
        answer,
        effects,
        attempts: world.attempts.lock().unwrap().clone(),
        repairs: world.repairs.load(Ordering::SeqCst),
    }
}

const TURNS: usize = 50;
const SNAPSHOT_EVERY: u32 = 8;

/// Runs the whole run with the process dying at `crash`, then resumes it on a fresh agent;
/// `None` when the crash point lies past the run's last write.
async fn crash_and_resume(crash: Crash) -> Option<Observed> {
    let (world, memory) = (
        Arc::new(World::default()),
        Arc::new(MemoryCheckpoints::new()),
    );
    let disk = Disk::new(&memory, crash);
    let first = agent(&world, Arc::clone(&disk), TURNS, SNAPSHOT_EVERY);
    let options = RunOptions::new().run_id("long");
    let mut run = tokio::spawn(async move { first.run_with("go", options).await });
    let crashed = Arc::clone(&disk.crashed);
    tokio::select! {
        outcome = &mut run => {
            outcome.expect("the run does not panic").result.expect("the run answers");
            return None;
        }
        () = crashed.notified() => run.abort(),
    }
    assert!(disk.dead.load(Ordering::SeqCst));
    let resumer = agent(
        &world,
        Disk::new(&memory, Crash::Never),
        TURNS,
        SNAPSHOT_EVERY,
    );
    let outcome = resumer.resume("long", RunOptions::new()).await;
    let violations = transcript_violations(&outcome.transcript);
    assert!(violations.is_empty(), "{crash:?}: {violations:?}");
    let answer = match outcome.result {
        Ok(answer) => answer,
        // Stopped after the run's last write: it had finished, and says how.
        Err(RunError::Resume(ResumeError::Finished {
            outcome: FinishedRun::Answered { text: Some(text) },
            ..
        })) => text,
        Err(error) => panic!("{crash:?}: the resumed run failed: {error}"),
    };
    Some(observed(answer, &world))
}

/// Asserts a resumed run did what the uninterrupted one did, naming the first difference.
fn assert_same(resumed: Option<Observed>, expected: &Observed, stopped: &str) {
    let resumed = resumed.unwrap_or_else(|| panic!("{stopped}: the run was never stopped"));
    assert_eq!(resumed.effects, expected.effects, "{stopped}: effects");
    assert_eq!(
        resumed.attempts, expected.attempts,
        "{stopped}: attempts of `broken`"
    );
    assert_eq!(resumed.repairs, expected.repairs, "{stopped}: repairs");
    for (got, want) in resumed.answer.lines().zip(expected.answer.lines()) {
        assert_eq!(got, want, "{stopped}: a call's result");
    }
    assert_eq!(resumed.answer, expected.answer, "{stopped}: the answer");
}

/// The uninterrupted run, and how many appends and snapshots it wrote.
async fn uninterrupted() -> (Observed, u64, u64) {
    let (world, memory) = (
        Arc::new(World::default()),
        Arc::new(MemoryCheckpoints::new()),
    );
    let disk = Disk::new(&memory, Crash::Never);
    let agent = agent(&world, Arc::clone(&disk), TURNS, SNAPSHOT_EVERY);
    let outcome = agent.run_with("go", RunOptions::new().run_id("long")).await;
    assert!(transcript_violations(&outcome.transcript).is_empty());
    let answer = outcome.result.expect("the uninterrupted run answers");
    let (appends, snapshots) = (
        disk.appends.load(Ordering::SeqCst),
        disk.snapshots.load(Ordering::SeqCst),
    );
    (observed(answer, &world), appends, snapshots)
}

#[tokio::test(start_paused = true)]
async fn a_run_stopped_after_any_of_its_saves_resumes_to_the_uninterrupted_answer() {
    let (expected, appends, snapshots) = uninterrupted().await;
    // The run is what it claims to be: 50 calls, retries spent, a repair per picky call, a
    // fallback's effects, approved transfers, and snapshots between the appends.
    assert_eq!(expected.answer.lines().count(), TURNS);
    assert_eq!(expected.attempts.len(), TURNS / 5);
    assert!(
        expected.attempts.values().all(|&a| a == 3),
        "{:?}",
        expected.attempts
    );
    assert_eq!(expected.repairs, 10);
    // Every write, every picky call once fixed, every fallback and every approved transfer.
    assert_eq!(expected.effects.len(), TURNS - TURNS / 5);
    assert!(
        snapshots >= 10 && appends > 90,
        "{snapshots} snapshots, {appends} appends"
    );

    // Among these: stopped between an append and the snapshot that would have followed it.
    for k in 1..=appends {
        let resumed = crash_and_resume(Crash::AfterAppend(k)).await;
        assert_same(resumed, &expected, &format!("stopped after append {k}"));
    }
    for k in 1..=snapshots {
        let resumed = crash_and_resume(Crash::AfterSnapshot(k)).await;
        assert_same(resumed, &expected, &format!("stopped after snapshot {k}"));
    }
}

/// A model that calls `write` once a turn for `turns` turns, then answers "done"; it keeps
/// nothing of what it is sent.
struct Writer {
    turns: usize,
}

impl ChatModel for Writer {
    fn chat<'a>(
        &'a self,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChatResponse, BoxError>> {
        let asked = (request.messages.iter())
            .filter(|m| matches!(m, Message::Assistant { .. }))
            .count();
        let response = if asked < self.turns {
            let call = ToolCall::new(format!("c{asked}"), "write", format!(r#"{{"n": {asked}}}"#));
            ChatResponse::tool_calls(vec![call])
        } else {
            ChatResponse::text("done")
        };
        Box::pin(async move { Ok(response) })
    }
}

#[tokio::test]
async fn a_thousand_call_run_resumes_reading_its_snapshot_and_a_tail_no_bigger() {
    const CALLS: usize = 1000;
    // Two saves a call (the turn, the answer): stopped half-way, where a snapshot every fixed
    // count of steps leaves a tail bigger than its small snapshot, and near the end.
    for stop in [CALLS as u64, 2 * CALLS as u64 - 60] {
        stop_and_resume_a_long_run(CALLS, stop).await;
    }
}

/// Runs `calls` calls stopped after append `stop`, then resumes them: the resume reads the
/// latest snapshot and a tail no bigger than it, and snapshots wrote no more than twice what
/// the journal did.
async fn stop_and_resume_a_long_run(calls: usize, stop: u64) {
    let (world, memory) = (
        Arc::new(World::default()),
        Arc::new(MemoryCheckpoints::new()),
    );
    let writer = |disk: Arc<Disk>| {
        Agent::builder("long")
            .model(Writer { turns: calls })
            .tool(tool("write", Kind::Write, &world))
            .max_turns(u32::try_from(calls).unwrap() + 1)
            .shared_checkpoints(disk as Arc<dyn CheckpointStore>)
            .build()
            .unwrap()
    };
    let disk = Disk::new(&memory, Crash::AfterAppend(stop));
    let first = writer(Arc::clone(&disk));
    let mut run = tokio::spawn(async move {
        first
            .run_with("go", RunOptions::new().run_id("thousand"))
            .await
    });
    tokio::select! {
        _ = &mut run => panic!("the run was to be stopped"),
        () = disk.crashed.notified() => run.abort(),
    }
    let stored = memory.load_journal("thousand").await.unwrap().unwrap();
    assert!(
        stored.snapshot.sequence > 0,
        "snapshots were written along the way"
    );
    let tail: usize = stored.records.iter().map(|r| r.state.len()).sum();
    let snapshot = stored.snapshot.state.len();
    assert!(
        tail <= snapshot,
        "stopped after append {stop}: a tail of {tail} bytes after a snapshot of {snapshot}"
    );
    let (snapshots, appended) = (
        disk.snapshot_bytes.load(Ordering::SeqCst),
        disk.appended_bytes.load(Ordering::SeqCst),
    );
    assert!(
        snapshots <= 2 * appended,
        "snapshots wrote {snapshots} bytes beside {appended} appended"
    );

    let resumed = Disk::new(&memory, Crash::Never);
    let outcome = writer(Arc::clone(&resumed))
        .resume("thousand", RunOptions::new())
        .await;
    assert_eq!(outcome.result.unwrap(), "done");
    let read = resumed.records_read.load(Ordering::SeqCst);
    assert_eq!(read, stored.records.len(), "the resume read that tail");
    let effects = world.effects.lock().unwrap().len();
    assert_eq!(effects, calls, "every call applied once");
    assert!(transcript_violations(&outcome.transcript).is_empty());
}

#[tokio::test]
async fn a_calls_answer_is_written_to_the_journal_once() {
    const CALLS: usize = 5;
    // Each answer is 4 KB with a mark of its own.
    let write = ToolDef::new("write", "Writes.", |args: serde_json::Value| async move {
        let mark = format!("answer-{}-", args["n"]);
        Ok::<_, std::convert::Infallible>(mark.repeat(4096 / mark.len()))
    });
    let disk = Disk::new(&Arc::new(MemoryCheckpoints::new()), Crash::Never);
    let agent = Agent::builder("long")
        .model(Writer { turns: CALLS })
        .tool(write)
        .shared_checkpoints(Arc::clone(&disk) as Arc<dyn CheckpointStore>)
        .build()
        .unwrap();
    let outcome = agent.run_with("go", RunOptions::new().run_id("once")).await;
    assert_eq!(outcome.result.unwrap(), "done");

    // A snapshot holds the whole state, answers included; every record after it is a change.
    let journal = disk.appended.lock().unwrap();
    let mut appended = 0;
    for n in 0..CALLS {
        let mark = format!("answer-{n}-answer-{n}-");
        let records = journal.iter().filter(|r| r.contains(&mark)).count();
        assert!(records <= 1, "call {n}'s answer is in {records} records");
        appended += records;
    }
    assert!(appended > 0, "no answer was appended");
}

/// Checkpoints written by the format before the journal, as that build wrote them: a run asleep
/// before the last retry of `flaky` (its turn's `lookup` answered), and a run waiting for a
/// person to approve `transfer` (its turn's `lookup` answered).
const CHECKPOINT_V2: &[u8] = include_bytes!("fixtures/checkpoint_v2.json");
const CHECKPOINT_V3_WAITING: &[u8] = include_bytes!("fixtures/checkpoint_v3_waiting.json");

/// A store holding `state` at `sequence` for `run_id`, as the older build left it.
async fn left_by_older_build(run_id: &str, sequence: u64, state: &[u8]) -> Arc<MemoryCheckpoints> {
    let store = Arc::new(MemoryCheckpoints::new());
    for n in 0..=sequence {
        let state = if n == sequence { state } else { b"{}" };
        let checkpoint = Checkpoint {
            run_id: run_id.into(),
            sequence: n,
            state: state.to_vec(),
        };
        store.save(&checkpoint).await.unwrap();
    }
    store
}

fn counting(name: &'static str, calls: &Arc<AtomicU64>, answer: Result<(), u16>) -> ToolDef {
    let calls = Arc::clone(calls);
    ToolDef::new(name, "Counts its calls.", move |_: serde_json::Value| {
        calls.fetch_add(1, Ordering::SeqCst);
        async move {
            match answer {
                Ok(()) => Ok(format!("{name} ok")),
                Err(status) => Err(HttpError::new(status, "busy")),
            }
        }
    })
}

/// The state version of `run_id`'s snapshot.
async fn version(store: &MemoryCheckpoints, run_id: &str) -> u64 {
    let snapshot = store.load(run_id).await.unwrap().unwrap();
    let state: serde_json::Value = serde_json::from_slice(&snapshot.state).unwrap();
    state["version"].as_u64().unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_run_saved_before_the_journal_asleep_before_a_retry_resumes() {
    let store = left_by_older_build("run-v2", 7, CHECKPOINT_V2).await;
    let (lookups, flakies) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let retry = Action::Retry(RetryAction {
        max_attempts: std::num::NonZeroU32::new(4).unwrap(),
        initial: Some(Duration::from_secs(10)),
        max: None,
        when_safe: false,
    });
    let agent = Agent::builder("durable")
        .model(agent_errors::testing::ScriptedModel::new().text("all done"))
        .tools([
            counting("lookup", &lookups, Ok(())),
            counting("flaky", &flakies, Ok(()))
                .with_policy(Policy::new().on(PolicyKey::Execution, retry)),
        ])
        .shared_checkpoints(Arc::clone(&store) as Arc<dyn CheckpointStore>)
        .build()
        .unwrap();
    let outcome = agent.resume("run-v2", RunOptions::new()).await;
    assert_eq!(outcome.result.unwrap(), "all done");
    assert_eq!(
        lookups.load(Ordering::SeqCst),
        0,
        "an answered call ran again"
    );
    assert_eq!(
        flakies.load(Ordering::SeqCst),
        1,
        "the sleeping call retried once"
    );
    let ids: Vec<String> = (outcome.transcript.iter())
        .filter_map(|m| match m {
            Message::Tool(r) => Some(r.call_id.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(ids, ["call_1", "call_2", "call_3"]);
    assert_eq!(outcome.report.tool_calls, 3, "the saved counts carry over");
    assert_eq!(
        version(&store, "run-v2").await,
        4,
        "saved on in the journal's version"
    );
}

#[tokio::test]
async fn a_run_saved_before_the_journal_waiting_for_a_person_resumes_with_the_answer() {
    let store = left_by_older_build("run-v3", 3, CHECKPOINT_V3_WAITING).await;
    let (lookups, transfers) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let agent = Agent::builder("clerk")
        .model(agent_errors::testing::ScriptedModel::new().text("paid"))
        .tools([
            counting("lookup", &lookups, Ok(())),
            counting("transfer", &transfers, Ok(())).requires_approval(true),
        ])
        .shared_checkpoints(Arc::clone(&store) as Arc<dyn CheckpointStore>)
        .build()
        .unwrap();
    let options = RunOptions::new().answer("call_2", Decision::Approve);
    let outcome = agent.resume("run-v3", options).await;
    assert_eq!(outcome.result.unwrap(), "paid");
    assert_eq!(
        lookups.load(Ordering::SeqCst),
        0,
        "an answered call ran again"
    );
    assert_eq!(
        transfers.load(Ordering::SeqCst),
        1,
        "the approved call ran once"
    );
    assert!(transcript_violations(&outcome.transcript).is_empty());
}

/// A store whose journal of a run hands back records naming another run (a store bug, or rows
/// of two runs mixed up): every record of `run_id`'s journal is read back under `intruder`.
#[derive(Debug)]
struct MixedUp {
    inner: MemoryCheckpoints,
    snapshot_too: bool,
}

impl CheckpointStore for MixedUp {
    fn save<'a>(&'a self, c: &'a Checkpoint) -> BoxFuture<'a, Result<(), CheckpointError>> {
        self.inner.save(c)
    }

    fn load<'a>(
        &'a self,
        run_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Checkpoint>, CheckpointError>> {
        self.inner.load(run_id)
    }

    fn delete<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<(), CheckpointError>> {
        self.inner.delete(run_id)
    }

    fn journals(&self) -> bool {
        true
    }

    fn append<'a>(&'a self, c: &'a Checkpoint) -> BoxFuture<'a, Result<(), CheckpointError>> {
        self.inner.append(c)
    }

    fn load_journal<'a>(
        &'a self,
        run_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<StoredRun>, CheckpointError>> {
        Box::pin(async move {
            let Some(mut stored) = self.inner.load_journal(run_id).await? else {
                return Ok(None);
            };
            for record in &mut stored.records {
                record.run_id = "intruder".into();
            }
            if self.snapshot_too {
                stored.snapshot.run_id = "intruder".into();
            }
            Ok(Some(stored))
        })
    }
}

/// On resume, a snapshot or a record of the journal that names another run is refused as
/// corrupt, as a gap or a repeat in its sequence is: nothing of it is applied or run.
#[tokio::test]
async fn a_journal_record_naming_another_run_is_refused_as_corrupt_on_resume() {
    for snapshot_too in [false, true] {
        let store = Arc::new(MixedUp {
            inner: MemoryCheckpoints::new(),
            snapshot_too,
        });
        let wiped = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&wiped);
        let wipe = ToolDef::new("wipe", "Wipes.", move |_: serde_json::Value| {
            counted.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, std::io::Error>("wiped") }
        })
        .requires_approval(true);
        let model = agent_errors::testing::ScriptedModel::new()
            .tool_call("lookup", "{}")
            .tool_call("wipe", "{}")
            .text("done");
        let agent = Agent::builder("mixed")
            .model(model.clone())
            .tool(agent_errors::testing::echo_tool("lookup"))
            .tool(wipe)
            .shared_checkpoints(Arc::clone(&store) as Arc<dyn CheckpointStore>)
            .build()
            .unwrap();
        let first = agent
            .run_with("go", RunOptions::new().run_id("victim"))
            .await;
        assert!(
            matches!(first.result, Err(RunError::WaitingForPerson { .. })),
            "{:?}",
            first.result
        );
        let stored = store.inner.load_journal("victim").await.unwrap().unwrap();
        assert!(!stored.records.is_empty(), "the run journaled its steps");

        let answer = RunOptions::new().answer("call_2", Decision::Approve);
        let resumed = agent.resume("victim", answer).await;
        match resumed.result {
            Err(RunError::Checkpoint(CheckpointError::Corrupt { run_id, reason })) => {
                assert_eq!(run_id, "victim");
                assert!(reason.contains("another run (intruder)"), "{reason}");
            }
            other => panic!("expected the mixed-up journal refused, got {other:?}"),
        }
        assert_eq!(wiped.load(Ordering::SeqCst), 0, "nothing of it ran");
    }
}
