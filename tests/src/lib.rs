//! Integration and UI tests for agent-errors live in `tests/` and `ui/`.

/// The README's examples, compiled and run as this crate's doc tests: the runtime crate's own
/// docs stand alone, so it packages without files from outside it.
#[doc = include_str!("../../README.md")]
#[doc(hidden)]
#[derive(Debug)]
pub struct ReadmeExamples;
