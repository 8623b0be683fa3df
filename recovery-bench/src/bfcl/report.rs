//! The BFCL tables: a row per strategy, rate and dedup; the goal's verdict; where the misses
//! came from.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::run::{Cell, TaskRecord};
use super::strategies::BfclStrategy;

fn pct(rate: f64) -> String {
    format!("{:.0}%", rate * 100.0)
}

fn passed(records: &[TaskRecord]) -> usize {
    records.iter().filter(|r| r.passed).count()
}

fn duplicates(records: &[TaskRecord]) -> u64 {
    records.iter().map(|r| r.duplicates).sum()
}

/// The markdown table.
pub(crate) fn table(cells: &[Cell], records: &[Vec<TaskRecord>]) -> String {
    let mut out = String::from(
        "| strategy | faults | server dedup | tasks passed | duplicate effects | tool calls | model calls | late answers |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    for (cell, records) in cells.iter().zip(records) {
        let n = records.len().max(1);
        let tool_calls: u64 = records.iter().map(|r| r.tool_calls).sum();
        let model_calls: u64 = records.iter().map(|r| r.model_calls).sum();
        let late: u64 = records.iter().map(|r| r.late_answers).sum();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} / {} ({:.1}%) | {} | {} | {} | {late} |",
            cell.strategy.name(),
            pct(cell.rate),
            if cell.dedup { "on" } else { "off" },
            passed(records),
            records.len(),
            100.0 * passed(records) as f64 / n as f64,
            duplicates(records),
            tool_calls,
            model_calls,
        );
    }
    out
}

fn find<'a>(
    cells: &[Cell],
    records: &'a [Vec<TaskRecord>],
    strategy: BfclStrategy,
    rate: f64,
    dedup: bool,
) -> Option<&'a [TaskRecord]> {
    cells
        .iter()
        .position(|c| c.strategy == strategy && c.rate == rate && c.dedup == dedup)
        .map(|i| records[i].as_slice())
}

/// The goal: at 10% and 30%, the preset (or, before it exists, the tuned strategy) passes at
/// least as many tasks as naive retry and tuned, with no duplicate effect, and at 10% with a
/// deduplicating server within 2 points of its own fault-free pass rate.
pub(crate) fn goal(cells: &[Cell], records: &[Vec<TaskRecord>]) -> String {
    let judged = BfclStrategy::judged();
    let mut out = format!("\nThe goal, for `{}`:\n", judged.name());
    for rate in [0.1, 0.3] {
        for dedup in [true, false] {
            let get = |s| find(cells, records, s, rate, dedup).unwrap_or(&[]);
            let mine = get(judged);
            let naive = passed(get(BfclStrategy::NaiveRetry));
            let tuned = passed(get(BfclStrategy::Tuned));
            let _ = writeln!(
                out,
                "- {} faults, dedup {}: {} passed against naive retry's {naive} and tuned's {tuned} ({}); {} duplicate effects ({})",
                pct(rate),
                if dedup { "on" } else { "off" },
                passed(mine),
                if passed(mine) >= naive.max(tuned) {
                    "met"
                } else {
                    "MISSED"
                },
                duplicates(mine),
                if duplicates(mine) == 0 {
                    "met"
                } else {
                    "MISSED"
                },
            );
        }
    }
    let rate_of = |rate| {
        let records = find(cells, records, judged, rate, true).unwrap_or(&[]);
        100.0 * passed(records) as f64 / records.len().max(1) as f64
    };
    let (clean, faulty) = (rate_of(0.0), rate_of(0.1));
    let _ = writeln!(
        out,
        "- 10% with dedup {faulty:.1}% against {clean:.1}% without faults ({})",
        if clean - faulty <= 2.0 {
            "met"
        } else {
            "MISSED"
        }
    );
    out
}

/// Why the failed tasks of each faulty cell failed: the first way a turn's run ended, or the
/// checker's verdict when every run finished; and which tools applied an effect twice.
pub(crate) fn misses(cells: &[Cell], records: &[Vec<TaskRecord>]) -> String {
    let mut out = String::from("\nMisses:\n");
    for (cell, records) in cells.iter().zip(records) {
        let mut why: BTreeMap<String, usize> = BTreeMap::new();
        for record in records.iter().filter(|r| !r.passed) {
            let label = match record.run_errors.first() {
                Some(error) => {
                    let error = error.split_once(": ").map_or(error.as_str(), |(_, e)| e);
                    format!("run ended: {}", error.chars().take(140).collect::<String>())
                }
                None => format!("checker: {}", record.why.as_deref().unwrap_or("?")),
            };
            *why.entry(label).or_default() += 1;
        }
        let mut twice: BTreeMap<String, u64> = BTreeMap::new();
        for record in records {
            for detail in &record.duplicate_detail {
                let tool = detail["tool"].as_str().unwrap_or("?").to_owned();
                *twice.entry(tool).or_default() += detail["extra"].as_u64().unwrap_or(0);
            }
        }
        if why.is_empty() && twice.is_empty() {
            continue;
        }
        let _ = writeln!(
            out,
            "- {} at {}, dedup {}:",
            cell.strategy.name(),
            pct(cell.rate),
            if cell.dedup { "on" } else { "off" }
        );
        let mut why: Vec<_> = why.into_iter().collect();
        why.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
        for (label, n) in why {
            let _ = writeln!(out, "  - {n}: {label}");
        }
        for (tool, n) in twice {
            let _ = writeln!(out, "  - effect applied twice: `{tool}` x{n}");
        }
    }
    out
}
