//! The permission hook: asked before a tool runs whether it may, with what it knows about the
//! run asking (its context values, how often it was denied).

use crate::chat::ToolCall;
use crate::extensions::Extensions;

/// A permission hook's verdict on a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Permission {
    /// Run it.
    Allow,
    /// Do not run it; the reason goes to the model.
    Deny(String),
}

/// Decides, before a tool runs, whether it may. Any `Fn(&ToolCall) -> Permission` is one.
///
/// A hook that needs the run's context values (who is asking) or how often this run was
/// already denied implements [`check_in`](PermissionHook::check_in) too.
///
/// # Examples
///
/// ```
/// use agent_errors::{ToolCall, permission::{Permission, PermissionContext, PermissionHook}};
///
/// struct Role(&'static str);
///
/// struct AdminsOnly;
///
/// impl PermissionHook for AdminsOnly {
///     fn check(&self, _call: &ToolCall) -> Permission {
///         Permission::Deny("no user".into())
///     }
///
///     fn check_in(&self, call: &ToolCall, run: &PermissionContext<'_>) -> Permission {
///         match run.extensions().get::<Role>() {
///             Some(Role("admin")) => Permission::Allow,
///             _ if run.denials() > 3 => Permission::Deny("stop asking for admin tools".into()),
///             _ => Permission::Deny(format!("`{}` is for admins", call.name)),
///         }
///     }
/// }
/// ```
pub trait PermissionHook: Send + Sync + 'static {
    /// The verdict for this call.
    fn check(&self, call: &ToolCall) -> Permission;

    /// The verdict for this call, knowing the run: what the executor asks. The default asks
    /// [`check`](PermissionHook::check).
    fn check_in(&self, call: &ToolCall, run: &PermissionContext<'_>) -> Permission {
        let _ = run;
        self.check(call)
    }
}

/// What a permission hook knows about the run asking.
#[derive(Debug, Clone, Copy)]
pub struct PermissionContext<'a> {
    pub(super) extensions: &'a Extensions,
    pub(super) denials: u32,
    pub(super) tool_denials: u32,
}

impl PermissionContext<'_> {
    /// The values the run was given ([`RunOptions::context`](crate::RunOptions::context)).
    pub fn extensions(&self) -> &Extensions {
        self.extensions
    }

    /// Calls denied so far in this run, across every tool.
    pub fn denials(&self) -> u32 {
        self.denials
    }

    /// Calls of this tool denied so far in this run.
    pub fn tool_denials(&self) -> u32 {
        self.tool_denials
    }
}

/// The permission hook denied a call; classified [`Auth`](crate::ErrorKind::Auth) when the run's
/// budget of denials is used up and the run ends.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("permission denied {denials} times in this run; the last: {reason}")]
pub struct PermissionDenied {
    /// Denials in the run, this one included.
    pub denials: u32,
    /// The hook's reason for this one.
    pub reason: String,
}

impl<F> PermissionHook for F
where
    F: Fn(&ToolCall) -> Permission + Send + Sync + 'static,
{
    fn check(&self, call: &ToolCall) -> Permission {
        self(call)
    }
}
