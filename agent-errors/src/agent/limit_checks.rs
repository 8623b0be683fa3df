//! What a build refuses in an agent's usage limits: a cap that could never apply, which would
//! otherwise compile, run and cap nothing.

use super::builtins::Builtins;
use crate::registry::{ConfigProblem, Registry, closest};
use crate::usage::UsageLimits;

/// The caps of `limits` that could never apply to an agent with `registry`'s tools (and the
/// built-in tools it offers) on the models named `models` (its model, and the one its output
/// policy falls back to): a money figure that is not a finite, non-negative amount, a per-tool cap on a tool it does not have (a typo caps nothing), a
/// final answer chosen past a cap the limits do not set, and a cost cap with no price for one
/// of its models (whose tokens would then cost nothing).
pub(super) fn caps_that_never_apply<'a>(
    limits: &UsageLimits,
    registry: &Registry,
    builtins: Builtins,
    models: impl IntoIterator<Item = &'a str>,
) -> Vec<ConfigProblem> {
    let called = |tool: &str| registry.tool(tool).is_some() || builtins.enabled(tool);
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
    problems.extend(
        limits
            .bad_money()
            .map(|figure| ConfigProblem::NotAnAmount { figure }),
    );
    problems
}
