//! The registry: the tools and fixers an agent has, the agent-level policies, and the start-up
//! validation that refuses a configuration that would fail at 3am. Calls are run against it
//! with [`Registry::execute`] (the executor, one floor up in `executor/`, adds that method).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use std::sync::Arc;

use crate::chat::ToolSpec;
use crate::classify::Classifier;
use crate::explain::{ConfigWarning, Explanation};
use crate::fix::FixerDef;
use crate::observe::ToolMeters;
use crate::policy::{Action, Layers, Policy, PolicyLayer, ResolvedPolicy};
use crate::reconcile::ReconcilerDef;
use crate::tool::ToolDef;

mod preset;
mod problem;

pub use problem::{ConfigError, ConfigProblem};
pub(crate) use problem::{caps_that_never_apply, closest};

/// Collects tools, fixers and agent-level policies; `build` validates them.
///
/// # Examples
///
/// A registry for a loop of your own (an [`Agent`](crate::Agent) builds one for you):
///
/// ```
/// use agent_errors::{Fix, Registry, policy};
/// use agent_errors::build::FixerDef;
/// use agent_errors::testing::echo_tool;
///
/// let registry = Registry::builder()
///     .tools([echo_tool("search"), echo_tool("fetch")])
///     .fixer(FixerDef::from_fn("trim", |req| Ok(Fix::args(req.raw_args.trim()))))
///     .on_tool_error("fetch", policy!(execution = [retry(3), fallback(tool = "search")]))
///     .build()?;
/// assert_eq!(registry.tool_names().collect::<Vec<_>>(), ["search", "fetch"]);
/// # Ok::<(), agent_errors::build::ConfigError>(())
/// ```
#[derive(Debug, Default, Clone)]
pub struct RegistryBuilder {
    tools: Vec<ToolDef>,
    fixers: Vec<FixerDef>,
    reconcilers: Vec<ReconcilerDef>,
    agent_policies: Vec<(String, Policy)>,
    agent_defaults: Option<Policy>,
    classifier: Option<Arc<Classifier>>,
}

impl RegistryBuilder {
    /// Adds one tool.
    #[must_use]
    pub fn tool(mut self, tool: ToolDef) -> Self {
        self.tools.push(tool);
        self
    }

    /// Adds tools (`tools![a, b]`).
    #[must_use]
    pub fn tools(mut self, tools: impl IntoIterator<Item = ToolDef>) -> Self {
        self.tools.extend(tools);
        self
    }

    /// Adds one fixer.
    #[must_use]
    pub fn fixer(mut self, fixer: FixerDef) -> Self {
        self.fixers.push(fixer);
        self
    }

    /// Adds fixers (`fixers![a, b]`).
    #[must_use]
    pub fn fixers(mut self, fixers: impl IntoIterator<Item = FixerDef>) -> Self {
        self.fixers.extend(fixers);
        self
    }

    /// Adds one reconciler, for the tools that name it (`reconcile = "name"`): see
    /// [`ToolDef::with_reconcile`].
    #[must_use]
    pub fn reconciler(mut self, reconciler: ReconcilerDef) -> Self {
        self.reconcilers.push(reconciler);
        self
    }

    /// Sets the agent-level policy for one tool (the second layer). Set twice, the keys merge
    /// and the later entry wins.
    #[must_use]
    pub fn on_tool_error(mut self, tool: impl Into<String>, policy: Policy) -> Self {
        let tool = tool.into();
        match self.agent_policies.iter_mut().find(|(t, _)| *t == tool) {
            Some((_, existing)) => *existing = std::mem::take(existing).merged(&policy),
            None => self.agent_policies.push((tool, policy)),
        }
        self
    }

    /// Sets the agent's policy for every tool: below each tool's own policy and its
    /// `on_tool_error`, above the crate's `defaults!`. Set twice, the keys merge.
    #[must_use]
    pub fn on_any_tool_error(mut self, policy: Policy) -> Self {
        let merged = self.agent_defaults.take().unwrap_or_default();
        self.agent_defaults = Some(merged.merged(&policy));
        self
    }

    /// Puts the recommended preset below the agent-level policy for every tool (the same as
    /// `on_any_tool_error(Policy::recommended())`): see [`Policy::recommended`] for what it
    /// does, rule by rule. Entries of `on_any_tool_error`, `on_tool_error` and the tools' own
    /// win key by key.
    ///
    /// ```
    /// use agent_errors::{ErrorKind, Registry};
    /// use agent_errors::policy::PolicyLayer;
    /// use agent_errors::testing::echo_tool;
    ///
    /// let registry = Registry::builder().tool(echo_tool("search")).recommended().build()?;
    /// let explained = registry.explain("search").expect("registered");
    /// assert_eq!(explained.for_kind(ErrorKind::Timeout).2, PolicyLayer::Recommended);
    /// # Ok::<(), agent_errors::build::ConfigError>(())
    /// ```
    #[must_use]
    pub fn recommended(self) -> Self {
        self.on_any_tool_error(Policy::recommended())
    }

    /// Classifies tool failures with `classifier`'s rules, then the process-wide ones: two
    /// registries (or agents) in one process can tell their own error types apart differently.
    #[must_use]
    pub fn classifier(mut self, classifier: Classifier) -> Self {
        self.classifier = Some(Arc::new(classifier.with_global_rules()));
        self
    }

    /// Validates everything and builds the registry; lists every problem when it refuses.
    pub fn build(self) -> Result<Registry, ConfigError> {
        let mut problems = Vec::new();
        let mut index: NameIndex =
            HashMap::with_capacity_and_hasher(self.tools.len(), Default::default());
        for (i, tool) in self.tools.iter().enumerate() {
            if index.insert(tool.name().to_owned(), i).is_some() {
                problems.push(ConfigProblem::DuplicateTool(tool.name().to_owned()));
            }
        }
        let mut fixers = HashMap::with_capacity(self.fixers.len());
        for fixer in self.fixers {
            let name = fixer.name().to_owned();
            if fixers.insert(name.clone(), fixer).is_some() {
                problems.push(ConfigProblem::DuplicateFixer(name));
            }
        }
        let reconcilers = reconcilers_of(self.reconcilers, &self.tools, &mut problems);
        let mut agent_policies: HashMap<String, Policy> = HashMap::new();
        for (tool, policy) in self.agent_policies {
            if !index.contains_key(&tool) {
                problems.push(ConfigProblem::UnknownToolPolicy(tool.clone()));
            }
            agent_policies.insert(tool, policy);
        }
        let resolved: Vec<ResolvedPolicy> = self
            .tools
            .iter()
            .map(|t| {
                ResolvedPolicy::resolve(Layers {
                    tool: Some(t.policy()),
                    agent: agent_policies.get(t.name()),
                    agent_defaults: self.agent_defaults.as_ref(),
                    crate_defaults: t.crate_defaults(),
                })
            })
            .collect();
        for (tool, policy) in self.tools.iter().zip(&resolved) {
            check_names(tool, policy, &index, &fixers, &mut problems);
            check_shadowed(tool, policy, &mut problems);
        }
        if !problems.is_empty() {
            return Err(ConfigError::new(problems));
        }
        let warnings = preset::warnings(&self.tools, &resolved);
        let tools = preset::check_outputs(self.tools, &resolved);
        Ok(Registry {
            needs_context: tools.iter().any(|t| !t.required_context().is_empty()),
            specs: tools.iter().map(ToolDef::spec).collect(),
            meters: tools.iter().map(|t| ToolMeters::new(t.name())).collect(),
            tools,
            warnings,
            resolved,
            index,
            fixers,
            reconcilers,
            classifier: self.classifier,
        })
    }
}

/// The reconcilers by name, each name once, and every name a tool gives one of them.
fn reconcilers_of(
    given: Vec<ReconcilerDef>,
    tools: &[ToolDef],
    problems: &mut Vec<ConfigProblem>,
) -> HashMap<String, ReconcilerDef> {
    let mut reconcilers = HashMap::with_capacity(given.len());
    for reconciler in given {
        let name = reconciler.name().to_owned();
        if reconcilers.insert(name.clone(), reconciler).is_some() {
            problems.push(ConfigProblem::DuplicateReconciler(name));
        }
    }
    for tool in tools {
        let Some(name) = tool.reconciler() else {
            continue;
        };
        if !reconcilers.contains_key(name) {
            problems.push(ConfigProblem::UnknownReconciler {
                tool: tool.name().to_owned(),
                reconciler: name.to_owned(),
                did_you_mean: closest(name, reconcilers.keys().map(String::as_str)),
            });
        }
    }
    reconcilers
}

type NameIndex = HashMap<String, usize, BuildHasherDefault<NameHasher>>;

/// The fixers and fallbacks `tool`'s policy names exist, `retry` only under a key whose failures
/// are retried, and `degrade` only on an optional tool.
fn check_names(
    tool: &ToolDef,
    policy: &ResolvedPolicy,
    index: &NameIndex,
    fixers: &HashMap<String, FixerDef>,
    problems: &mut Vec<ConfigProblem>,
) {
    let name = || tool.name().to_owned();
    for (key, ladder, layer) in policy.entries() {
        for action in ladder.actions() {
            match action {
                Action::Fix(fix) if !fixers.contains_key(fix.agent.as_ref()) => {
                    problems.push(ConfigProblem::UnknownFixer {
                        tool: name(),
                        key,
                        layer,
                        fixer: fix.agent.to_string(),
                        did_you_mean: closest(&fix.agent, fixers.keys().map(String::as_str)),
                    });
                }
                Action::Fallback { tool: target } if target == tool.name() => {
                    problems.push(ConfigProblem::SelfFallback { tool: name(), key });
                }
                Action::Fallback { tool: target } if !index.contains_key(target.as_ref()) => {
                    problems.push(ConfigProblem::UnknownFallback {
                        tool: name(),
                        key,
                        layer,
                        fallback: target.to_string(),
                        did_you_mean: closest(target, index.keys().map(String::as_str)),
                    });
                }
                Action::Retry(_) if !key.can_retry() => {
                    problems.push(ConfigProblem::RetryNeverRuns {
                        tool: name(),
                        key,
                        layer,
                    });
                }
                Action::Degrade if !tool.is_optional() => {
                    problems.push(ConfigProblem::DegradeNotOptional {
                        tool: name(),
                        key,
                        layer,
                    });
                }
                _ => {}
            }
        }
    }
}

/// An `on_tool_error` entry names one tool on purpose: if a higher layer always decides in its
/// place, the user's intent is silently lost, so it is refused. Agent-wide defaults are meant to
/// be shadowed for some tools and are not checked.
fn check_shadowed(tool: &ToolDef, policy: &ResolvedPolicy, problems: &mut Vec<ConfigProblem>) {
    for shadowed in policy.shadowed() {
        if shadowed.layer == PolicyLayer::Agent {
            problems.push(ConfigProblem::ShadowedAgentEntry {
                tool: tool.name().to_owned(),
                key: shadowed.key,
                by_key: shadowed.by_key,
                by_layer: shadowed.by_layer,
            });
        }
    }
}

/// Validated tools and fixers with every tool's policy resolved: what an agent runs calls
/// against.
///
/// A registry is also the way to put the recovery layer inside an agent loop of your own: build
/// it once, make a [`RunContext`](crate::RunContext) per run, and answer each tool call the model makes with
/// [`execute`](Registry::execute) (or a whole turn with
/// [`execute_turn`](Registry::execute_turn)). Send every [`CallOutcome::Result`](crate::call::CallOutcome::Result) back to the
/// model; end the run on a [`CallOutcome::Stop`](crate::call::CallOutcome::Stop).
///
/// # Examples
///
/// ```
/// use agent_errors::{Registry, RunContext, ToolCall, ToolDef, call::CallOutcome};
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Args { city: String }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let weather = ToolDef::new("weather", "Today's weather in a city.", |args: Args| async move {
///     Ok::<_, std::io::Error>(format!("sunny in {}", args.city))
/// });
/// let registry = Registry::builder().tool(weather).build()?;
///
/// let ctx = RunContext::new();
/// let call = ToolCall::new("call_1", "weather", r#"{"city": "Lyon"}"#);
/// match registry.execute(&ctx, &call).await {
///     CallOutcome::Result(result) => assert_eq!(result.content, "sunny in Lyon"),
///     CallOutcome::Stop(stop) => panic!("the run ends: {stop}"),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Registry {
    tools: Vec<ToolDef>,
    resolved: Vec<ResolvedPolicy>,
    /// Each tool's metric keys, made once here rather than on every call.
    meters: Vec<ToolMeters>,
    specs: Arc<[ToolSpec]>,
    index: NameIndex,
    fixers: HashMap<String, FixerDef>,
    reconcilers: HashMap<String, ReconcilerDef>,
    classifier: Option<Arc<Classifier>>,
    /// Whether any tool needs a context value: found once here, so a run of tools that need
    /// none skips checking the values it was given.
    needs_context: bool,
    /// What the build warned about.
    warnings: Vec<ConfigWarning>,
}

impl Registry {
    /// The classifier given with [`RegistryBuilder::classifier`], if any.
    pub fn classifier(&self) -> Option<&Arc<Classifier>> {
        self.classifier.as_ref()
    }

    /// Starts a registry.
    pub fn builder() -> RegistryBuilder {
        RegistryBuilder::default()
    }

    /// The tool of that name.
    pub fn tool(&self, name: &str) -> Option<&ToolDef> {
        self.position(name).map(|i| &self.tools[i])
    }

    /// The tool of that name, its resolved policy and its metric keys: one lookup of the name.
    #[inline]
    pub(crate) fn entry(&self, name: &str) -> Option<(&ToolDef, &ResolvedPolicy, &ToolMeters)> {
        self.position(name)
            .map(|i| (&self.tools[i], &self.resolved[i], &self.meters[i]))
    }

    /// Where the tool of that name is. A few names are compared one by one (most differ in
    /// length, and a comparison stops there), which costs a call less than hashing its name;
    /// more are looked up in the index.
    #[inline]
    fn position(&self, name: &str) -> Option<usize> {
        if self.tools.len() <= MAX_SCANNED_NAMES {
            self.tools.iter().position(|tool| tool.name() == name)
        } else {
            self.indexed(name)
        }
    }

    /// The index's answer, out of line: inlined, the hashing would make every lookup save and
    /// restore the registers it needs, a few names or many.
    #[inline(never)]
    fn indexed(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
    }

    /// Every tool, in registration order.
    pub fn tools(&self) -> &[ToolDef] {
        &self.tools
    }

    /// Whether any tool needs a value from the run's context.
    pub(crate) fn needs_context(&self) -> bool {
        self.needs_context
    }

    /// Every tool as offered to a model, shared: cloning it does not copy the schemas.
    pub fn specs(&self) -> &Arc<[ToolSpec]> {
        &self.specs
    }

    /// The names of every tool, in registration order.
    pub fn tool_names(&self) -> impl Iterator<Item = &str> {
        self.tools.iter().map(|t| t.name())
    }

    /// The fixer of that name.
    pub fn fixer(&self, name: &str) -> Option<&FixerDef> {
        self.fixers.get(name)
    }

    /// The reconciler of that name.
    pub(crate) fn reconciler(&self, name: &str) -> Option<&ReconcilerDef> {
        self.reconcilers.get(name)
    }

    /// The reconciler `tool` names, when it names one.
    pub(crate) fn reconciler_of(&self, tool: &ToolDef) -> Option<&ReconcilerDef> {
        tool.reconciler().and_then(|name| self.reconciler(name))
    }

    /// A tool's resolved policy with the layer each key came from.
    pub fn explain(&self, tool: &str) -> Option<Explanation> {
        self.entry(tool).map(|(def, policy, _)| Explanation {
            tool: def.name().to_owned(),
            optional: def.is_optional(),
            policy: policy.clone(),
            warnings: self
                .warnings
                .iter()
                .filter(|warning| match warning {
                    ConfigWarning::RetryMayRepeatEffect { tool, .. } => tool == def.name(),
                })
                .cloned()
                .collect(),
            preset_output_check: def.has_preset_output_check(),
        })
    }

    /// Whether any tool's policy asks for the recommended preset.
    pub(crate) fn uses_recommended(&self) -> bool {
        self.resolved.iter().any(ResolvedPolicy::is_recommended)
    }

    /// What the build warned about: configurations it accepts that may not do what was meant,
    /// each also logged as a `tracing` warning when the registry was built (see
    /// [`ConfigWarning`]).
    pub fn warnings(&self) -> &[ConfigWarning] {
        &self.warnings
    }
}

/// Up to this many tools, a name is found by comparing it with each (see [`Registry::position`]).
const MAX_SCANNED_NAMES: usize = 8;

/// FNV-1a over a tool name. Every call looks its tool up by name, and SipHash's protection
/// against chosen keys buys nothing here: only registered names are ever inserted.
#[derive(Debug, Clone, Copy)]
struct NameHasher(u64);

impl Default for NameHasher {
    fn default() -> Self {
        NameHasher(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for NameHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry(names: &[String]) -> Registry {
        let tools = names.iter().map(|name| {
            ToolDef::new(name.clone(), "A tool.", |_: serde_json::Value| async {
                Ok::<_, std::io::Error>("ok")
            })
        });
        Registry::builder()
            .tools(tools)
            .build()
            .expect("distinct names")
    }

    /// A few names are compared one by one, more are looked up in the index: both find every
    /// tool, its policy and its meters at the same place, and miss a name that is not there.
    #[test]
    fn every_tool_is_found_by_name_with_a_few_tools_or_many() {
        for count in [1, MAX_SCANNED_NAMES, MAX_SCANNED_NAMES + 1, 20] {
            let names: Vec<String> = (0..count).map(|i| format!("tool_{i}")).collect();
            let registry = registry(&names);
            for name in &names {
                let (tool, _, _) = registry.entry(name).expect("a registered name");
                assert_eq!(tool.name(), name);
                assert_eq!(registry.tool(name).map(ToolDef::name), Some(name.as_str()));
            }
            for missing in ["", "tool_", "tool_99", "TOOL_0"] {
                assert!(
                    registry.entry(missing).is_none(),
                    "{missing} with {count} tools"
                );
            }
        }
    }
}
