//! The MCP tests in one test binary (each file a module), so the crate with every feature is
//! linked once: the reference server and the fault server they start are separate processes, and
//! nothing here sets process-wide state.

mod common;

mod everything;
mod faults;
mod serve;
