//! Tests of agent-errors over MCP live in `tests/`; the fault server they start in `src/bin/`.

/// The README's examples, compiled and run as this crate's doc tests: the runtime crate's own
/// docs stand alone, so it packages without files from outside it. They live here, beside the
/// MCP tests, because the README's MCP example needs the `mcp` feature.
#[doc = include_str!("../../README.md")]
#[doc(hidden)]
#[derive(Debug)]
pub struct ReadmeExamples;
