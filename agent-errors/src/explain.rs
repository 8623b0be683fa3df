//! `explain`: a tool's resolved policy for people, with the layer each entry came from and the
//! entries that never decide anything.

use std::fmt;

use crate::classify::ErrorKind;
use crate::policy::{Ladder, PolicyKey, PolicyLayer, ResolvedPolicy, Shadowed};

/// Something a registry or agent builds with but that may not do what was meant: logged as a
/// `tracing` warning when it is built, listed by
/// [`Registry::warnings`](crate::Registry::warnings) and in the tool's
/// [`Explanation`].
///
/// # Examples
///
/// A `retry` written for a tool that sends an email can send it twice:
///
/// ```
/// use agent_errors::{Registry, policy};
/// use agent_errors::build::ConfigWarning;
/// use agent_errors::testing::echo_tool;
///
/// let send = echo_tool("send_email").with_policy(policy!(timeout = [retry(3), escalate]));
/// let registry = Registry::builder().tool(send).build()?;
/// for warning in registry.warnings() {
///     match warning {
///         ConfigWarning::RetryMayRepeatEffect { tool, key, .. } => {
///             assert_eq!((tool.as_str(), key.as_str()), ("send_email", "timeout"));
///         }
///         other => panic!("unexpected: {other}"),
///     }
/// }
/// assert_eq!(registry.warnings().len(), 1);
/// # Ok::<(), agent_errors::build::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigWarning {
    /// A `retry` (not `when_safe`) answers failures that may come after the service acted (a
    /// timeout, a dropped connection, a 5xx) for a tool that is neither idempotent nor keyed: a
    /// second call can apply the effect twice.
    RetryMayRepeatEffect {
        /// The tool.
        tool: String,
        /// The key whose ladder retries.
        key: PolicyKey,
        /// The layer the entry came from.
        layer: PolicyLayer,
    },
}

impl fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigWarning::RetryMayRepeatEffect { tool, key, layer } => write!(
                f,
                "`{tool}`: `{key} = retry(..)` ({layer}) can apply the call's effect twice: a \
                 failure under `{key}` may come after the service acted, and `{tool}` is neither \
                 idempotent nor keyed. Mark it `idempotent` if a second call does no more than \
                 the first, hand it the call's idempotency key and mark it `keyed`, or write \
                 `retry(n, when_safe)`, which answers such a failure as an unknown outcome"
            ),
        }
    }
}

/// A tool's resolved policy with the source of each key, for people: `agent.explain("tool")`.
///
/// For a failure of kind K, the highest layer that mentions K or `execution` decides, and K
/// beats `execution` within a layer (auth follows only `auth`). An entry that can never decide
/// is listed as shadowed, with what decides in its place.
///
/// # Examples
///
/// ```
/// use agent_errors::{Agent, ErrorKind, policy};
/// use agent_errors::policy::PolicyKey;
/// use agent_errors::testing::{ScriptedModel, echo_tool};
///
/// let agent = Agent::builder("a")
///     .model(ScriptedModel::new())
///     .tool(echo_tool("echo").with_policy(policy!(timeout = [retry(3), escalate])))
///     .build()?;
/// let explained = agent.explain("echo").expect("a registered tool");
/// let (key, ladder, _layer) = explained.for_kind(ErrorKind::Timeout);
/// assert_eq!((key, ladder.to_string().as_str()), (PolicyKey::Kind(ErrorKind::Timeout), "[retry(3), escalate]"));
/// println!("{explained}"); // the whole table, for people
/// # Ok::<(), agent_errors::build::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explanation {
    pub(crate) tool: String,
    pub(crate) optional: bool,
    pub(crate) policy: ResolvedPolicy,
    pub(crate) warnings: Vec<ConfigWarning>,
    /// Whether the preset checks the tool's outputs (it had no check of its own).
    pub(crate) preset_output_check: bool,
}

impl Explanation {
    /// The tool explained.
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// Whether the tool may be dropped with `degrade`.
    pub fn is_optional(&self) -> bool {
        self.optional
    }

    /// Every resolved key with its ladder and the layer it came from.
    pub fn entries(&self) -> impl Iterator<Item = (PolicyKey, &Ladder, PolicyLayer)> {
        self.policy.entries()
    }

    /// The layer that set `key`, if any did.
    pub fn source_of(&self, key: PolicyKey) -> Option<PolicyLayer> {
        self.policy.get(key).map(|(_, layer)| layer)
    }

    /// The ladder for `key`, if any layer set it.
    pub fn ladder(&self, key: PolicyKey) -> Option<&Ladder> {
        self.policy.get(key).map(|(ladder, _)| ladder)
    }

    /// The entry that answers an execution failure of `kind`, as the executor picks it.
    pub fn for_kind(&self, kind: ErrorKind) -> (PolicyKey, &Ladder, PolicyLayer) {
        self.policy.for_kind(kind)
    }

    /// When the resolved entry for `key` never decides (a higher layer's `execution` answers
    /// that kind first): the key and layer that do.
    pub fn shadowed_by(&self, key: PolicyKey) -> Option<(PolicyKey, PolicyLayer)> {
        self.policy.shadowed_by(key)
    }

    /// Every entry, of any layer but the built-in one, that never decides anything for this
    /// tool, with what decides in its place.
    pub fn shadowed(&self) -> Vec<Shadowed> {
        self.policy.shadowed()
    }

    /// What the build warned about this tool.
    pub fn warnings(&self) -> &[ConfigWarning] {
        &self.warnings
    }

    /// Whether a layer of this tool asked for the recommended preset.
    pub fn uses_recommended(&self) -> bool {
        self.policy.is_recommended()
    }
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "policy for `{}`{}:",
            self.tool,
            if self.optional { " (optional)" } else { "" }
        )?;
        let shadowed = self.policy.shadowed();
        for (key, ladder, layer) in self.policy.entries() {
            write!(f, "  {key:<13} = {ladder}  <- {layer}")?;
            match shadowed.iter().find(|s| s.key == key && s.layer == layer) {
                Some(s) => writeln!(f, "  (shadowed by `{}` <- {})", s.by_key, s.by_layer)?,
                None => writeln!(f)?,
            }
        }
        for s in shadowed.iter().filter(|s| s.by_key == s.key) {
            writeln!(
                f,
                "  {:<13} = {}  <- {}  (shadowed by `{}` <- {})",
                s.key, s.ladder, s.layer, s.by_key, s.by_layer
            )?;
        }
        let layer = self.policy.run_breaker_layer();
        if layer != PolicyLayer::BuiltIn {
            let rule = self.policy.run_breaker();
            writeln!(f, "  {:<13} = {rule}  <- {layer}", "run_breaker")?;
        }
        if self.preset_output_check {
            writeln!(
                f,
                "  {:<13} = error envelopes, classified by their text  <- {}",
                "output_check",
                PolicyLayer::Recommended
            )?;
        }
        for warning in &self.warnings {
            writeln!(f, "  warning: {warning}")?;
        }
        Ok(())
    }
}
