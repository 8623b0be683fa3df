//! Tests of agent-errors over MCP live in `tests/`; the fault server they start in `src/bin/`.

/// The README's examples, compiled and run as this crate's doc tests: the runtime crate's own
/// docs stand alone, so it packages without files from outside it. They live here, not in the
/// `tests` crate, because the README's MCP example needs the `mcp` feature, and rmcp in that
/// crate's graph would change the paths rustc prints in the UI tests' diagnostics.
#[doc = include_str!("../../README.md")]
#[doc(hidden)]
#[derive(Debug)]
pub struct ReadmeExamples;
