//! BFCL v4 multi-turn (`multi_turn_base`) as a yardstick nobody here wrote: BFCL's tasks,
//! simulators and checker (from the `bfcl-eval` package, installed by the bench itself), served
//! as MCP tools by a server of ours that injects faults and honours idempotency keys; this
//! library's agent over its own MCP client; a scripted model replaying BFCL's ground truth.
//!
//! ```sh
//! cargo run -p agent-errors-recovery-bench --features bfcl -- --bfcl --seed 1
//! ```
//!
//! Options: `--seed N` (default 1), `--tasks N` (N of the 200, spread evenly over them), `--workers N` (server
//! processes run at once, default 32), `--misses` (why each strategy's failed tasks failed), `--no-plots` (no
//! `docs/recovery/bfcl.svg`).

mod model;
mod plot;
mod report;
mod run;
mod server;
mod strategies;

use std::process::ExitCode;

use run::Cell;
use strategies::BfclStrategy;

/// The fault rates of the grid.
const RATES: [f64; 3] = [0.0, 0.1, 0.3];

/// The command line did not make sense.
#[derive(Debug, thiserror::Error)]
enum ArgsError {
    #[error("`{0}` needs a whole number")]
    NotANumber(String),
    #[error("unknown option `{0}` (expected --seed, --tasks, --workers, --misses, --no-plots)")]
    Unknown(String),
}

struct Args {
    seed: u64,
    tasks: Option<usize>,
    workers: usize,
    misses: bool,
    plots: bool,
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Args, ArgsError> {
    let mut parsed = Args {
        seed: 1,
        tasks: None,
        workers: 32,
        misses: false,
        plots: true,
    };
    while let Some(flag) = args.next() {
        let mut number = || {
            args.next()
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or_else(|| ArgsError::NotANumber(flag.clone()))
        };
        match flag.as_str() {
            "--seed" => parsed.seed = number()?,
            "--tasks" => parsed.tasks = Some(number()? as usize),
            "--workers" => parsed.workers = (number()? as usize).max(1),
            "--misses" => parsed.misses = true,
            "--no-plots" => parsed.plots = false,
            _ => return Err(ArgsError::Unknown(flag)),
        }
    }
    Ok(parsed)
}

/// Every cell: each strategy at each rate, the server deduplicating by key and not.
fn cells() -> Vec<Cell> {
    let mut cells = Vec::new();
    for strategy in BfclStrategy::EVERY {
        for rate in RATES {
            for dedup in [true, false] {
                cells.push(Cell {
                    strategy,
                    rate,
                    dedup,
                });
            }
        }
    }
    cells
}

/// Runs the BFCL grid and prints its table.
pub(crate) fn main(args: impl Iterator<Item = String>) -> ExitCode {
    let args = match parse_args(args) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("recovery-bench --bfcl: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("recovery-bench --bfcl: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(bench(&args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("recovery-bench --bfcl: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn bench(args: &Args) -> Result<(), run::RunError> {
    let python = server::install()?;
    let started = std::time::Instant::now();
    let mut workers = Vec::with_capacity(args.workers);
    for _ in 0..args.workers {
        workers.push(server::Worker::start(&python).await?);
    }
    let all = workers[0].reset(0, args.seed, 0.0, true).await?.tasks;
    // A subset is spread over the suite, which is ordered by simulator.
    let n = args.tasks.unwrap_or(all).clamp(1, all);
    let tasks: Vec<usize> = (0..n).map(|i| i * all / n).collect();
    let cells = cells();
    let records = run::run_grid(&workers, &cells, &tasks, args.seed).await?;
    for worker in &workers {
        worker.client.shutdown().await;
    }
    println!(
        "BFCL v4 multi_turn_base: seed {}, {} tasks per cell, {} cells, {:.0} s\n",
        args.seed,
        tasks.len(),
        cells.len(),
        started.elapsed().as_secs_f64()
    );
    print!("{}", report::table(&cells, &records));
    print!("{}", report::goal(&cells, &records));
    if args.misses {
        print!("{}", report::misses(&cells, &records));
    }
    if args.plots {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/recovery/bfcl.svg");
        match plot::svg(&cells, &records).map(|svg| std::fs::write(path, svg)) {
            Ok(Ok(())) => println!("\nplot written to docs/recovery/bfcl.svg"),
            Ok(Err(e)) => eprintln!("recovery-bench --bfcl: writing {path}: {e}"),
            Err(e) => eprintln!("recovery-bench --bfcl: drawing the plot: {e}"),
        }
    }
    Ok(())
}
