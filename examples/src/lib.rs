//! Runnable examples for agent-errors, as binaries (`cargo run -p agent-errors-examples --bin
//! <name>`); Cargo.toml says why they are not `[[example]]` targets.
