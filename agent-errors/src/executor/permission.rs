//! The permission hook: asked before a tool runs whether it may, with what it knows about the
//! run asking (its context values, how often it was denied).

use crate::chat::ToolCall;
use crate::extensions::Extensions;

/// A permission hook's verdict on a call.
///
/// # Examples
///
/// A closure is a hook; its verdict is one of the two:
///
/// ```
/// use agent_errors::{Agent, ToolCall};
/// use agent_errors::permission::Permission;
/// use agent_errors::testing::ScriptedModel;
///
/// let read_only = |call: &ToolCall| match &*call.name {
///     "delete_file" | "write_file" => Permission::Deny("this agent may only read".into()),
///     _ => Permission::Allow,
/// };
/// assert_eq!(read_only(&ToolCall::new("c1", "read_file", "{}")), Permission::Allow);
/// let agent = Agent::builder("a").model(ScriptedModel::new()).permission(read_only).build();
/// assert!(agent.is_ok());
/// ```
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
///
/// # Examples
///
/// A hook that gives up on a tool the model keeps asking for:
///
/// ```
/// use agent_errors::ToolCall;
/// use agent_errors::permission::{Permission, PermissionContext, PermissionHook};
///
/// struct Budgeted;
///
/// impl PermissionHook for Budgeted {
///     fn check(&self, _call: &ToolCall) -> Permission {
///         Permission::Allow
///     }
///
///     fn check_in(&self, call: &ToolCall, run: &PermissionContext<'_>) -> Permission {
///         if &*call.name == "send_email" && run.tool_denials() >= 2 {
///             return Permission::Deny("email is not available in this run".into());
///         }
///         self.check(call)
///     }
/// }
/// # let _ = Budgeted;
/// ```
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
///
/// # Examples
///
/// A run whose model asks for what it may not do ends once the run's budget of denials is spent:
///
/// ```
/// use agent_errors::{Agent, Limits, ToolCall};
/// use agent_errors::permission::{Permission, PermissionDenied};
/// use agent_errors::testing::{ScriptedModel, echo_tool};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let agent = Agent::builder("a")
///     .model(ScriptedModel::new().tool_call("echo", r#"{"text": "x"}"#))
///     .tool(echo_tool("echo"))
///     .permission(|_: &ToolCall| Permission::Deny("not today".into()))
///     .limits(Limits::default().with_max_permission_denials(1))
///     .build()?;
/// let error = agent.run("go").await.unwrap_err();
/// let stop = error.terminated().expect("the denials ended the run");
/// let denied = stop.unredacted_error().and_then(|e| e.cause().downcast_ref::<PermissionDenied>());
/// assert_eq!(denied.map(|d| d.reason.as_str()), Some("not today"));
/// # Ok(())
/// # }
/// ```
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
