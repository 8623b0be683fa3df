//! The tables (markdown) and the goal's verdict.

use std::fmt::Write as _;

use crate::faults::Mix;
use crate::metrics::{CellStats, Results};
use crate::tasks::Task;

/// The suite, a row per task: its tool calls in order.
pub(crate) fn suite_table(suite: &[Task]) -> String {
    let mut out = String::from("| task | tool calls |\n|---|---|\n");
    for task in suite {
        let calls: Vec<String> = task
            .steps
            .iter()
            .map(|s| match s.alternative {
                Some(alternative) => format!("`{}` (or `{alternative}`)", s.tool),
                None => format!("`{}`", s.tool),
            })
            .collect();
        let down = match task.always_down {
            Some(tool) => format!("; `{tool}` is always down"),
            None => String::new(),
        };
        let _ = writeln!(out, "| {} | {}{down} |", task.name, calls.join(", "));
    }
    out
}

/// Which columns to print: the real time is measured, so a table meant to be compared
/// between two runs leaves it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Columns {
    All,
    Deterministic,
}

/// One markdown table per mix: a row per strategy and rate.
pub(crate) fn tables(results: &Results, mixes: &[Mix], columns: Columns) -> String {
    let mut out = String::new();
    for &mix in mixes {
        let _ = writeln!(out, "### {}\n", mix.label());
        out.push_str(
            "| strategy | fault rate | success | wrong answers | model calls / task (x fault-free) \
             | tokens / task (x fault-free) | wasted tool calls | duplicate effects | secrets shown \
             | virtual s / task |",
        );
        out.push_str(if columns == Columns::All {
            " CPU us / task |\n"
        } else {
            "\n"
        });
        out.push_str("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
        out.push_str(if columns == Columns::All {
            "--:|\n"
        } else {
            "\n"
        });
        for cell in results.cells.iter().filter(|c| c.mix == mix) {
            let Some(free) = results.fault_free(cell.strategy) else {
                continue;
            };
            let _ = write!(
                out,
                "| {} | {:.0}% | {}",
                cell.strategy,
                cell.rate * 100.0,
                row(&cell.stats, free)
            );
            if columns == Columns::All {
                let _ = write!(out, " {:.0} |", cell.stats.cpu_micros_per_task());
            }
            out.push('\n');
        }
        out.push('\n');
    }
    out
}

fn row(stats: &CellStats, free: &CellStats) -> String {
    format!(
        "{:.1}% | {} | {:.2} ({:.2}x) | {:.0} ({:.2}x) | {} | {} | {} | {:.1} |",
        stats.success_rate() * 100.0,
        stats.wrong,
        stats.model_calls_per_task(),
        ratio(stats.model_calls_per_task(), free.model_calls_per_task()),
        stats.tokens_per_task(),
        ratio(stats.tokens_per_task(), free.tokens_per_task()),
        stats.wasted_calls,
        stats.duplicate_effects,
        stats.secrets_shown,
        stats.virtual_secs_per_task(),
    )
}

fn ratio(value: f64, base: f64) -> f64 {
    if base == 0.0 { 0.0 } else { value / base }
}

/// The goal, checked against the transient mix at 20%: the tuned strategy finishes >= 99% of
/// tasks with <= 1.3x the fault-free model calls, no wasted calls, no duplicate effects, no
/// secrets shown, and beats every other strategy on success at equal or lower model calls.
pub(crate) fn goal(results: &Results, tuned: &str) -> String {
    let rate = 0.20;
    let (Some(cell), Some(free)) = (
        results.cell(tuned, Mix::Transient, rate),
        results.fault_free(tuned),
    ) else {
        return "The goal's cell (transient tool failures at 20%) was not run.\n".to_owned();
    };
    let calls = ratio(cell.model_calls_per_task(), free.model_calls_per_task());
    let mut checks = vec![
        (
            format!("success {:.1}% (>= 99%)", cell.success_rate() * 100.0),
            cell.success_rate() >= 0.99,
        ),
        (
            format!("model calls {calls:.2}x the fault-free run (<= 1.3x)"),
            calls <= 1.3,
        ),
        (
            format!("{} retries of permanent failures (0)", cell.wasted_calls),
            cell.wasted_calls == 0,
        ),
        (
            format!("{} duplicate side effects (0)", cell.duplicate_effects),
            cell.duplicate_effects == 0,
        ),
        (
            format!("{} secrets shown (0)", cell.secrets_shown),
            cell.secrets_shown == 0,
        ),
    ];
    for other in results.strategies().into_iter().filter(|s| *s != tuned) {
        let Some(theirs) = results.cell(other, Mix::Transient, rate) else {
            continue;
        };
        let beaten = cell.success_rate() > theirs.success_rate()
            || (cell.success_rate() == theirs.success_rate()
                && cell.model_calls_per_task() <= theirs.model_calls_per_task());
        checks.push((
            format!(
                "beats `{other}`: {:.1}% at {:.2} calls vs {:.1}% at {:.2}",
                cell.success_rate() * 100.0,
                cell.model_calls_per_task(),
                theirs.success_rate() * 100.0,
                theirs.model_calls_per_task()
            ),
            beaten,
        ));
    }
    let met = checks.iter().all(|(_, ok)| *ok);
    let mut out = format!(
        "Goal at a 20% transient fault rate, `{tuned}`: **{}**\n\n",
        if met { "met" } else { "not met" }
    );
    for (check, ok) in checks {
        let _ = writeln!(out, "- [{}] {check}", if ok { "x" } else { " " });
    }
    out
}
