//! What a run's breaker does when a tool trips it, and what it counts: the `run_breaker = ...`
//! entry of a policy.

use std::fmt;
use std::num::NonZeroU32;

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
    /// When set, the breaker trips on this share of the tool's recent calls in the run rather
    /// than on consecutive failures: see [`RunFailureRate`].
    pub rate: Option<RunFailureRate>,
}

/// A per-run breaker that trips on a failure rate: a tool (or a tool and kind, when counted
/// per kind) whose failures are at least `min_failures` and at least `percent`% of the tool's
/// last `window` calls in the run. A success does not wipe the count: a tool that fails two
/// calls in three trips where the consecutive rule never would, and one that fails three
/// times among many successes does not.
///
/// # Examples
///
/// ```
/// use agent_errors::policy::{OnTrip, RunBreakerRule, RunFailureRate};
///
/// let rate = RunFailureRate::new(60, 10, 3);
/// let rule = RunBreakerRule::new(OnTrip::RemoveTool).per_kind().failure_rate(rate);
/// assert_eq!((rate.percent(), rate.window(), rate.min_failures()), (60, 10, 3));
/// assert_eq!(rule.to_string(), "remove_tool(per_kind, 3 failures and 60% of the last 10 calls)");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RunFailureRate {
    percent: u8,
    window: NonZeroU32,
    min_failures: NonZeroU32,
}

impl RunFailureRate {
    /// Trips at `min_failures` failures that are `percent`% or more of the last `window`
    /// calls. Out-of-range values are brought into range: `percent` to 1..=100, `window` and
    /// `min_failures` to at least 1, `min_failures` to at most `window`.
    pub const fn new(percent: u8, window: u32, min_failures: u32) -> Self {
        let percent = if percent == 0 {
            1
        } else if percent > 100 {
            100
        } else {
            percent
        };
        let window = match NonZeroU32::new(window) {
            Some(window) => window,
            None => NonZeroU32::MIN,
        };
        let min_failures = match NonZeroU32::new(min_failures) {
            Some(min) if min.get() > window.get() => window,
            Some(min) => min,
            None => NonZeroU32::MIN,
        };
        RunFailureRate {
            percent,
            window,
            min_failures,
        }
    }

    /// The share of the window's calls, in percent, that trips.
    pub const fn percent(self) -> u8 {
        self.percent
    }

    /// The tool's last calls that are looked at.
    pub const fn window(self) -> u32 {
        self.window.get()
    }

    /// The failures needed before the rate counts.
    pub const fn min_failures(self) -> u32 {
        self.min_failures.get()
    }

    /// Whether `failed` failures among `calls` calls trip.
    pub(crate) fn trips(self, failed: u32, calls: u32) -> bool {
        failed >= self.min_failures.get()
            && u64::from(failed) * 100 >= u64::from(self.percent) * u64::from(calls)
    }
}

impl RunBreakerRule {
    /// A rule that does `on_trip`, counting every failure of the tool together.
    pub const fn new(on_trip: OnTrip) -> Self {
        RunBreakerRule {
            on_trip,
            per_kind: false,
            rate: None,
        }
    }

    /// The same rule, tripping on a failure rate rather than on consecutive failures.
    #[must_use]
    pub const fn failure_rate(mut self, rate: RunFailureRate) -> Self {
        self.rate = Some(rate);
        self
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
        match (self.per_kind, self.rate) {
            (false, None) => Ok(()),
            (true, None) => f.write_str("(per_kind)"),
            (per_kind, Some(rate)) => write!(
                f,
                "({}{} failures and {}% of the last {} calls)",
                if per_kind { "per_kind, " } else { "" },
                rate.min_failures,
                rate.percent,
                rate.window
            ),
        }
    }
}
