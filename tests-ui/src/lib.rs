//! Compile-fail and compile-pass UI tests of the agent-errors macros live in `tests/ui.rs` and
//! `ui/`.
