//! Recovery policies: which ladder of actions answers which kind of failure, and how the layers
//! (tool, agent, crate defaults, built-in) resolve per key.

use std::borrow::Cow;
use std::fmt;
use std::num::NonZeroU32;
use std::time::Duration;

use crate::ErrorKind;
use crate::retry::{RetrySchedule, ZeroAttempts};

mod preset;
mod resolve;
mod run_breaker;

pub(crate) use resolve::{Layers, ResolvedPolicy};
pub use resolve::{PolicyLayer, Shadowed};
pub use run_breaker::{OnTrip, RunBreakerRule, RunFailureRate};

/// What a policy entry answers: a failure class, or a refinement by error kind.
///
/// # Examples
///
/// ```
/// use agent_errors::ErrorKind;
/// use agent_errors::policy::PolicyKey;
///
/// let key = PolicyKey::Kind(ErrorKind::Timeout);
/// let written = match key {
///     PolicyKey::InvalidArgs => "bad arguments".to_owned(),
///     PolicyKey::Execution => "any failure of the tool".to_owned(),
///     PolicyKey::Kind(kind) => format!("a `{kind}` failure"),
/// };
/// assert_eq!(written, "a `timeout` failure");
/// assert_eq!(PolicyKey::all().next(), Some(PolicyKey::InvalidArgs));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PolicyKey {
    /// The arguments were not valid JSON or did not fit the parameter types.
    InvalidArgs,
    /// The tool ran and failed (any kind without its own key).
    Execution,
    /// The tool ran and failed with this kind; takes precedence over `Execution`.
    Kind(ErrorKind),
}

impl PolicyKey {
    /// Whether a `retry` rung under this key can ever run: failures of arguments, and of kinds
    /// that are never retried (`auth`, `not_found`, `validation`, ...), are called once whatever
    /// the policy says. The macros refuse such a rung; a policy built in code is refused when
    /// its registry is built.
    pub(crate) fn can_retry(self) -> bool {
        match self {
            PolicyKey::InvalidArgs => false,
            PolicyKey::Execution => true,
            PolicyKey::Kind(kind) => kind.is_retryable(),
        }
    }

    /// Every key, in the order `explain` lists them.
    pub fn all() -> impl Iterator<Item = PolicyKey> {
        [PolicyKey::InvalidArgs, PolicyKey::Execution]
            .into_iter()
            .chain(ErrorKind::ALL.into_iter().map(PolicyKey::Kind))
    }

    /// The key as written in `on_error(...)`.
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyKey::InvalidArgs => "invalid_args",
            PolicyKey::Execution => "execution",
            PolicyKey::Kind(kind) => kind.as_str(),
        }
    }
}

impl fmt::Display for PolicyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// `retry(n)`: call again while the failure is retryable, at most `max_attempts` calls in all.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use agent_errors::policy::{Action, RetryAction};
///
/// let Action::Retry(retry) = Action::retry(3)? else { unreachable!() };
/// let slower = RetryAction { initial: Some(Duration::from_secs(2)), ..retry };
/// assert_eq!(slower.max_attempts.get(), 3);
/// assert_eq!(Action::Retry(slower).to_string(), r#"retry(max_attempts = 3, initial = "2s")"#);
/// assert_eq!(Action::retry_when_safe(3)?.to_string(), "retry(3, when_safe)");
/// # Ok::<(), agent_errors::retry::ZeroAttempts>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryAction {
    /// Calls at most, counting the first.
    pub max_attempts: NonZeroU32,
    /// The first delay, when not the default 500 ms.
    pub initial: Option<Duration>,
    /// The cap on one delay, when not the default 32 s.
    pub max: Option<Duration>,
    /// Retries only where a second call cannot apply the call's effect twice
    /// (`retry(3, when_safe)`): the tool is [idempotent](crate::ToolDef::idempotent), or hands
    /// the call's idempotency key to its service ([keyed](crate::ToolDef::keyed)), or the
    /// failure shows the request was not carried out: it never reached the service (connection
    /// refused, a host name that did not resolve), or the service refused it for a rate limit
    /// (`quota`: a 429, or a body that says so). Any other timeout, transient or server failure
    /// of such a tool may have taken effect: it is not retried but answered as an
    /// `outcome_unknown` failure, by that key's ladder. The failure is read as the tool's: a
    /// tool that makes several requests, one of them with an effect, is safe to retry only if
    /// it is idempotent or keyed. The recommended preset's retries are all of this kind.
    pub when_safe: bool,
}

impl RetryAction {
    /// The schedule this action runs.
    pub fn schedule(&self) -> RetrySchedule {
        let mut schedule = RetrySchedule::new(self.max_attempts);
        if let Some(initial) = self.initial {
            schedule = schedule.with_initial(initial);
        }
        if let Some(max) = self.max {
            schedule = schedule.with_max(max);
        }
        schedule
    }
}

/// `fix(agent = "name", retries = n)`: ask a fixer to repair the call.
///
/// # Examples
///
/// ```
/// use agent_errors::policy::Action;
///
/// if let Action::Fix(fix) = Action::fix("json_fixer", 2)? {
///     assert_eq!((fix.agent.as_ref(), fix.retries.get()), ("json_fixer", 2));
/// }
/// # Ok::<(), agent_errors::retry::ZeroAttempts>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FixAction {
    /// The fixer's registered name.
    pub agent: Cow<'static, str>,
    /// How many times the fixer may be asked for this failure (at least 1).
    pub retries: NonZeroU32,
}

/// One rung of a ladder.
///
/// # Examples
///
/// What `#[tool(on_error(execution = [retry(3), fallback(tool = "cache"), escalate]))]` builds,
/// and a `match` that describes a rung:
///
/// ```
/// use agent_errors::policy::{Action, Ladder};
///
/// let ladder = Ladder::new([Action::retry(3)?, Action::fallback("cache"), Action::Escalate]);
/// let plan: Vec<String> = ladder.actions().iter().map(|action| match action {
///     Action::Retry(retry) => format!("call again, {} calls in all", retry.max_attempts),
///     Action::Fix(fix) => format!("ask `{}`", fix.agent),
///     Action::Fallback { tool } => format!("call `{tool}` instead"),
///     Action::Escalate => "show the model".to_owned(),
///     Action::Throw => "end the run".to_owned(),
///     Action::Degrade => "drop the tool".to_owned(),
///     _ => action.to_string(), // the enum is non-exhaustive
/// }).collect();
/// assert_eq!(plan[1], "call `cache` instead");
/// # Ok::<(), agent_errors::retry::ZeroAttempts>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Action {
    /// Call again with backoff (only retryable kinds).
    Retry(RetryAction),
    /// Repair the arguments (or produce a result) through a fixer.
    Fix(FixAction),
    /// Show the error to the model as an error tool result. Ends the ladder.
    Escalate,
    /// End the run: a hard failure. Ends the ladder.
    Throw,
    /// Call another tool with the same arguments, under the retry rungs of that tool's own
    /// policy but not its fallback rungs: fallbacks go one level deep. When it fails, the rest
    /// of the ladder answers the called tool's own failure (an auth failure of the fallback
    /// ends the run, naming it).
    Fallback {
        /// The other tool's name.
        tool: Cow<'static, str>,
    },
    /// Drop the tool for the rest of the run and tell the model. Ends the ladder.
    Degrade,
    /// Hand the failure to a person (the run's [`Approver`](crate::approval::Approver)):
    /// approved, the tool is called again (with the person's arguments, if edited) and a new
    /// failure goes on down the ladder; denied, the model is told. With nobody to answer now, a
    /// checkpointed run ends waiting for the person.
    AskPerson,
}

impl Action {
    /// `retry(n)` with the default schedule: at most `n` calls, the first included.
    pub fn retry(max_attempts: u32) -> Result<Action, ZeroAttempts> {
        let max_attempts = NonZeroU32::new(max_attempts).ok_or(ZeroAttempts)?;
        Ok(Action::Retry(RetryAction {
            max_attempts,
            initial: None,
            max: None,
            when_safe: false,
        }))
    }

    /// `retry(n, when_safe)`: at most `n` calls, retried only where a second call cannot apply
    /// the call's effect twice (see [`RetryAction::when_safe`]).
    pub fn retry_when_safe(max_attempts: u32) -> Result<Action, ZeroAttempts> {
        let max_attempts = NonZeroU32::new(max_attempts).ok_or(ZeroAttempts)?;
        Ok(Action::Retry(RetryAction {
            max_attempts,
            initial: None,
            max: None,
            when_safe: true,
        }))
    }

    /// `fix(agent = name, retries = n)`: the fixer is asked at most `n` times.
    pub fn fix(agent: impl Into<Cow<'static, str>>, retries: u32) -> Result<Action, ZeroAttempts> {
        let retries = NonZeroU32::new(retries).ok_or(ZeroAttempts)?;
        Ok(Action::Fix(FixAction {
            agent: agent.into(),
            retries,
        }))
    }

    /// `fallback(tool = name)`: see [`Action::Fallback`]. The fallback retries under its own
    /// policy's `retry` rungs; its own `fallback` rungs are not followed (depth one).
    pub fn fallback(tool: impl Into<Cow<'static, str>>) -> Action {
        Action::Fallback { tool: tool.into() }
    }

    /// Whether nothing may follow this action in a ladder.
    pub fn is_terminal(&self) -> bool {
        matches!(self, Action::Escalate | Action::Throw | Action::Degrade)
    }
}

fn fmt_duration(d: Duration, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    if d.subsec_millis() == 0 && d.as_secs() > 0 {
        write!(f, "\"{}s\"", d.as_secs())
    } else {
        write!(f, "\"{}ms\"", d.as_millis())
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Retry(r) if r.initial.is_none() && r.max.is_none() => {
                write!(f, "retry({}", r.max_attempts)?;
                if r.when_safe {
                    f.write_str(", when_safe")?;
                }
                f.write_str(")")
            }
            Action::Retry(r) => {
                write!(f, "retry(max_attempts = {}", r.max_attempts)?;
                if let Some(initial) = r.initial {
                    f.write_str(", initial = ")?;
                    fmt_duration(initial, f)?;
                }
                if let Some(max) = r.max {
                    f.write_str(", max = ")?;
                    fmt_duration(max, f)?;
                }
                if r.when_safe {
                    f.write_str(", when_safe")?;
                }
                f.write_str(")")
            }
            Action::Fix(x) => write!(f, "fix(agent = {:?}, retries = {})", x.agent, x.retries),
            Action::Escalate => f.write_str("escalate"),
            Action::Throw => f.write_str("throw"),
            Action::Fallback { tool } => write!(f, "fallback(tool = {tool:?})"),
            Action::Degrade => f.write_str("degrade"),
            Action::AskPerson => f.write_str("ask_person"),
        }
    }
}

/// The actions for one key, tried in order.
///
/// A ladder that runs out without a terminal rung gives the failure its default fate: auth and
/// retryable kinds end the run; every other kind is shown to the model.
///
/// # Examples
///
/// ```
/// use agent_errors::policy::{Action, Ladder};
///
/// let ladder: Ladder = [Action::retry(2)?, Action::Escalate].into();
/// assert_eq!(ladder.to_string(), "[retry(2), escalate]");
/// assert!(ladder.actions().last().is_some_and(Action::is_terminal));
/// # Ok::<(), agent_errors::retry::ZeroAttempts>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Ladder(Vec<Action>);

impl Ladder {
    /// A ladder of these actions.
    pub fn new(actions: impl IntoIterator<Item = Action>) -> Self {
        Ladder(actions.into_iter().collect())
    }

    /// The rungs, in order.
    pub fn actions(&self) -> &[Action] {
        &self.0
    }
}

impl From<Action> for Ladder {
    fn from(action: Action) -> Self {
        Ladder(vec![action])
    }
}

impl<const N: usize> From<[Action; N]> for Ladder {
    fn from(actions: [Action; N]) -> Self {
        Ladder(actions.into())
    }
}

impl From<Vec<Action>> for Ladder {
    fn from(actions: Vec<Action>) -> Self {
        Ladder(actions)
    }
}

impl fmt::Display for Ladder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.as_slice() {
            [] => f.write_str("[] (default fate by kind)"),
            [one] => write!(f, "{one}"),
            many => {
                f.write_str("[")?;
                for (i, a) in many.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{a}")?;
                }
                f.write_str("]")
            }
        }
    }
}

/// A set of `key = ladder` entries, and optionally the per-run breaker's rule for the tool
/// (`run_breaker = ...`): what `on_error(...)`, `policy!(...)` and `defaults!(...)` build. A key
/// set twice keeps the last.
///
/// # Examples
///
/// Built in code, the same as `policy!(timeout = retry(5), auth = throw)`:
///
/// ```
/// use agent_errors::{Agent, ErrorKind};
/// use agent_errors::policy::{Action, Policy, PolicyKey};
/// use agent_errors::testing::ScriptedModel;
///
/// let policy = Policy::new()
///     .on(PolicyKey::Kind(ErrorKind::Timeout), Action::retry(5)?)
///     .on(PolicyKey::Kind(ErrorKind::Auth), Action::Throw);
/// assert_eq!(policy.get(PolicyKey::Kind(ErrorKind::Auth)).map(|l| l.to_string()).as_deref(), Some("throw"));
/// let agent = Agent::builder("a").model(ScriptedModel::new()).on_any_tool_error(policy).build();
/// assert!(agent.is_ok());
/// # Ok::<(), agent_errors::retry::ZeroAttempts>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Policy {
    entries: Vec<(PolicyKey, Ladder)>,
    run_breaker: Option<RunBreakerRule>,
    /// The recommended preset sits just below this policy's own entries
    /// ([`Policy::recommended`]).
    preset: bool,
}

impl Policy {
    /// An empty policy: every key falls through to the layer below.
    pub fn new() -> Self {
        Policy::default()
    }

    /// Sets `key = ladder`.
    #[must_use]
    pub fn on(mut self, key: PolicyKey, ladder: impl Into<Ladder>) -> Self {
        let ladder = ladder.into();
        match self.entries.iter_mut().find(|(k, _)| *k == key) {
            Some(entry) => entry.1 = ladder,
            None => self.entries.push((key, ladder)),
        }
        self
    }

    /// The ladder for `key`, if this policy sets it.
    pub fn get(&self, key: PolicyKey) -> Option<&Ladder> {
        self.entries
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, ladder)| ladder)
    }

    /// Every entry, in the order they were set.
    pub fn entries(&self) -> impl Iterator<Item = (PolicyKey, &Ladder)> {
        self.entries.iter().map(|(k, l)| (*k, l))
    }

    /// Sets what the per-run breaker does when the tool trips it (`run_breaker = ...`): see
    /// [`RunBreakerRule`]. A tool's own rule beats the agent's, which beats the crate's.
    #[must_use]
    pub fn run_breaker(mut self, rule: RunBreakerRule) -> Self {
        self.run_breaker = Some(rule);
        self
    }

    /// The per-run breaker's rule, if this policy sets it.
    pub fn run_breaker_rule(&self) -> Option<RunBreakerRule> {
        self.run_breaker
    }

    /// This policy with everything `later` sets set over it: keys merge, the later entry wins.
    pub(crate) fn merged(self, later: &Policy) -> Policy {
        let mut merged = later
            .entries()
            .fold(self, |merged, (key, ladder)| merged.on(key, ladder.clone()));
        merged.run_breaker = later.run_breaker.or(merged.run_breaker);
        merged.preset |= later.preset;
        merged
    }

    /// Whether nothing is set.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.run_breaker.is_none() && !self.preset
    }

    /// This policy, asking for the recommended preset just below its own entries: what
    /// `policy!(recommended, timeout = retry(5, when_safe))` builds. See
    /// [`Policy::recommended`].
    #[must_use]
    pub fn with_recommended(mut self) -> Self {
        self.preset = true;
        self
    }

    /// Whether this policy asks for the recommended preset below its own entries (see
    /// [`Policy::recommended`]).
    pub fn uses_recommended(&self) -> bool {
        self.preset
    }

    /// The built-in, fail-closed policy: no retries; bad arguments are shown to the model; auth
    /// failures end the run; a call whose outcome a crash made unknown is shown to the model;
    /// every other execution failure takes its default fate.
    pub fn built_in() -> Policy {
        Policy::new()
            .on(PolicyKey::InvalidArgs, Action::Escalate)
            .on(PolicyKey::Execution, Ladder::default())
            .on(PolicyKey::Kind(ErrorKind::Auth), Action::Throw)
            .on(PolicyKey::Kind(ErrorKind::OutcomeUnknown), Action::Escalate)
    }
}
