//! Rules that span several nodes: a ladder's order, what a key can use, what a tool must have.

use syn::ext::IdentExt;

use crate::ast::ToolFn;
use crate::attr::{ActionKind, ActionNode, EntryNode, Key, PolicyNode, ToolArgs};
use crate::ctxt::Ctxt;

/// What the checks know about the tool a policy belongs to. `policy!` and `defaults!` have no
/// tool: the runtime registry checks what depends on one.
#[derive(Clone, Copy)]
pub(crate) struct ToolContext<'a> {
    pub(crate) name: &'a str,
    pub(crate) optional: bool,
}

/// Checks every entry of `policy`.
pub(crate) fn policy(policy: &PolicyNode, tool: Option<ToolContext<'_>>, cx: &Ctxt) {
    for entry in &policy.entries {
        ladder(entry, tool, cx);
    }
}

fn ladder(entry: &EntryNode, tool: Option<ToolContext<'_>>, cx: &Ctxt) {
    let key = entry.key.key;
    let actions = &entry.ladder.actions;
    if actions.is_empty() {
        cx.error_at(
            entry.ladder.span(),
            format_args!(
                "empty ladder: give at least one action, such as `[retry(3), escalate]`, \
                 or leave `{}` out to inherit it",
                key.name()
            ),
        );
    }
    let mut terminal: Option<&ActionNode> = None;
    for action in actions {
        match terminal {
            Some(end) => {
                cx.error_spanned_by(
                    &action.name,
                    format_args!(
                        "`{}` can never run: `{}` ends the ladder, so it must come last",
                        action.name.unraw(),
                        end.name.unraw()
                    ),
                );
                break;
            }
            None if action.kind.is_terminal() => terminal = Some(action),
            None => {}
        }
        self::action(key, action, tool, cx);
    }
}

fn action(key: Key, action: &ActionNode, tool: Option<ToolContext<'_>>, cx: &Ctxt) {
    match &action.kind {
        ActionKind::Retry { .. } if !key.can_retry() => {
            let why = match key {
                Key::InvalidArgs => {
                    "the same arguments fail the same way; use `fix(builtin)`, \
                     `fix(agent = \"...\")` or `escalate`"
                }
                _ => {
                    "failures of that kind are never retried (only `transient`, `timeout`, \
                     `quota` and `server_error` are)"
                }
            };
            cx.error_spanned_by(
                &action.name,
                format_args!("`retry` can't help `{}`: {why}", key.name()),
            );
        }
        ActionKind::Retry {
            initial: Some(initial),
            max: Some(max),
            ..
        } if initial.nanos > max.nanos => cx.error_spanned_by(
            &initial.lit,
            format_args!(
                "`initial` ({}) is longer than `max` ({}): `max` caps each computed delay",
                initial.lit.value(),
                max.lit.value()
            ),
        ),
        ActionKind::Degrade => {
            if let Some(tool) = tool.filter(|t| !t.optional) {
                cx.error_spanned_by(
                    &action.name,
                    format_args!(
                        "`degrade` drops `{}` from the run, so the tool must be marked \
                         `optional`: `#[tool(optional, on_error(...))]`",
                        tool.name
                    ),
                );
            }
        }
        ActionKind::Fallback { tool: target } if tool.is_some_and(|t| t.name == target.value()) => {
            cx.error_spanned_by(target, "a tool can't fall back to itself");
        }
        _ => {}
    }
}

/// The name a tool is offered under: `name = "..."`, else the function's name.
pub(crate) fn tool_name(args: &ToolArgs, func: &ToolFn) -> String {
    match &args.name {
        Some(lit) => lit.value(),
        None => func.head.ident.unraw().to_string(),
    }
}

/// Checks a `#[tool]`: its name, its description, `blocking` and its policy.
pub(crate) fn tool(args: &ToolArgs, func: &ToolFn, cx: &Ctxt) {
    let name = tool_name(args, func);
    if !is_valid_tool_name(&name) {
        let message = format!(
            "tool name `{name}` is not accepted by model APIs: use 1 to 64 ASCII letters, \
             digits, `_` or `-`"
        );
        match &args.name {
            Some(lit) => cx.error_spanned_by(lit, message),
            None => cx.error_spanned_by(
                &func.head.ident,
                format!("{message} (set `name = \"...\"`)"),
            ),
        }
    }
    match &args.description {
        Some(lit) if lit.value().trim().is_empty() => {
            cx.error_spanned_by(lit, "the description is empty: say what the tool does");
        }
        Some(_) => {}
        None if func.doc_description().is_none() => cx.error_spanned_by(
            &func.head.ident,
            "a tool needs a description: add a doc comment or `description = \"...\"`",
        ),
        None => {}
    }
    if let (Some(blocking), true) = (&args.blocking, func.is_async) {
        cx.error_spanned_by(
            blocking,
            "`blocking` runs a sync `fn` on tokio's blocking pool: an `async fn` must not block \
             its thread, so remove `blocking`, or make the function a plain `fn`",
        );
    }
    if let Some(on_error) = &args.on_error {
        let context = ToolContext {
            name: &name,
            optional: args.optional,
        };
        policy(on_error, Some(context), cx);
    }
}

fn is_valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}
