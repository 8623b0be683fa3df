//! The integration tests that can share one process, gathered into one test binary: each file
//! is a module, so the whole crate with every feature is linked once instead of once per file.
//!
//! A file stays a binary of its own (next to this directory) when it needs what a shared
//! process cannot give it: a crate root of its own (`defaults!`, a `crate = "..."` path),
//! trybuild's UI build, or process-wide redaction patterns (`redact.rs` registers `x*` and
//! `acct-\d{6}`, which would redact other modules' text). Everything here keeps to thread-local
//! tracing and metrics recorders, and what it registers for the process (provider API keys,
//! classification rules for its own error types) appears in no other module's text.
//!
//! `cargo test -p agent-errors-tests --all-features --test suite -- sanitize::` runs one file.

// Shared with `redact.rs`, a binary of its own.
#[path = "../support/mod.rs"]
mod support;

mod agent;
mod agent_builtins;
mod agent_options;
mod answer_tokens;
mod answers;
mod anthropic;
mod approval;
mod architecture;
mod arguments;
mod attempts;
mod blocking;
mod capture;
mod checkpoint_stores;
mod classify;
mod compact;
mod contained;
mod defaults;
mod door;
mod dsl_lists;
mod dsl_no_defaults;
mod durable;
mod durable_processes;
mod executor;
mod fallback_memory;
mod fleet;
mod fleet_processes;
mod http_response;
mod idempotency;
mod journal;
mod journal_pairs;
mod llm_error;
mod llm_wrappers;
mod loop_props;
mod observe;
mod openai;
mod output_checks;
mod permissions;
mod preset;
mod redis_store;
mod refund_service;
mod repair;
mod restate;
mod retry;
mod rig;
mod rig_loop;
mod run_breaker;
mod run_timing;
mod sanitize;
mod streaming;
mod structured_output;
mod testing_kit;
mod unknown_outcomes;
mod unrecognised;
mod usage_limits;
mod usage_meter;
