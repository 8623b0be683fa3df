//! One task run: the agent over the server's tools, BFCL's turns one run each, then BFCL's
//! checker; and the grid of cells, spread over a few server processes.

use std::collections::VecDeque;
use std::sync::Mutex;

use agent_errors::{Message, RunOptions};

use super::model::ReplayModel;
use super::server::{ServerError, Worker};
use super::strategies::BfclStrategy;

/// One cell of the grid.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Cell {
    pub(crate) strategy: BfclStrategy,
    pub(crate) rate: f64,
    pub(crate) dedup: bool,
}

/// What one task run came to.
#[derive(Debug, Clone)]
pub(crate) struct TaskRecord {
    pub(crate) task: usize,
    pub(crate) passed: bool,
    pub(crate) duplicates: u64,
    pub(crate) tool_calls: u64,
    pub(crate) late_answers: u64,
    pub(crate) model_calls: u64,
    /// Why the checker failed it, and how each run of its turns that did not finish ended.
    pub(crate) why: Option<String>,
    pub(crate) run_errors: Vec<String>,
    pub(crate) duplicate_detail: Vec<serde_json::Value>,
}

/// Why a task could not be run at all (not a failed task: a broken bench).
#[derive(Debug, thiserror::Error)]
pub(crate) enum RunError {
    #[error(transparent)]
    Server(#[from] ServerError),
    #[error("the agent was not built: {0}")]
    Agent(String),
}

/// Runs task `task` once in `cell`.
pub(crate) async fn run_task(
    worker: &Worker,
    cell: Cell,
    task: usize,
    seed: u64,
) -> Result<TaskRecord, RunError> {
    let info = worker.reset(task, seed, cell.rate, cell.dedup).await?;
    let turns = info
        .questions
        .iter()
        .cloned()
        .zip(info.ground_truth)
        .collect();
    let model = ReplayModel::new(turns);
    let agent = cell
        .strategy
        .agent(
            worker.tools(&info.tools),
            model.clone(),
            cell.dedup,
            worker.reconciler(),
        )
        .map_err(|e| RunError::Agent(e.to_string()))?;
    let mut history = Vec::new();
    let mut run_errors = Vec::new();
    for (turn, question) in info.questions.iter().enumerate() {
        model.set_turn(turn);
        history.push(Message::user(question.clone()));
        let options = RunOptions::new().run_id(format!("bfcl{task}t{turn}"));
        let outcome = agent.run_conversation(history, options).await;
        if let Err(e) = &outcome.result {
            run_errors.push(format!("turn {turn}: {e}"));
        }
        history = outcome.transcript;
        worker.turn_end().await?;
    }
    let score = worker.score().await?;
    Ok(TaskRecord {
        task,
        passed: score.passed,
        duplicates: score.duplicates,
        tool_calls: score.tool_calls,
        late_answers: score.late_answers,
        model_calls: model.calls(),
        why: score.why,
        run_errors,
        duplicate_detail: score.duplicate_detail,
    })
}

/// Every run of every cell, `workers` server processes at a time; records in cell order, then
/// task order.
pub(crate) async fn run_grid(
    workers: &[Worker],
    cells: &[Cell],
    tasks: &[usize],
    seed: u64,
) -> Result<Vec<Vec<TaskRecord>>, RunError> {
    let jobs: VecDeque<(usize, usize)> = (0..cells.len())
        .flat_map(|c| tasks.iter().map(move |&t| (c, t)))
        .collect();
    let total = jobs.len();
    let jobs = Mutex::new(jobs);
    let done: Mutex<Vec<(usize, TaskRecord)>> = Mutex::new(Vec::with_capacity(total));
    let work = workers.iter().map(|worker| async {
        loop {
            let Some((c, t)) = jobs.lock().unwrap_or_else(|p| p.into_inner()).pop_front() else {
                return Ok::<(), RunError>(());
            };
            let record = run_task(worker, cells[c], t, seed).await?;
            let mut done = done.lock().unwrap_or_else(|p| p.into_inner());
            done.push((c, record));
            if done.len() % 200 == 0 {
                eprintln!("bfcl: {} of {total} task runs", done.len());
            }
        }
    });
    for result in futures_util::future::join_all(work).await {
        result?;
    }
    let mut by_cell = vec![Vec::new(); cells.len()];
    for (c, record) in done.into_inner().unwrap_or_else(|p| p.into_inner()) {
        by_cell[c].push(record);
    }
    for records in &mut by_cell {
        records.sort_by_key(|r| r.task);
    }
    Ok(by_cell)
}
