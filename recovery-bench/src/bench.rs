//! Runs the suite: every strategy, every mix, every rate, the same task runs for each.

use std::sync::Arc;

use crate::faults::{FaultPlan, Mix};
use crate::metrics::{Cell, CellStats, Results, TaskRecord};
use crate::model::{ReactingModel, Role};
use crate::strategies::{Strategy, TaskEnv};
use crate::tasks::Task;
use crate::world::World;

/// What to run.
#[derive(Debug, Clone)]
pub(crate) struct BenchConfig {
    pub(crate) seed: u64,
    /// Runs of each task per cell, each with its own faults.
    pub(crate) runs_per_task: u64,
    pub(crate) mixes: Vec<Mix>,
    pub(crate) rates: Vec<f64>,
    /// Print every run that did not reach the expected answer: how it ended and the last
    /// messages its model was sent (`--misses`).
    pub(crate) misses: bool,
}

/// Runs one task once under one strategy and accounts for it.
pub(crate) async fn run_task(
    strategy: &dyn Strategy,
    task: Arc<Task>,
    plan: FaultPlan,
) -> TaskRecord {
    // The library draws its backoff jitter (and a run's id) from this thread's generator: seeded
    // per run, the virtual time is the same for a seed too. The runtime has one thread.
    fastrand::seed(plan.seed ^ plan.instance.rotate_left(32));
    let world = World::new(Arc::clone(&task), plan);
    let env = TaskEnv {
        tools: world.tools(),
        primary: ReactingModel::new(Arc::clone(&task), plan, Role::Primary),
        backup: ReactingModel::new(Arc::clone(&task), plan, Role::Backup),
        run_id: format!("run-{}", plan.instance),
        task: Arc::clone(&task),
        world: Arc::clone(&world),
    };
    let cpu_start = std::time::Instant::now();
    let clock_start = tokio::time::Instant::now();
    let end = strategy.run(&env).await;
    let virtual_time = clock_start.elapsed();
    let cpu_time = cpu_start.elapsed();
    let (success, wrong) = TaskRecord::judge(&end, &task.expected_answer());
    if !success && MISSES.load(std::sync::atomic::Ordering::Relaxed) {
        print_miss(strategy, &task, &plan, &end, &env);
    }
    TaskRecord {
        success,
        wrong,
        model_calls: (env.primary.calls() + env.backup.calls()) as u64,
        tokens: env.primary.tokens() + env.backup.tokens(),
        tool_calls: env.tools.iter().map(|t| u64::from(t.calls())).sum(),
        wasted_calls: u64::from(world.wasted_calls()),
        duplicate_effects: u64::from(world.duplicate_effects()),
        repeats_answered: u64::from(world.repeats_answered()),
        secrets_shown: (env.primary.secrets_seen().len() + env.backup.secrets_seen().len()) as u64,
        virtual_time,
        cpu_time,
    }
}

/// Whether `run_task` prints its misses: set once from `BenchConfig::misses` by `run_all`.
static MISSES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// One missed run, for `--misses`: where it ran, how it ended, what its model last read.
fn print_miss(
    strategy: &dyn Strategy,
    task: &Task,
    plan: &FaultPlan,
    end: &crate::strategies::RunEnd,
    env: &TaskEnv,
) {
    println!(
        "miss: {} | {:?} {:.0}% | {} #{} | {:?}",
        strategy.name(),
        plan.mix,
        plan.rate * 100.0,
        task.name,
        plan.instance,
        end
    );
    for line in env.primary.last_messages(6) {
        println!("    {line}");
    }
}

/// Every run of one cell: each task `runs_per_task` times.
pub(crate) async fn run_cell(
    strategy: &dyn Strategy,
    suite: &[Arc<Task>],
    config: &BenchConfig,
    mix: Mix,
    rate: f64,
) -> CellStats {
    let mut stats = CellStats::default();
    for (t, task) in suite.iter().enumerate() {
        for run in 0..config.runs_per_task {
            let plan = FaultPlan {
                seed: config.seed,
                instance: (t as u64) * 1_000_000 + run,
                mix,
                rate,
            };
            stats.add(&run_task(strategy, Arc::clone(task), plan).await);
        }
    }
    stats
}

/// The whole benchmark, on a single-threaded runtime whose clock is paused: every backoff
/// and `Retry-After` is virtual time, so hours of waiting cost milliseconds.
pub(crate) fn run_all(
    strategies: &[Box<dyn Strategy>],
    suite: &[Task],
    config: &BenchConfig,
) -> Results {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime with a paused clock builds");
    MISSES.store(config.misses, std::sync::atomic::Ordering::Relaxed);
    let suite: Vec<Arc<Task>> = suite.iter().cloned().map(Arc::new).collect();
    let mut results = Results::default();
    for strategy in strategies {
        // Every mix at rate 0 is the same fault-free run: run it once.
        let mut fault_free = None;
        for &mix in &config.mixes {
            for &rate in &config.rates {
                let stats = if rate == 0.0 {
                    fault_free
                        .get_or_insert_with(|| {
                            runtime.block_on(run_cell(strategy.as_ref(), &suite, config, mix, rate))
                        })
                        .clone()
                } else {
                    runtime.block_on(run_cell(strategy.as_ref(), &suite, config, mix, rate))
                };
                results.cells.push(Cell {
                    strategy: strategy.name(),
                    mix,
                    rate,
                    stats,
                });
            }
        }
    }
    results
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::Mix;
    use crate::report::{Columns, tables};
    use crate::strategies::{
        Baseline, BaselineKind, LibraryDefaults, LibraryTuned, RigAgent, RigKind, every_strategy,
    };
    use crate::tasks::suite;

    fn task(name: &str) -> Arc<Task> {
        Arc::new(
            suite()
                .into_iter()
                .find(|t| t.name == name)
                .expect("a task of the suite"),
        )
    }

    /// The first run of task `t` whose plan passes `wanted`.
    fn plan_where(mix: Mix, rate: f64, wanted: impl Fn(&FaultPlan) -> bool) -> FaultPlan {
        (0..10_000)
            .map(|instance| FaultPlan {
                seed: 1,
                instance,
                mix,
                rate,
            })
            .find(|plan| wanted(plan))
            .expect("some plan among the first 10,000 fits")
    }

    #[tokio::test(start_paused = true)]
    async fn a_strategy_that_never_retries_makes_exactly_one_call_per_step() {
        let no_recovery = Baseline(BaselineKind::NoRecovery);
        for task in suite().into_iter().map(Arc::new) {
            let clean = run_task(&no_recovery, Arc::clone(&task), FaultPlan::clean(1, 0)).await;
            let steps = if task.always_down.is_some() {
                1
            } else {
                task.steps.len() as u64
            };
            assert_eq!(clean.tool_calls, steps, "{}", task.name);
            assert_eq!(
                clean.model_calls,
                steps + u64::from(task.always_down.is_none()),
                "{}",
                task.name
            );
            for instance in 0..8 {
                let plan = FaultPlan {
                    seed: 1,
                    instance,
                    mix: Mix::All,
                    rate: 0.5,
                };
                let record = run_task(&no_recovery, Arc::clone(&task), plan).await;
                // One tool call per model turn, and the run stops at the first failure.
                assert!(
                    record.tool_calls <= task.steps.len() as u64,
                    "{}",
                    task.name
                );
                assert!(record.tool_calls <= record.model_calls, "{}", task.name);
                assert!(record.model_calls <= record.tool_calls + 1, "{}", task.name);
                assert_eq!(record.wasted_calls, 0);
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_planted_secret_is_counted_when_it_reaches_the_model() {
        let page = task("summarise a page");
        let plan = plan_where(Mix::Permanent, 0.5, |p| {
            p.permanent(0) == Some(crate::faults::Permanent::NotFound)
        });
        let raw = run_task(
            &Baseline(BaselineKind::ErrorsToModel),
            Arc::clone(&page),
            plan,
        )
        .await;
        assert_eq!(
            raw.secrets_shown, 1,
            "the 404's text, key and all, was shown once"
        );
        let redacted = run_task(&LibraryDefaults::default(), page, plan).await;
        assert_eq!(redacted.secrets_shown, 0);
        assert_eq!(
            redacted.model_calls, raw.model_calls,
            "the library showed the error too"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_applied_twice_is_counted_as_a_duplicate() {
        let mail = task("order status by email");
        let steps = mail.steps.len();
        // The process dies right after the email went out, before its answer was recorded.
        let plan = plan_where(Mix::Crash, 1.0, |p| p.crash_step(steps) == Some(1));
        let restarted =
            run_task(&Baseline(BaselineKind::NoRecovery), Arc::clone(&mail), plan).await;
        assert!(restarted.success);
        assert_eq!(
            restarted.duplicate_effects, 1,
            "the restart sent the email again"
        );
        let resumed = run_task(&LibraryTuned::default(), mail, plan).await;
        assert!(resumed.success);
        assert_eq!(
            resumed.duplicate_effects, 0,
            "the resumed call kept its idempotency key"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_rig_agent_on_its_defaults_makes_one_tool_call_per_model_turn() {
        let errors_to_model = Baseline(BaselineKind::ErrorsToModel);
        let (rig, guarded) = (RigAgent(RigKind::Defaults), RigAgent(RigKind::Guarded));
        let mut retried_below_the_model = 0;
        for task in suite().into_iter().map(Arc::new) {
            // rig's request, turned into ours, is the transcript our loop sends: the same
            // messages at the same places, so the same calls and tokens.
            let clean = FaultPlan::clean(1, 0);
            let ours = run_task(&errors_to_model, Arc::clone(&task), clean).await;
            let theirs = run_task(&rig, Arc::clone(&task), clean).await;
            assert!(theirs.success, "{}", task.name);
            if task.always_down.is_none() {
                let steps = task.steps.len() as u64;
                assert_eq!(
                    (theirs.tool_calls, theirs.model_calls),
                    (steps, steps + 1),
                    "{}: one call per step, then the answer",
                    task.name
                );
            }
            assert_eq!(
                (theirs.model_calls, theirs.tokens, theirs.tool_calls),
                (ours.model_calls, ours.tokens, ours.tool_calls),
                "{}",
                task.name
            );
            for instance in 0..8 {
                let plan = FaultPlan {
                    seed: 1,
                    instance,
                    mix: Mix::Transient,
                    rate: 0.5,
                };
                // No model faults in this mix: every turn but the last asks for one call, and
                // rig runs it once, whatever it answers.
                let record = run_task(&rig, Arc::clone(&task), plan).await;
                assert_eq!(record.tool_calls, record.model_calls - 1, "{}", task.name);
                let ours = run_task(&errors_to_model, Arc::clone(&task), plan).await;
                assert_eq!(record.secrets_shown, ours.secrets_shown, "{}", task.name);
                let guarded = run_task(&guarded, Arc::clone(&task), plan).await;
                if guarded.tool_calls > guarded.model_calls - 1 {
                    retried_below_the_model += 1;
                }
            }
        }
        assert!(
            retried_below_the_model > 0,
            "with our policies, rig's tools are retried below the model"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_planted_secret_reaching_the_model_through_rigs_loop_is_counted() {
        let page = task("summarise a page");
        let plan = plan_where(Mix::Permanent, 0.5, |p| {
            p.permanent(0) == Some(crate::faults::Permanent::NotFound)
        });
        let raw = run_task(&RigAgent(RigKind::Defaults), Arc::clone(&page), plan).await;
        assert_eq!(
            raw.secrets_shown, 1,
            "the 404's text, key and all, went back to the model as the tool's feedback"
        );
        let guarded = run_task(&RigAgent(RigKind::Guarded), page, plan).await;
        assert_eq!(guarded.secrets_shown, 0);
        assert_eq!(
            guarded.model_calls, raw.model_calls,
            "the guarded tool showed the error too, redacted"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_the_model_asks_for_again_is_applied_once_by_its_effect_key() {
        let refund = task("refund review, six calls");
        let fault_free = run_task(
            &LibraryTuned::default(),
            Arc::clone(&refund),
            FaultPlan::clean(1, 4),
        )
        .await;
        // In this plan a write's keyed tries apply its effect and lose the answer (a 504 after
        // the effect), the rest fail before the service, the failure is shown to the model, and
        // the model asks for the write again: a new call, with a new call key.
        let plan = FaultPlan {
            seed: 1,
            instance: 4,
            mix: Mix::Transient,
            rate: 0.2,
        };
        let record = run_task(&LibraryTuned::default(), refund, plan).await;
        assert!(record.success);
        assert_eq!(
            record.model_calls,
            fault_free.model_calls + 1,
            "the model asked for the write again"
        );
        assert_eq!(
            record.duplicate_effects, 0,
            "the repeat carried the same effect key and the service answered it from its record"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_guarded_rig_agents_writes_send_their_effect_key_and_are_applied_once() {
        // At this rate our ladder retries writes whose answer was lost after the effect, and
        // the model asks for some again: without a key each of those is applied twice.
        let guarded = RigAgent(RigKind::Guarded);
        let mut repeats_answered = 0;
        for task in suite().into_iter().map(Arc::new) {
            for instance in 0..8 {
                let plan = FaultPlan {
                    seed: 1,
                    instance,
                    mix: Mix::Transient,
                    rate: 0.5,
                };
                let record = run_task(&guarded, Arc::clone(&task), plan).await;
                assert_eq!(
                    record.duplicate_effects, 0,
                    "{} #{instance}: the guarded tools send their effect's key",
                    task.name
                );
                repeats_answered += record.repeats_answered;
            }
        }
        assert!(
            repeats_answered > 0,
            "these plans repeat writes whose answer was lost, and the keys catch them"
        );
    }

    /// The results without the measured real time: what a seed must reproduce exactly.
    fn deterministic(mut results: Results) -> Results {
        for cell in &mut results.cells {
            cell.stats.cpu_time = std::time::Duration::ZERO;
        }
        results
    }

    #[test]
    fn the_same_seed_gives_the_same_table() {
        let suite: Vec<Task> = suite().into_iter().take(4).collect();
        let mixes = [Mix::Transient, Mix::All];
        let config = |seed| BenchConfig {
            misses: false,
            seed,
            runs_per_task: 3,
            mixes: mixes.to_vec(),
            rates: vec![0.0, 0.5],
        };
        let run = |seed| deterministic(run_all(&every_strategy(), &suite, &config(seed)));
        let first = run(7);
        // To the nanosecond of virtual time: the library's backoff jitter is seeded too.
        let again = run(7);
        assert_eq!(first, again);
        assert_eq!(
            tables(&first, &mixes, Columns::Deterministic),
            tables(&again, &mixes, Columns::Deterministic)
        );
        assert_ne!(first, run(8), "the seed decides the faults");
    }
}
