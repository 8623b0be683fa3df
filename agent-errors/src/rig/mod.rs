//! rig: its providers and tools under this crate's recovery policies, in our agent loop or in
//! rig's own.
//!
//! - [`RigModel`]: any rig completion model (`DynModel<Completion>`, so any of rig's
//!   providers) as a [`ChatModel`](crate::ChatModel), its failures classified from rig's typed
//!   `ProviderError` (variant, status, `Retry-After`, machine code), never its text.
//! - [`ToolDef::from_rig`](crate::ToolDef::from_rig): any rig `Tool` as a tool of ours,
//!   unchanged, under our per-tool policies, defaults, fixers and breakers. A rig tool reads
//!   its call's [`IdempotencyKey`](crate::call::IdempotencyKey) from its `ToolContext`, in
//!   either loop.
//! - [`GuardedTool`]: for agents that stay on rig's own loop (`rig_agent`), a rig `Tool` that
//!   runs each call through our policies, and [`recovering`], a rig model that retries what a
//!   transient provider failure broke (rig's loop ends the run at the first failed call).
//!
//! rig 0.44 needs rustc 1.95; this crate pins it exactly (0.45 and later need rustc 1.97.1).

mod agent;
mod convert;
mod key;
mod model;
mod recover;
mod stream;
mod tool;

pub use agent::{GuardError, GuardedTool, StopHook};
pub use convert::ConvertError;
pub use model::RigModel;
pub use recover::{recovering, recovering_for};
