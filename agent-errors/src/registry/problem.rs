//! What a registry or agent refuses to build with, and why.

use std::fmt;

use crate::policy::{PolicyKey, PolicyLayer};
use crate::usage::{UsageLimit, UsageLimits};

/// One thing wrong with a configuration.
///
/// # Examples
///
/// A build refuses a policy that names a fixer nobody registered, and says which one was meant:
///
/// ```
/// use agent_errors::{Registry, policy};
/// use agent_errors::build::{ConfigProblem, FixerDef};
/// use agent_errors::testing::echo_tool;
///
/// let tool = echo_tool("search").with_policy(policy!(invalid_args = fix(agent = "jsn_fixer")));
/// let fixer = FixerDef::from_fn("json_fixer", |req| Ok(agent_errors::Fix::args(req.raw_args)));
/// let error = Registry::builder().tool(tool).fixer(fixer).build().unwrap_err();
/// for problem in error.problems() {
///     match problem {
///         ConfigProblem::UnknownFixer { fixer, did_you_mean, .. } => {
///             assert_eq!((fixer.as_str(), did_you_mean.as_deref()), ("jsn_fixer", Some("json_fixer")));
///         }
///         ConfigProblem::DuplicateTool(name) | ConfigProblem::UnknownToolPolicy(name) => panic!("{name}"),
///         other => panic!("unexpected: {other}"),
///     }
/// }
/// ```
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
        /// A registered fixer whose name is close, when one is.
        did_you_mean: Option<String>,
    },
    /// Two reconcilers share a name.
    DuplicateReconciler(String),
    /// A tool names a reconciler (`reconcile = "..."`) that is not registered.
    UnknownReconciler {
        /// The tool that names it.
        tool: String,
        /// The reconciler's name.
        reconciler: String,
        /// A registered reconciler whose name is close, when one is.
        did_you_mean: Option<String>,
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
        /// A registered tool whose name is close, when one is.
        did_you_mean: Option<String>,
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
    /// A `retry` rung under a key whose failures are never retried (`invalid_args`, `auth`,
    /// `not_found`, `validation`, `bug`, `unknown`, `outcome_unknown`): such a failure is called
    /// once whatever the policy says, so the rung would never run. The macros refuse it at
    /// compile time; a policy built in code is refused here.
    RetryNeverRuns {
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
    /// An `on_tool_error` entry for a tool can never apply: a higher layer always decides
    /// first (the tool's own `execution`, or its own entry for the same key).
    ShadowedAgentEntry {
        /// The tool.
        tool: String,
        /// The agent entry's key.
        key: PolicyKey,
        /// The key of the entry that decides instead.
        by_key: PolicyKey,
        /// That entry's layer.
        by_layer: PolicyLayer,
    },
    /// A setting that must be at least 1 was 0.
    ZeroLimit {
        /// The setting (`max_turns`, `breaker_threshold`).
        setting: &'static str,
    },
    /// Calls need a person's approval, but the agent can neither ask one (no approver) nor wait
    /// for one (no checkpoint store to resume the run from): every such call would end its run
    /// waiting for an answer that can never be given.
    NobodyToApprove {
        /// What needs approval: `` tool `transfer` ``, or the agent's `require_approval` rule.
        what: String,
    },
    /// The agent's usage limits cap the calls of a tool it does not have
    /// (`UsageLimits::max_calls_of`): no call would ever count against the cap.
    UnknownCappedTool {
        /// The tool named by the cap.
        tool: String,
        /// A tool of the agent whose name is close, when one is.
        did_you_mean: Option<String>,
    },
    /// The agent's usage limits choose a final answer (`UsageLimits::on_exceed` with
    /// `OnExceed::FinalAnswer`) past a cap they do not set: that stop could never happen.
    FinalAnswerForUnsetCap {
        /// The cap chosen for.
        limit: UsageLimit,
    },
    /// The agent's usage limits cap a run's cost (`UsageLimits::max_cost`) but give no price
    /// for one of the agent's models (its model, or the model its output policy falls back
    /// to): its tokens would cost nothing, and the cap would never be reached by them.
    UnpricedModel {
        /// The model's name, as `ChatModel::name` says.
        model: String,
    },
    /// A cost cap or a price in the agent's usage limits is not a finite, non-negative
    /// amount: a NaN cap is never passed and a negative price takes spending back.
    NotAnAmount {
        /// The figure, as the limits hold it.
        figure: String,
    },
}

impl fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigProblem::DuplicateTool(_)
            | ConfigProblem::DuplicateFixer(_)
            | ConfigProblem::UnknownFixer { .. }
            | ConfigProblem::DuplicateReconciler(_)
            | ConfigProblem::UnknownReconciler { .. }
            | ConfigProblem::UnknownFallback { .. }
            | ConfigProblem::ShadowedAgentEntry { .. }
            | ConfigProblem::SelfFallback { .. }
            | ConfigProblem::DegradeNotOptional { .. }
            | ConfigProblem::RetryNeverRuns { .. } => self.fmt_registry(f),
            ConfigProblem::UnknownToolPolicy(_)
            | ConfigProblem::MissingModel
            | ConfigProblem::ReservedToolName(_)
            | ConfigProblem::ZeroLimit { .. }
            | ConfigProblem::UnknownCappedTool { .. }
            | ConfigProblem::FinalAnswerForUnsetCap { .. }
            | ConfigProblem::UnpricedModel { .. }
            | ConfigProblem::NotAnAmount { .. }
            | ConfigProblem::NobodyToApprove { .. } => self.fmt_agent(f),
        }
    }
}

impl ConfigProblem {
    /// The problems of the registry's tools, fixers and policies.
    fn fmt_registry(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigProblem::DuplicateTool(name) => write!(
                f,
                "two tools are named `{name}`: rename one, or give the tools of one MCP server a prefix"
            ),
            ConfigProblem::DuplicateFixer(name) => write!(f, "two fixers are named `{name}`"),
            ConfigProblem::UnknownFixer {
                tool,
                key,
                layer,
                fixer,
                did_you_mean,
            } => {
                write!(
                    f,
                    "`{tool}`: `{key}` ({layer}) names fixer `{fixer}`, which is not registered"
                )?;
                suggest(f, did_you_mean.as_deref())
            }
            ConfigProblem::DuplicateReconciler(name) => {
                write!(f, "two reconcilers are named `{name}`")
            }
            ConfigProblem::UnknownReconciler {
                tool,
                reconciler,
                did_you_mean,
            } => {
                write!(
                    f,
                    "`{tool}` names reconciler `{reconciler}`, which is not registered: give it \
                     to the agent with `.reconciler(..)`"
                )?;
                suggest(f, did_you_mean.as_deref())
            }
            ConfigProblem::UnknownFallback {
                tool,
                key,
                layer,
                fallback,
                did_you_mean,
            } => {
                write!(
                    f,
                    "`{tool}`: `{key}` ({layer}) falls back to tool `{fallback}`, which is not \
                     registered"
                )?;
                suggest(f, did_you_mean.as_deref())
            }
            ConfigProblem::ShadowedAgentEntry {
                tool,
                key,
                by_key,
                by_layer,
            } => shadowed(f, tool, *key, *by_key, *by_layer),
            ConfigProblem::SelfFallback { tool, key } => {
                write!(f, "`{tool}`: `{key}` falls back to `{tool}` itself")
            }
            ConfigProblem::DegradeNotOptional { tool, key, layer } => write!(
                f,
                "`{tool}`: `{key}` ({layer}) says `degrade`, but the tool is not marked `optional`"
            ),
            ConfigProblem::RetryNeverRuns { tool, key, layer } => write!(
                f,
                "`{tool}`: `{key}` ({layer}) says `retry`, but those failures are never retried \
                 (the same call would fail the same way), so the rung would never run: use \
                 `escalate`, `fix(..)` or `fallback(..)`"
            ),
            // An agent's problems: written by `fmt_agent`.
            _ => Ok(()),
        }
    }

    /// The problems of an agent's own settings: its model, limits and approvals.
    fn fmt_agent(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
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
            ConfigProblem::UnknownCappedTool { tool, did_you_mean } => {
                write!(
                    f,
                    "the usage limits cap the calls of tool `{tool}`, which the agent does not \
                     have, so the cap would never count a call"
                )?;
                suggest(f, did_you_mean.as_deref())
            }
            ConfigProblem::FinalAnswerForUnsetCap { limit } => write!(
                f,
                "the usage limits choose a final answer past the limit on {limit}, which they do \
                 not set, so that stop could never happen: set the cap, or drop the `on_exceed`"
            ),
            ConfigProblem::UnpricedModel { model } => write!(
                f,
                "the usage limits cap the cost of a run but give no price for model `{model}`: \
                 its tokens would cost nothing and the cap would never be reached; add \
                 `.price(\"{model}\", ModelPrice::per_million_tokens(..))`"
            ),
            ConfigProblem::NotAnAmount { figure } => write!(
                f,
                "the usage limits' {figure} is not an amount of money (finite, not negative), \
                 so the cost cap would not hold"
            ),
            ConfigProblem::NobodyToApprove { what } => write!(
                f,
                "{what} requires a person's approval, but the agent can neither ask one (no \
                 `approver`) nor wait for one (no `checkpoints` store to resume the run from): \
                 add `.approver(...)` or `.checkpoints(...)` to the agent"
            ),
            // The registry's problems: written by `fmt_registry`.
            _ => Ok(()),
        }
    }
}

fn suggest(f: &mut fmt::Formatter<'_>, did_you_mean: Option<&str>) -> fmt::Result {
    match did_you_mean {
        Some(name) => write!(f, "; did you mean `{name}`?"),
        None => Ok(()),
    }
}

fn shadowed(
    f: &mut fmt::Formatter<'_>,
    tool: &str,
    key: PolicyKey,
    by_key: PolicyKey,
    by_layer: PolicyLayer,
) -> fmt::Result {
    write!(
        f,
        "`{tool}`: the agent's `{key}` entry can never apply: the {by_layer} layer's `{by_key}` \
         entry answers those failures first (the highest layer that mentions a failure's kind \
         or `execution` decides). "
    )?;
    if by_key == key {
        write!(
            f,
            "Change `{key}` in the tool's `on_error(...)`, or drop the agent's entry"
        )
    } else {
        write!(
            f,
            "Write `{key} = ...` in the tool's own `on_error(...)`, where it beats `{by_key}`, \
             or drop the agent's entry"
        )
    }
}

/// The caps of `limits` that could never apply to runs whose tools are those `called` says
/// (a registry's, and any built-in tools a loop offers) on the models named `models`: a money
/// figure that is not a finite, non-negative amount, a per-tool cap on a tool that is never
/// called (a typo caps nothing; the closest of `registry`'s tools is suggested), a final answer chosen
/// past a cap the limits do not set, and a cost cap with no price for one of the models (whose
/// tokens would then cost nothing). Both loops refuse these: ours when an agent is built or a
/// run is given its own limits, rig's when a guard is given them.
pub(crate) fn caps_that_never_apply<'a>(
    limits: &UsageLimits,
    registry: &super::Registry,
    called: impl Fn(&str) -> bool,
    models: impl IntoIterator<Item = &'a str>,
) -> Vec<ConfigProblem> {
    let mut problems: Vec<ConfigProblem> = limits
        .capped_tools()
        .filter(|tool| !called(tool))
        .map(|tool| ConfigProblem::UnknownCappedTool {
            tool: tool.to_owned(),
            did_you_mean: closest(tool, registry.tool_names()),
        })
        .collect();
    let unset = limits.final_answers_for_unset_caps();
    problems.extend(unset.map(|limit| ConfigProblem::FinalAnswerForUnsetCap {
        limit: limit.clone(),
    }));
    let unpriced = models
        .into_iter()
        .filter(|model| limits.leaves_unpriced(model));
    problems.extend(unpriced.map(|model| ConfigProblem::UnpricedModel {
        model: model.to_owned(),
    }));
    let money = limits.bad_money();
    problems.extend(money.map(|figure| ConfigProblem::NotAnAmount { figure }));
    problems
}

/// The closest of `names` to `wrong`, when it is close enough to be a typo.
pub(crate) fn closest<'a>(wrong: &str, names: impl Iterator<Item = &'a str>) -> Option<String> {
    let limit = (wrong.chars().count() / 3).max(1);
    names
        .map(|name| (edit_distance(wrong, name), name))
        .filter(|(distance, _)| *distance <= limit)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, name)| name.to_owned())
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(row[j + 1] + 1);
        }
    }
    row[b.len()]
}

/// The configuration was refused; every problem found is listed.
///
/// # Examples
///
/// Every problem is reported at once, not the first alone:
///
/// ```
/// use agent_errors::{Agent, Registry};
/// use agent_errors::testing::echo_tool;
///
/// let error = Registry::builder().tool(echo_tool("a")).tool(echo_tool("a")).build().unwrap_err();
/// assert_eq!(error.problems().len(), 1);
/// let error = Agent::builder("no-model").tool(echo_tool("a")).tool(echo_tool("a")).build().unwrap_err();
/// assert_eq!(error.problems().len(), 2); // the duplicate, and the missing model
/// eprintln!("{error}"); // one line per problem
/// ```
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_near_name_is_suggested_and_a_far_one_is_not() {
        let names = ["json_fixer", "url_fixer"];
        assert_eq!(
            closest("jsn_fixer", names.into_iter()).as_deref(),
            Some("json_fixer")
        );
        assert_eq!(closest("llm_repair", names.into_iter()), None);
    }
}
