//! What a registry does for the recommended preset and for retries that may repeat an effect,
//! once, when it is built: the preset's output check on the tools it covers, and a warning for
//! every `retry` that could apply a tool's effect twice.

use crate::ErrorKind;
use crate::explain::ConfigWarning;
use crate::policy::{Action, PolicyKey, ResolvedPolicy};
use crate::tool::ToolDef;

/// The preset's output check on every tool whose policy asks for the preset and that has no
/// check of its own.
pub(super) fn check_outputs(tools: Vec<ToolDef>, resolved: &[ResolvedPolicy]) -> Vec<ToolDef> {
    tools
        .into_iter()
        .zip(resolved)
        .map(|(tool, policy)| {
            if policy.is_recommended() {
                tool.with_preset_output_check()
            } else {
                tool
            }
        })
        .collect()
}

/// Keys whose failures may come after the service acted: a retry of them can repeat the effect.
fn may_follow_effect(key: PolicyKey) -> bool {
    match key {
        PolicyKey::Execution => true,
        PolicyKey::Kind(kind) => matches!(
            kind,
            ErrorKind::Transient | ErrorKind::Timeout | ErrorKind::ServerError
        ),
        PolicyKey::InvalidArgs => false,
    }
}

/// Every `retry` (not `when_safe`) that decides failures which may follow an effect, of a tool
/// that is neither idempotent nor keyed; each said as a `tracing` warning.
pub(super) fn warnings(tools: &[ToolDef], resolved: &[ResolvedPolicy]) -> Vec<ConfigWarning> {
    let mut warnings = Vec::new();
    for (tool, policy) in tools.iter().zip(resolved) {
        if tool.repeats_safely() {
            continue;
        }
        for (key, ladder, layer) in policy.entries() {
            let blind = ladder
                .actions()
                .iter()
                .any(|action| matches!(action, Action::Retry(retry) if !retry.when_safe));
            if blind && may_follow_effect(key) && policy.shadowed_by(key).is_none() {
                let warning = ConfigWarning::RetryMayRepeatEffect {
                    tool: tool.name().to_owned(),
                    key,
                    layer,
                };
                tracing::warn!(event = "retry_may_repeat_effect", tool = %tool.name(), %key, "{warning}");
                warnings.push(warning);
            }
        }
    }
    warnings
}
