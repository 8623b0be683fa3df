//! Mistakes in a configuration file, each at its line and column, all reported at once.

use std::fmt::Write as _;
use std::ops::Range;

/// One mistake: where it stands in the file (a byte range; empty for the file as a whole) and
/// what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Problem {
    at: Range<usize>,
    message: String,
}

impl Problem {
    pub(crate) fn new(at: Range<usize>, message: impl Into<String>) -> Self {
        Problem {
            at,
            message: message.into(),
        }
    }
}

/// Every mistake found in one file's text.
#[derive(Debug)]
pub(crate) struct Problems<'t> {
    text: &'t str,
    found: Vec<Problem>,
}

impl<'t> Problems<'t> {
    pub(crate) fn new(text: &'t str) -> Self {
        Problems {
            text,
            found: Vec::new(),
        }
    }

    pub(crate) fn text(&self) -> &'t str {
        self.text
    }

    pub(crate) fn push(&mut self, problem: Problem) {
        self.found.push(problem);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.found.is_empty()
    }

    pub(crate) fn len(&self) -> usize {
        self.found.len()
    }

    /// `value`, when nothing was found wrong.
    pub(crate) fn into_result<T>(self, value: T) -> Result<T, Self> {
        if self.found.is_empty() {
            Ok(value)
        } else {
            Err(self)
        }
    }

    /// One line per mistake, in the order they stand in the file:
    /// `proxy.toml:3:14: unknown key ...`.
    pub(crate) fn render(&self, file: &str) -> String {
        let mut found = self.found.clone();
        found.sort_by_key(|p| (p.at.start, p.at.end));
        let mut out = String::new();
        for problem in &found {
            let (line, column) = line_and_column(self.text, problem.at.start);
            let _ = writeln!(out, "{file}:{line}:{column}: {}", problem.message);
        }
        out
    }
}

/// The 1-based line and column (in characters) of byte `at` in `text`.
fn line_and_column(text: &str, at: usize) -> (usize, usize) {
    let at = at.min(text.len());
    let before = text.get(..at).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_lines_and_columns_counted_from_one() {
        assert_eq!(line_and_column("ab\ncdé\nf", 0), (1, 1));
        assert_eq!(line_and_column("ab\ncdé\nf", 4), (2, 2));
        assert_eq!(line_and_column("ab\ncdé\nf", 8), (3, 1));
        assert_eq!(line_and_column("ab", 99), (1, 3));
        let mut problems = Problems::new("x\ny");
        problems.push(Problem::new(2..3, "second"));
        problems.push(Problem::new(0..1, "first"));
        assert_eq!(
            problems.render("f.toml"),
            "f.toml:1:1: first\nf.toml:2:1: second\n"
        );
    }
}
