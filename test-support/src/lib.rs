//! What the tests and benches of agent-errors share. Today: a Restate server on loopback ports
//! of its own, started from the binary `scripts/install-restate-server.sh` installs.

#![warn(missing_docs)]
#![deny(unreachable_pub)]

mod restate;

pub use restate::{RestateServer, StartError, free_port};
