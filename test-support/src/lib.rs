//! What the tests and benches of agent-errors share: the programs they start for real,
//! installed on first use when missing, and a Restate server on loopback ports of its own.

#![warn(missing_docs)]
#![deny(unreachable_pub)]

mod install;
mod restate;

pub use install::{InstallError, Program, install, on_path, redis_server};
pub use restate::{RestateServer, StartError, free_port};
