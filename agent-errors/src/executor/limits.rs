//! The bounds that keep a run's recovery finite.

/// The default of [`Limits::max_permission_denials`].
pub const DEFAULT_MAX_PERMISSION_DENIALS: u32 = 20;

/// Bounds that keep recovery finite.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use agent_errors::{Agent, Limits};
/// use agent_errors::testing::ScriptedModel;
///
/// let limits = Limits::default()
///     .with_run_deadline(Duration::from_secs(120))
///     .with_default_tool_timeout(Duration::from_secs(10))
///     .with_max_retries(8);
/// let agent = Agent::builder("a").model(ScriptedModel::new()).limits(limits).build();
/// assert!(agent.is_ok());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Fixer invocations per tool call, across every ladder: a fixer that never converges ends.
    pub max_repair_steps: u32,
    /// Characters of an error message a model may see.
    pub max_message_chars: usize,
    /// Permission denials, across every tool, after which the run ends: a model that keeps
    /// asking for what it may not do will not stop by itself (0: no budget).
    pub max_permission_denials: u32,
    /// The bound on a call of any tool that sets no `timeout` of its own (none by default).
    pub default_tool_timeout: Option<std::time::Duration>,
    /// The bound on a whole agent run, model calls and tools included (none by default).
    pub run_deadline: Option<std::time::Duration>,
    /// Retries one run may make in all, at every layer: tool retries, model-call retries and
    /// the provider's own (32 by default). A durable run keeps what it spent across a restart.
    pub max_retries: u32,
}

/// The default of [`Limits::max_retries`].
pub(crate) const DEFAULT_MAX_RETRIES: u32 = 32;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_repair_steps: 8,
            max_message_chars: crate::sanitize::DEFAULT_MAX_CHARS,
            max_permission_denials: DEFAULT_MAX_PERMISSION_DENIALS,
            default_tool_timeout: None,
            run_deadline: None,
            max_retries: DEFAULT_MAX_RETRIES,
        }
    }
}

impl Limits {
    /// Sets the cap on fixer invocations per tool call (0: never ask a fixer).
    #[must_use]
    pub fn with_max_repair_steps(mut self, steps: u32) -> Self {
        self.max_repair_steps = steps;
        self
    }

    /// Sets the number of permission denials, across every tool, that ends a run (0: never).
    #[must_use]
    pub fn with_max_permission_denials(mut self, denials: u32) -> Self {
        self.max_permission_denials = denials;
        self
    }

    /// Bounds every call of a tool that has no `timeout` of its own: a tool that hangs then
    /// fails as a `timeout` the policy handles, instead of holding the run open.
    #[must_use]
    pub fn with_default_tool_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.default_tool_timeout = Some(timeout);
        self
    }

    /// Bounds a whole agent run: past it, the calls still running answer "operation cancelled"
    /// and the run ends with `RunError::DeadlineExceeded`.
    #[must_use]
    pub fn with_run_deadline(mut self, deadline: std::time::Duration) -> Self {
        self.run_deadline = Some(deadline);
        self
    }

    /// Sets how many retries one run may make in all, at every layer (0: none).
    #[must_use]
    pub fn with_max_retries(mut self, retries: u32) -> Self {
        self.max_retries = retries;
        self
    }

    /// Sets the bound on an error message a model may see, in characters.
    #[must_use]
    pub fn with_max_message_chars(mut self, chars: usize) -> Self {
        self.max_message_chars = chars;
        self
    }
}
