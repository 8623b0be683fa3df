//! The recovery benchmark: the same task suite under the same injected faults, through several
//! recovery strategies, on the testing kit's scripted model and fault-injecting tools with
//! tokio's paused clock. Prints a markdown table per fault mix and the goal's verdict, and
//! writes the plots into `docs/recovery/`.
//!
//! ```sh
//! cargo run --release -p agent-errors-recovery-bench -- --seed 1
//! ```
//!
//! Options: `--seed N` (default 1), `--runs-per-task N` (default 40), `--out DIR` (default the
//! repository's `docs/recovery`), `--no-plots`, `--no-cpu` (leave out the measured CPU time,
//! the one column that is not the same for a seed, to diff two runs), `--structured-only` (only
//! the bad-structured-answers mix, which has a task and strategies of its own),
//! `--compact-failures` (run only this library's strategies, each with and without compacting
//! old failures in what the model is sent, side by side).

mod bench;
#[cfg(feature = "bfcl")]
mod bfcl;
mod faults;
mod metrics;
mod model;
mod plots;
mod report;
mod strategies;
mod structured;
mod tasks;
mod world;

use std::path::PathBuf;
use std::process::ExitCode;

use crate::bench::{BenchConfig, run_all};
use crate::faults::{Mix, RATES};
use crate::plots::Measure;
use crate::report::Columns;
use crate::strategies::{LibraryTuned, Strategy, compaction_pairs, every_strategy, preset_trio};

/// The command line did not make sense.
#[derive(Debug, thiserror::Error)]
enum ArgsError {
    #[error("`{0}` needs a value")]
    Missing(String),
    #[error("`{flag}` wants a positive whole number, not `{value}`")]
    NotANumber { flag: String, value: String },
    #[error(
        "unknown option `{0}` (expected --seed, --runs-per-task, --out, --no-plots, --no-cpu, \
         --structured-only, --compact-failures, --preset, --misses)"
    )]
    Unknown(String),
}

struct Args {
    seed: u64,
    runs_per_task: u64,
    out: PathBuf,
    plots: bool,
    columns: Columns,
    compaction: bool,
    preset: bool,
    structured_only: bool,
    misses: bool,
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Args, ArgsError> {
    let mut parsed = Args {
        seed: 1,
        runs_per_task: 40,
        out: PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/recovery")),
        plots: true,
        columns: Columns::All,
        compaction: false,
        preset: false,
        structured_only: false,
        misses: false,
    };
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| ArgsError::Missing(flag.clone()));
        let number = |value: String| {
            value
                .parse::<u64>()
                .ok()
                .filter(|n| *n > 0 || flag == "--seed")
                .ok_or_else(|| ArgsError::NotANumber {
                    flag: flag.clone(),
                    value,
                })
        };
        match flag.as_str() {
            "--seed" => parsed.seed = number(value()?)?,
            "--runs-per-task" => parsed.runs_per_task = number(value()?)?,
            "--out" => parsed.out = PathBuf::from(value()?),
            "--no-plots" => parsed.plots = false,
            "--no-cpu" => parsed.columns = Columns::Deterministic,
            "--compact-failures" => parsed.compaction = true,
            "--preset" => parsed.preset = true,
            "--structured-only" => parsed.structured_only = true,
            "--misses" => parsed.misses = true,
            _ => return Err(ArgsError::Unknown(flag)),
        }
    }
    Ok(parsed)
}

fn main() -> ExitCode {
    if std::env::args().nth(1).as_deref() == Some("--bfcl") {
        return bfcl_main();
    }
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("recovery-bench: {e}");
            return ExitCode::from(2);
        }
    };
    let config = BenchConfig {
        seed: args.seed,
        runs_per_task: args.runs_per_task,
        mixes: Mix::EVERY.to_vec(),
        rates: RATES.to_vec(),
        misses: args.misses,
    };
    let suite = tasks::suite();
    // Its own task and strategies: what is done with a bad final answer, not with a failure.
    let structured_runs = args.runs_per_task * suite.len() as u64;
    if args.structured_only {
        print!("{}", structured::table(config.seed, structured_runs));
        return ExitCode::SUCCESS;
    }
    let started = std::time::Instant::now();
    let strategies = if args.compaction {
        compaction_pairs()
    } else if args.preset {
        preset_trio()
    } else {
        every_strategy()
    };
    let results = run_all(&strategies, &suite, &config);
    println!(
        "seed {}, {} tasks x {} runs per cell, {} cells, {:.1} s\n",
        config.seed,
        suite.len(),
        config.runs_per_task,
        results.cells.len(),
        started.elapsed().as_secs_f64()
    );
    println!("{}", report::suite_table(&suite));
    print!("{}", report::tables(&results, &config.mixes, args.columns));
    print!("{}", report::goal(&results, LibraryTuned::default().name()));
    print!("\n{}", structured::table(config.seed, structured_runs));
    if args.plots {
        if let Err(e) = write_plots(&results, &config.mixes, &args.out) {
            eprintln!("recovery-bench: {e}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

/// The BFCL multi-turn grid, in a build with the `bfcl` feature.
fn bfcl_main() -> ExitCode {
    #[cfg(feature = "bfcl")]
    return bfcl::main(std::env::args().skip(2));
    #[cfg(not(feature = "bfcl"))]
    {
        eprintln!("recovery-bench: `--bfcl` needs the `bfcl` feature (`--features bfcl`)");
        ExitCode::from(2)
    }
}

#[derive(Debug, thiserror::Error)]
enum OutputError {
    #[error(transparent)]
    Plot(#[from] plots::PlotError),
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

fn write_plots(
    results: &metrics::Results,
    mixes: &[Mix],
    out: &std::path::Path,
) -> Result<(), OutputError> {
    let write = |path: PathBuf, text: String| {
        std::fs::write(&path, text).map_err(|source| OutputError::Write { path, source })
    };
    std::fs::create_dir_all(out).map_err(|source| OutputError::Write {
        path: out.to_owned(),
        source,
    })?;
    write(
        out.join("success.svg"),
        plots::svg(results, mixes, Measure::SuccessRate)?,
    )?;
    write(
        out.join("model_calls.svg"),
        plots::svg(results, mixes, Measure::ModelCallsPerTask)?,
    )?;
    let shown = out.canonicalize().unwrap_or_else(|_| out.to_owned());
    println!("\nplots written to {}", shown.display());
    Ok(())
}
