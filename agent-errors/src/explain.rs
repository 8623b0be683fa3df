//! `explain`: a tool's resolved policy for people, with the layer each entry came from and the
//! entries that never decide anything.

use std::fmt;

use crate::classify::ErrorKind;
use crate::policy::{Ladder, PolicyKey, PolicyLayer, ResolvedPolicy, Shadowed};

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
        Ok(())
    }
}
