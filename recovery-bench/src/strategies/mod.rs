//! The recovery strategies compared, each a way to run one task to its end.
//!
//! A strategy gets the task's environment (the tools, behind their fault injectors, and the
//! models) and returns the run's answer or why it stopped. Adding one is one more type
//! implementing [`Strategy`] and one more entry in [`every_strategy`].

mod baseline;
mod library;
mod preset;
mod rig;

use std::future::Future;
use std::sync::Arc;

use agent_errors::testing::FaultyTool;
use futures_util::future::BoxFuture;

use crate::model::ReactingModel;
use crate::tasks::Task;
use crate::world::World;

pub(crate) use baseline::{Baseline, BaselineKind};
pub(crate) use library::{LibraryDefaults, LibraryTuned};
pub(crate) use preset::LibraryPreset;
pub(crate) use rig::{RigAgent, RigKind};

/// Everything one task run is made of.
pub(crate) struct TaskEnv {
    pub(crate) task: Arc<Task>,
    pub(crate) world: Arc<World>,
    pub(crate) tools: Vec<FaultyTool>,
    pub(crate) primary: ReactingModel,
    pub(crate) backup: ReactingModel,
    pub(crate) run_id: String,
}

/// How a run ended: the final answer, or why there was none.
pub(crate) type RunEnd = Result<String, String>;

/// One way to run a task.
pub(crate) trait Strategy: Send + Sync {
    /// The name in tables and plots.
    fn name(&self) -> &'static str;

    /// Runs the task to its end, surviving (or not) a crash of the process mid-run.
    fn run<'a>(&'a self, env: &'a TaskEnv) -> BoxFuture<'a, RunEnd>;
}

/// Every strategy, in table order.
pub(crate) fn every_strategy() -> Vec<Box<dyn Strategy>> {
    vec![
        Box::new(Baseline(BaselineKind::NoRecovery)),
        Box::new(Baseline(BaselineKind::ErrorsToModel)),
        Box::new(Baseline(BaselineKind::NaiveRetry)),
        Box::new(LibraryDefaults::default()),
        Box::new(LibraryTuned::default()),
        Box::new(LibraryPreset { backup: false }),
        Box::new(LibraryPreset { backup: true }),
        Box::new(RigAgent(RigKind::Defaults)),
        Box::new(RigAgent(RigKind::Guarded)),
    ]
}

/// Runs `run` until it ends or the process "dies" (`None`): the run's future is dropped
/// where it stands, as a killed process leaves it.
pub(crate) async fn until_crash<T>(world: &World, run: impl Future<Output = T>) -> Option<T> {
    tokio::select! {
        biased;
        out = run => Some(out),
        () = world.crash.fired() => None,
    }
}

/// Naive retry, this library's tuned strategy and its recommended preset, side by side.
pub(crate) fn preset_trio() -> Vec<Box<dyn Strategy>> {
    vec![
        Box::new(Baseline(BaselineKind::NaiveRetry)),
        Box::new(LibraryDefaults::default()),
        Box::new(LibraryTuned::default()),
        Box::new(LibraryPreset { backup: false }),
        Box::new(LibraryPreset { backup: true }),
    ]
}

/// This library's strategies with and without compacting old failures in what the model is
/// sent, side by side.
pub(crate) fn compaction_pairs() -> Vec<Box<dyn Strategy>> {
    vec![
        Box::new(LibraryDefaults::default()),
        Box::new(LibraryDefaults {
            compact_failures: true,
        }),
        Box::new(LibraryTuned::default()),
        Box::new(LibraryTuned {
            compact_failures: true,
        }),
    ]
}
