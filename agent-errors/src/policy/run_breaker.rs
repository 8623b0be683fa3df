//! What a run's breaker does when a tool trips it, and what it counts: the `run_breaker = ...`
//! entry of a policy.

use std::fmt;

/// What the per-run breaker does once a tool has failed too many times in a row in one run.
///
/// # Examples
///
/// ```
/// use agent_errors::policy::OnTrip;
///
/// let said = match OnTrip::RemoveTool {
///     OnTrip::StopRun => "the run ends",
///     OnTrip::RemoveTool => "the model goes on without the tool",
///     _ => "something new", // the enum is non-exhaustive
/// };
/// assert_eq!(said, "the model goes on without the tool");
/// assert_eq!(OnTrip::default(), OnTrip::StopRun);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum OnTrip {
    /// End the run (`RunError::BreakerTripped`): the default.
    #[default]
    StopRun,
    /// Take the tool off the table for the rest of the run: it is no longer offered to the
    /// model, the failed call's result tells the model why (once), and the run goes on with the
    /// other tools. A removed tool the model calls anyway is refused, and tripping the breaker
    /// again with it ends the run.
    RemoveTool,
}

/// The per-run breaker's rule for a tool: what happens when it trips ([`OnTrip`]) and whether
/// it counts a tool's failures per kind, so a tool that times out is not tripped by validation
/// errors and the other way round. Written `run_breaker = remove_tool(per_kind)` in a policy.
///
/// The threshold (3 consecutive failures unless
/// [`AgentBuilder::breaker_threshold`](crate::AgentBuilder::breaker_threshold) says otherwise)
/// is the run's, the same for every tool.
///
/// # Examples
///
/// The same rule written with `policy!` and in code:
///
/// ```
/// use agent_errors::policy;
/// use agent_errors::policy::{OnTrip, Policy, RunBreakerRule};
///
/// let written = policy!(execution = [retry(3), escalate], run_breaker = remove_tool(per_kind));
/// let rule = RunBreakerRule::new(OnTrip::RemoveTool).per_kind();
/// assert_eq!(written.run_breaker_rule(), Some(rule));
/// assert_eq!(rule.to_string(), "remove_tool(per_kind)");
/// assert_eq!(Policy::new().run_breaker(rule), policy!(run_breaker = remove_tool(per_kind)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub struct RunBreakerRule {
    /// What happens when the tool trips the breaker.
    pub on_trip: OnTrip,
    /// Whether failures are counted per (tool, kind of failure) rather than per tool.
    pub per_kind: bool,
}

impl RunBreakerRule {
    /// A rule that does `on_trip`, counting every failure of the tool together.
    pub const fn new(on_trip: OnTrip) -> Self {
        RunBreakerRule {
            on_trip,
            per_kind: false,
        }
    }

    /// The same rule, counting a tool's failures per kind: each kind has its own count, which
    /// failures of other kinds neither add to nor reset; a success of the tool resets them all.
    #[must_use]
    pub const fn per_kind(mut self) -> Self {
        self.per_kind = true;
        self
    }
}

impl fmt::Display for RunBreakerRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.on_trip {
            OnTrip::StopRun => "stop_run",
            OnTrip::RemoveTool => "remove_tool",
        })?;
        if self.per_kind {
            f.write_str("(per_kind)")?;
        }
        Ok(())
    }
}
