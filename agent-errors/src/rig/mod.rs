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
//! - [`RigGuard`]: for agents that stay on rig's own loop (`rig_agent`), every tool of a registry
//!   as a rig tool that runs each call through our policies, and the hook that ends rig's run
//!   when one must, added together ([`RigGuard::agent`]); [`GuardedTool`], one typed rig tool
//!   guarded the same way; and [`RecoveringModel`] ([`RigGuard::recovering`]), a rig model
//!   that retries what a transient provider failure broke (rig's loop ends the run at the first
//!   failed call), its retries on the run's events.
//!
//! rig 0.44 needs rustc 1.95; this crate pins it exactly (0.45 and later need rustc 1.97.1).

mod agent;
mod convert;
mod guard;
mod key;
mod model;
mod recover;
mod run_guard;
mod stop;
mod stream;
mod tool;
mod usage;

pub use agent::{GuardError, GuardedTool};
pub use convert::ConvertError;
pub use guard::StopHook;
pub use model::RigModel;
pub use recover::RecoveringModel;
pub use run_guard::RigGuard;
pub use stop::RigStop;
