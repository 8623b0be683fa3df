//! The registry: the tools and fixers an agent has, the agent-level policies, and the start-up
//! validation that refuses a configuration that would fail at 3am. Calls are run against it
//! with [`Registry::execute`] (the executor lives in `executor/`).

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};

use std::sync::Arc;

use crate::chat::{ToolCall, ToolSpec};
use crate::executor::{self, CallOutcome, RunContext};
use crate::fix::FixerDef;
use crate::observe::ToolMeters;
use crate::policy::{Action, Explanation, Policy, PolicyKey, PolicyLayer, ResolvedPolicy};
use crate::tool::ToolDef;

/// One thing wrong with a configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigProblem {
    /// Two tools share a name.
    DuplicateTool(String),
    /// Two fixers share a name.
    DuplicateFixer(String),
    /// A policy names a fixer that is not registered.
    UnknownFixer {
        /// The tool whose policy names it.
        tool: String,
        /// The key.
        key: PolicyKey,
        /// The layer the entry came from.
        layer: PolicyLayer,
        /// The fixer's name.
        fixer: String,
    },
    /// A policy names a fallback tool that is not registered.
    UnknownFallback {
        /// The tool whose policy names it.
        tool: String,
        /// The key.
        key: PolicyKey,
        /// The layer the entry came from.
        layer: PolicyLayer,
        /// The fallback's name.
        fallback: String,
    },
    /// A fallback points at the tool itself.
    SelfFallback {
        /// The tool.
        tool: String,
        /// The key.
        key: PolicyKey,
    },
    /// `degrade` reaches a tool that is not marked `optional`.
    DegradeNotOptional {
        /// The tool.
        tool: String,
        /// The key.
        key: PolicyKey,
        /// The layer the entry came from.
        layer: PolicyLayer,
    },
    /// `on_tool_error` names a tool that is not registered.
    UnknownToolPolicy(String),
    /// An agent was built without a model.
    MissingModel,
    /// A tool takes the name of a built-in tool (`escalate`, `throw_exception`).
    ReservedToolName(String),
    /// A setting that must be at least 1 was 0.
    ZeroLimit {
        /// The setting (`max_turns`, `breaker_threshold`).
        setting: &'static str,
    },
}

impl fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigProblem::DuplicateTool(name) => write!(f, "two tools are named `{name}`"),
            ConfigProblem::DuplicateFixer(name) => write!(f, "two fixers are named `{name}`"),
            ConfigProblem::UnknownFixer {
                tool,
                key,
                layer,
                fixer,
            } => write!(
                f,
                "`{tool}`: `{key}` ({layer}) names fixer `{fixer}`, which is not registered"
            ),
            ConfigProblem::UnknownFallback {
                tool,
                key,
                layer,
                fallback,
            } => write!(
                f,
                "`{tool}`: `{key}` ({layer}) falls back to tool `{fallback}`, which is not registered"
            ),
            ConfigProblem::SelfFallback { tool, key } => {
                write!(f, "`{tool}`: `{key}` falls back to `{tool}` itself")
            }
            ConfigProblem::DegradeNotOptional { tool, key, layer } => write!(
                f,
                "`{tool}`: `{key}` ({layer}) says `degrade`, but the tool is not marked `optional`"
            ),
            ConfigProblem::UnknownToolPolicy(name) => {
                write!(
                    f,
                    "on_tool_error names tool `{name}`, which is not registered"
                )
            }
            ConfigProblem::MissingModel => f.write_str("no model was set"),
            ConfigProblem::ReservedToolName(name) => {
                write!(f, "a tool is named `{name}`, the name of a built-in tool")
            }
            ConfigProblem::ZeroLimit { setting } => write!(f, "`{setting}` must be at least 1"),
        }
    }
}

/// The configuration was refused; every problem found is listed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    problems: Vec<ConfigProblem>,
}

impl ConfigError {
    pub(crate) fn new(problems: Vec<ConfigProblem>) -> Self {
        ConfigError { problems }
    }

    /// Every problem found.
    pub fn problems(&self) -> &[ConfigProblem] {
        &self.problems
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid agent configuration ({} problem",
            self.problems.len()
        )?;
        if self.problems.len() != 1 {
            f.write_str("s")?;
        }
        f.write_str(")")?;
        for p in &self.problems {
            write!(f, "\n  - {p}")?;
        }
        Ok(())
    }
}

/// Collects tools, fixers and agent-level policies; `build` validates them.
#[derive(Debug, Default, Clone)]
pub struct RegistryBuilder {
    tools: Vec<ToolDef>,
    fixers: Vec<FixerDef>,
    agent_policies: Vec<(String, Policy)>,
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

    /// Sets the agent-level policy for one tool (the second layer). Set twice, the keys merge
    /// and the later entry wins.
    #[must_use]
    pub fn on_tool_error(mut self, tool: impl Into<String>, policy: Policy) -> Self {
        let tool = tool.into();
        match self.agent_policies.iter_mut().find(|(t, _)| *t == tool) {
            Some((_, existing)) => {
                for (key, ladder) in policy.entries() {
                    *existing = std::mem::take(existing).on(key, ladder.clone());
                }
            }
            None => self.agent_policies.push((tool, policy)),
        }
        self
    }

    /// Validates everything and builds the registry; lists every problem when it refuses.
    pub fn build(self) -> Result<Registry, ConfigError> {
        let mut problems = Vec::new();
        let mut index: HashMap<String, usize, BuildHasherDefault<NameHasher>> =
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
                ResolvedPolicy::resolve(
                    t.policy(),
                    agent_policies.get(t.name()),
                    t.crate_defaults(),
                )
            })
            .collect();
        for (tool, policy) in self.tools.iter().zip(&resolved) {
            for (key, ladder, layer) in policy.entries() {
                for action in ladder.actions() {
                    match action {
                        Action::Fix(fix) if !fixers.contains_key(fix.agent.as_ref()) => problems
                            .push(ConfigProblem::UnknownFixer {
                                tool: tool.name().to_owned(),
                                key,
                                layer,
                                fixer: fix.agent.to_string(),
                            }),
                        Action::Fallback { tool: target } if target == tool.name() => problems
                            .push(ConfigProblem::SelfFallback {
                                tool: tool.name().to_owned(),
                                key,
                            }),
                        Action::Fallback { tool: target }
                            if !index.contains_key(target.as_ref()) =>
                        {
                            problems.push(ConfigProblem::UnknownFallback {
                                tool: tool.name().to_owned(),
                                key,
                                layer,
                                fallback: target.to_string(),
                            })
                        }
                        Action::Degrade if !tool.is_optional() => {
                            problems.push(ConfigProblem::DegradeNotOptional {
                                tool: tool.name().to_owned(),
                                key,
                                layer,
                            })
                        }
                        _ => {}
                    }
                }
            }
        }
        if !problems.is_empty() {
            return Err(ConfigError { problems });
        }
        Ok(Registry {
            specs: self.tools.iter().map(ToolDef::spec).collect(),
            meters: self
                .tools
                .iter()
                .map(|t| ToolMeters::new(t.name()))
                .collect(),
            tools: self.tools,
            resolved,
            index,
            fixers,
        })
    }
}

/// Validated tools and fixers with every tool's policy resolved: what an agent runs calls
/// against.
///
/// A registry is also the way to put the recovery layer inside an agent loop of your own: build
/// it once, make a [`RunContext`] per run, and answer each tool call the model makes with
/// [`execute`](Registry::execute) (or a whole turn with
/// [`execute_turn`](Registry::execute_turn)). Send every [`CallOutcome::Result`] back to the
/// model; end the run on a [`CallOutcome::Stop`].
///
/// ```
/// use agent_errors::{CallOutcome, Registry, RunContext, ToolCall, ToolDef};
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
    index: HashMap<String, usize, BuildHasherDefault<NameHasher>>,
    fixers: HashMap<String, FixerDef>,
}

impl Registry {
    /// Starts a registry.
    pub fn builder() -> RegistryBuilder {
        RegistryBuilder::default()
    }

    /// The tool of that name.
    pub fn tool(&self, name: &str) -> Option<&ToolDef> {
        self.index.get(name).map(|&i| &self.tools[i])
    }

    /// Runs one tool call through its resolved policy. Whatever happens, the call gets exactly
    /// one outcome: a result for the model, or a stop of the run. Cancelling `ctx`'s
    /// [`Cancellation`](crate::Cancellation) answers "operation cancelled".
    pub async fn execute(&self, ctx: &RunContext, call: &ToolCall) -> CallOutcome {
        executor::execute(self, ctx, call).await
    }

    /// Runs the tool calls of one model turn concurrently and returns their outcomes in the
    /// order of `calls`. Parallel failures of one tool in a turn count once for the per-run
    /// breaker (three lookups that miss together are one stumble), and a call that stops the
    /// run makes the calls still running answer "operation cancelled".
    pub async fn execute_turn(&self, ctx: &RunContext, calls: &[ToolCall]) -> Vec<CallOutcome> {
        let answer = |call| self.execute(ctx, call);
        executor::execute_turn(ctx, calls, answer, |o: &CallOutcome| o.stop().is_some()).await
    }

    /// The metric keys of the tool of that name.
    pub(crate) fn meters(&self, name: &str) -> Option<&ToolMeters> {
        self.index.get(name).map(|&i| &self.meters[i])
    }

    /// The tool and its resolved policy.
    pub(crate) fn entry(&self, name: &str) -> Option<(&ToolDef, &ResolvedPolicy)> {
        self.index
            .get(name)
            .map(|&i| (&self.tools[i], &self.resolved[i]))
    }

    /// Every tool, in registration order.
    pub fn tools(&self) -> &[ToolDef] {
        &self.tools
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

    /// A tool's resolved policy with the layer each key came from.
    pub fn explain(&self, tool: &str) -> Option<Explanation> {
        self.entry(tool).map(|(def, policy)| Explanation {
            tool: def.name().to_owned(),
            optional: def.is_optional(),
            policy: policy.clone(),
        })
    }
}

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
