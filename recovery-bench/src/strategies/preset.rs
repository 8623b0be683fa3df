//! This library's agent with the recommended preset: one line of policy, the tools declared for
//! what they are (lookups idempotent, the writes handing the call's idempotency key to their
//! service, which applies a key once), and a checkpoint store so a crash is resumed rather than
//! started again. Nothing tuned to the benchmark's faults: no fixer, no fallback tool, no breaker
//! or retry settings of its own. `P2` is the same on the two models the tuned strategy has, the
//! backup behind a `FallbackModel` with its defaults: the models a user has are not a policy, and
//! no policy can answer for a primary that is down for the whole task.

use std::sync::Arc;

use agent_errors::checkpoint::{CheckpointStore, MemoryCheckpoints};
use agent_errors::llm::FallbackModel;
use agent_errors::{Agent, RunOptions};
use futures_util::future::BoxFuture;

use super::library::{end_of, streamed};
use super::{RunEnd, Strategy, TaskEnv, until_crash};
use crate::tasks::WRITES;

/// `Agent::builder(..).recommended()`, tools declared honestly, a checkpoint store; with
/// `backup`, the backup model behind the primary.
pub(crate) struct LibraryPreset {
    pub(crate) backup: bool,
}

impl Strategy for LibraryPreset {
    fn name(&self) -> &'static str {
        if self.backup {
            "P2 preset, backup model"
        } else {
            "P agent-errors preset"
        }
    }

    fn run<'a>(&'a self, env: &'a TaskEnv) -> BoxFuture<'a, RunEnd> {
        Box::pin(async move {
            let store: Arc<dyn CheckpointStore> = Arc::new(MemoryCheckpoints::new());
            let mut resuming = false;
            loop {
                let agent = match preset_agent(env, Arc::clone(&store), self.backup) {
                    Ok(agent) => agent,
                    Err(e) => return Err(format!("agent not built: {e}")),
                };
                let options = RunOptions::new().run_id(env.run_id.clone());
                let run = streamed(options, |options| async {
                    if resuming {
                        agent.resume(env.run_id.clone(), options).await
                    } else {
                        agent.run_with(env.task.prompt, options).await
                    }
                });
                match until_crash(&env.world, run).await {
                    Some(outcome) => return end_of(outcome),
                    None => resuming = true,
                }
            }
        })
    }
}

fn preset_agent(
    env: &TaskEnv,
    store: Arc<dyn CheckpointStore>,
    backup: bool,
) -> Result<Agent, agent_errors::build::ConfigError> {
    // What the tools are: a lookup does no more the second time; a write sends its service the
    // call's key, and the service applies a key once.
    let tools = env.tools.iter().map(|t| {
        let tool = t.tool();
        if WRITES.contains(&tool.name()) {
            tool.keyed(true)
        } else {
            tool.idempotent(true)
        }
    });
    let builder = if backup {
        Agent::builder("bench").model(FallbackModel::new(env.primary.clone(), env.backup.clone()))
    } else {
        Agent::builder("bench").model(env.primary.clone())
    };
    builder
        .tools(tools)
        .recommended()
        .shared_checkpoints(store)
        .build()
}
