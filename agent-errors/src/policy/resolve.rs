//! Which layer decides each key of a tool's policy: the tool's own, the agent's, the crate's
//! defaults, or the built-in.

use crate::ErrorKind;

use super::{Ladder, Policy, PolicyKey, RunBreakerRule};

use std::fmt;

/// Where a resolved entry came from.
///
/// # Examples
///
/// Where a tool's answer to a failure comes from:
///
/// ```
/// use agent_errors::{Agent, policy};
/// use agent_errors::policy::{PolicyKey, PolicyLayer};
/// use agent_errors::testing::{ScriptedModel, echo_tool};
///
/// let agent = Agent::builder("a")
///     .model(ScriptedModel::new())
///     .tool(echo_tool("echo"))
///     .on_tool_error("echo", policy!(execution = retry(3)))
///     .build()?;
/// let explained = agent.explain("echo").expect("a registered tool");
/// let origin = match explained.source_of(PolicyKey::Execution) {
///     Some(PolicyLayer::Tool) => "the tool's attribute",
///     Some(PolicyLayer::Agent | PolicyLayer::AgentDefaults) => "the agent",
///     Some(PolicyLayer::CrateDefaults) => "the crate's defaults",
///     Some(PolicyLayer::Recommended) => "the recommended preset",
///     Some(PolicyLayer::BuiltIn) | None => "the library",
/// };
/// assert_eq!(origin, "the agent");
/// # Ok::<(), agent_errors::build::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PolicyLayer {
    /// The tool's own `#[tool(on_error(...))]`.
    Tool,
    /// The agent's `on_tool_error(tool, ...)`.
    Agent,
    /// The agent's `on_any_tool_error(...)`: its defaults for every tool.
    AgentDefaults,
    /// The crate's `defaults!(...)`.
    CrateDefaults,
    /// The recommended preset ([`Policy::recommended`]), just below the layer that asked for
    /// it: its entries decide the keys that layer and those above leave out.
    Recommended,
    /// The library's fail-closed default.
    BuiltIn,
}

impl fmt::Display for PolicyLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PolicyLayer::Tool => "tool",
            PolicyLayer::Agent => "agent",
            PolicyLayer::AgentDefaults => "agent, every tool",
            PolicyLayer::CrateDefaults => "crate defaults",
            PolicyLayer::Recommended => "recommended preset",
            PolicyLayer::BuiltIn => "built-in",
        })
    }
}

/// A tool's policy after resolution: for every key that any layer sets, the ladder and the layer
/// it came from; and, for `explain`, the entries of lower layers that never decide anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ResolvedPolicy {
    /// Each key's ladder, its layer, and that layer's rank (0 is the highest): the preset's
    /// layer ranks just below the layer that asked for it, wherever that is.
    entries: Vec<(PolicyKey, Ladder, PolicyLayer, u8)>,
    /// Entries a higher layer's entry for the same key replaces (built-in ones left out).
    overridden: Vec<Shadowed>,
    /// The per-run breaker's rule: the highest layer's that sets one, else the default; and
    /// the layer it came from.
    run_breaker: (RunBreakerRule, PolicyLayer),
    /// Whether a layer asked for the recommended preset.
    recommended: bool,
}

/// An entry that never decides anything for a tool, and what does instead.
///
/// # Examples
///
/// An agent default for `timeout` never decides when the tool's own `execution` entry answers every
/// kind first:
///
/// ```
/// use agent_errors::{Agent, policy};
/// use agent_errors::testing::{ScriptedModel, echo_tool};
///
/// let tool = echo_tool("fetch").with_policy(policy!(execution = escalate));
/// let agent = Agent::builder("a")
///     .model(ScriptedModel::new())
///     .tool(tool)
///     .on_any_tool_error(policy!(timeout = retry(5)))
///     .build()?;
/// let shadowed = agent.explain("fetch").expect("registered").shadowed();
/// for dead in &shadowed {
///     println!("{} ({}) never decides: {} ({}) does", dead.key, dead.layer, dead.by_key, dead.by_layer);
/// }
/// assert_eq!(shadowed.len(), 1);
/// # Ok::<(), agent_errors::build::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Shadowed {
    /// The entry's key.
    pub key: PolicyKey,
    /// Its ladder.
    pub ladder: Ladder,
    /// Its layer.
    pub layer: PolicyLayer,
    /// The key of the entry that decides in its place.
    pub by_key: PolicyKey,
    /// That entry's layer.
    pub by_layer: PolicyLayer,
}

/// The layers of a tool's policy, highest first.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Layers<'a> {
    pub(crate) tool: Option<&'a Policy>,
    pub(crate) agent: Option<&'a Policy>,
    pub(crate) agent_defaults: Option<&'a Policy>,
    pub(crate) crate_defaults: Option<&'a Policy>,
}

impl ResolvedPolicy {
    /// Resolves per key: tool, then agent, then the agent's defaults, then crate defaults, then
    /// built-in.
    pub(crate) fn resolve(given: Layers<'_>) -> Self {
        let built_in = Policy::built_in();
        let preset = Policy::recommended_entries();
        let given = [
            (given.tool, PolicyLayer::Tool),
            (given.agent, PolicyLayer::Agent),
            (given.agent_defaults, PolicyLayer::AgentDefaults),
            (given.crate_defaults, PolicyLayer::CrateDefaults),
        ];
        // The preset goes just below the highest layer that asks for it, once.
        let mut layers: Vec<(&Policy, PolicyLayer)> = Vec::with_capacity(6);
        let mut recommended = false;
        for (policy, layer) in given {
            let Some(policy) = policy else { continue };
            layers.push((policy, layer));
            if policy.uses_recommended() && !recommended {
                recommended = true;
                layers.push((&preset, PolicyLayer::Recommended));
            }
        }
        layers.push((&built_in, PolicyLayer::BuiltIn));
        let mut entries = Vec::new();
        let mut overridden = Vec::new();
        for key in PolicyKey::all() {
            let mut found = layers
                .iter()
                .enumerate()
                .filter_map(|(rank, (policy, layer))| {
                    policy.get(key).map(|ladder| (ladder, *layer, rank))
                });
            let Some((ladder, by_layer, rank)) = found.next() else {
                continue;
            };
            let rank = u8::try_from(rank).unwrap_or(u8::MAX);
            entries.push((key, ladder.clone(), by_layer, rank));
            overridden.extend(
                found
                    // The floors are there to be built over: only written entries are listed.
                    .filter(|(_, layer, _)| {
                        !matches!(layer, PolicyLayer::BuiltIn | PolicyLayer::Recommended)
                    })
                    .map(|(ladder, layer, _)| Shadowed {
                        key,
                        ladder: ladder.clone(),
                        layer,
                        by_key: key,
                        by_layer,
                    }),
            );
        }
        let run_breaker = layers
            .iter()
            .find_map(|(policy, layer)| policy.run_breaker_rule().map(|rule| (rule, *layer)))
            .unwrap_or((RunBreakerRule::default(), PolicyLayer::BuiltIn));
        ResolvedPolicy {
            entries,
            overridden,
            run_breaker,
            recommended,
        }
    }

    /// What the per-run breaker does when this tool trips it, and what it counts.
    pub(crate) fn run_breaker(&self) -> RunBreakerRule {
        self.run_breaker.0
    }

    /// The layer the per-run breaker's rule came from.
    pub(crate) fn run_breaker_layer(&self) -> PolicyLayer {
        self.run_breaker.1
    }

    /// Whether a layer of this tool asked for the recommended preset.
    pub(crate) fn is_recommended(&self) -> bool {
        self.recommended
    }

    /// For a resolved kind entry that an `execution` entry of a higher layer always answers
    /// first: that entry's key and layer.
    pub(crate) fn shadowed_by(&self, key: PolicyKey) -> Option<(PolicyKey, PolicyLayer)> {
        let PolicyKey::Kind(kind) = key else {
            return None;
        };
        self.get(key)?;
        match self.for_kind(kind) {
            (PolicyKey::Execution, _, by_layer) => Some((PolicyKey::Execution, by_layer)),
            _ => None,
        }
    }

    /// Every entry that never decides anything, resolved or replaced.
    pub(crate) fn shadowed(&self) -> Vec<Shadowed> {
        let resolved = self.entries().filter_map(|(key, ladder, layer)| {
            let (by_key, by_layer) = self.shadowed_by(key)?;
            Some(Shadowed {
                key,
                ladder: ladder.clone(),
                layer,
                by_key,
                by_layer,
            })
        });
        resolved.chain(self.overridden.iter().cloned()).collect()
    }

    /// The resolved entry for exactly this key, if any layer sets it.
    pub(crate) fn get(&self, key: PolicyKey) -> Option<(&Ladder, PolicyLayer)> {
        self.ranked(key).map(|(ladder, layer, _)| (ladder, layer))
    }

    /// The resolved entry for exactly this key, with its layer's rank.
    fn ranked(&self, key: PolicyKey) -> Option<(&Ladder, PolicyLayer, u8)> {
        self.entries
            .iter()
            .find(|(k, _, _, _)| *k == key)
            .map(|(_, ladder, layer, rank)| (ladder, *layer, *rank))
    }

    /// The entry that answers an execution failure of `kind`.
    ///
    /// The highest layer that says anything about the failure decides, and within a layer the
    /// kind's own key beats `execution`: a tool's `execution = retry(4)` is not overridden by a
    /// crate default `transient = escalate`. `auth` and `outcome_unknown` are the exceptions
    /// that keep the default fail-closed: they follow only their own entry (built-in: `throw`
    /// and `escalate`), never a generic `execution` one, so a ladder written for failures that
    /// happened never re-sends a call that may already have taken effect.
    pub(crate) fn for_kind(&self, kind: ErrorKind) -> (PolicyKey, &Ladder, PolicyLayer) {
        let key = PolicyKey::Kind(kind);
        let (execution, execution_layer, execution_rank) = self
            .ranked(PolicyKey::Execution)
            .expect("the built-in layer always sets `execution`");
        match self.ranked(key) {
            Some((ladder, layer, rank)) if kind.follows_own_key() || rank <= execution_rank => {
                (key, ladder, layer)
            }
            _ => (PolicyKey::Execution, execution, execution_layer),
        }
    }

    /// The entry that answers invalid arguments.
    pub(crate) fn for_invalid_args(&self) -> (&Ladder, PolicyLayer) {
        self.get(PolicyKey::InvalidArgs)
            .expect("the built-in layer always sets `invalid_args`")
    }

    /// Every resolved entry.
    pub(crate) fn entries(&self) -> impl Iterator<Item = (PolicyKey, &Ladder, PolicyLayer)> {
        self.entries.iter().map(|(k, l, s, _)| (*k, l, *s))
    }
}
