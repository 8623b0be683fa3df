//! Tests of agent-errors over MCP live in `tests/`; the fault server they start in `src/bin/`.

/// The README's examples, compiled and run as this crate's doc tests: the runtime crate's own
/// docs stand alone, so it packages without files from outside it (the guide's chapters, inside
/// it, are its `guide` module's doc tests).
#[doc = include_str!("../../README.md")]
#[doc(hidden)]
#[derive(Debug)]
pub struct ReadmeExamples;
