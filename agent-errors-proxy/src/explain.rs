//! `--explain TOOL`: the policy a proxied tool resolved to, key by key, and the table of the
//! file (or the preset, or the built-in default) each key came from.

use std::fmt::Write as _;

use agent_errors::policy::PolicyLayer;

use crate::upstream::Upstreams;

/// The explanation, or `None` when no server offers `tool`.
pub(crate) fn explain(upstreams: &Upstreams, tool: &str) -> Option<String> {
    let explained = upstreams.registry.explain(tool)?;
    let origin = upstreams.origins.get(tool)?;
    let server = format!("[servers.{}]", origin.server);
    let table = format!("[servers.{}.tools.{}]", origin.server, origin.upstream_name);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{tool}: `{}` of the server `{}`",
        origin.upstream_name, origin.server
    );
    let facts = upstreams.registry.tool(tool).map(|t| {
        format!(
            "idempotent: {}, keyed: {}, needs approval: {}, timeout: {}",
            t.is_idempotent(),
            t.is_keyed(),
            t.is_approval_required(),
            t.timeout()
                .map_or_else(|| "none".to_owned(), |d| format!("{d:?}")),
        )
    });
    if let Some(facts) = facts {
        let _ = writeln!(out, "  {facts}");
    }
    for (key, ladder, layer) in explained.entries() {
        let from = match layer {
            PolicyLayer::Tool => format!("{table} on_error"),
            PolicyLayer::Agent | PolicyLayer::AgentDefaults => format!("{server} on_error"),
            PolicyLayer::CrateDefaults => "[defaults] on_error".to_owned(),
            PolicyLayer::Recommended => "preset = \"recommended\"".to_owned(),
            PolicyLayer::BuiltIn => "the built-in default (fail-closed)".to_owned(),
        };
        let _ = writeln!(out, "  {:<13} = {ladder:<40} from {from}", key.as_str());
    }
    for shadowed in explained.shadowed() {
        let _ = writeln!(
            out,
            "  note: `{} = {}` ({} layer) never decides: `{}` of the {} layer answers those failures first",
            shadowed.key, shadowed.ladder, shadowed.layer, shadowed.by_key, shadowed.by_layer
        );
    }
    for warning in explained.warnings() {
        let _ = writeln!(out, "  warning: {warning}");
    }
    Some(out)
}
