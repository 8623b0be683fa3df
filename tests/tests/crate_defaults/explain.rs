//! `explain` tells the truth: an entry a higher layer always answers first is shown as
//! shadowed, and an `on_tool_error` entry that can never apply is refused at build time.

use agent_errors::prelude::*;
use agent_errors::testing::ScriptedModel;
use agent_errors::{
    AgentBuilder, ErrorKind,
    build::ConfigProblem,
    policy::{PolicyKey, PolicyLayer},
};

// The crate-wide `defaults!` these tools inherit (`execution = retry(3)`) is in `main.rs`.

/// Count the top-level keys of a JSON object.
#[tool(on_error(invalid_args = fix(agent = "json_fixer"), execution = [retry(2), escalate]))]
async fn count_keys(json: String) -> Result<usize, serde_json::Error> {
    let object: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&json)?;
    Ok(object.len())
}

/// Repairs trailing commas in the model's arguments.
#[fixer]
fn json_fixer(req: FixRequest) -> Result<Fix, FixerError> {
    Ok(Fix::args(req.raw_args.replace(",}", "}")))
}

fn builder() -> AgentBuilder {
    Agent::builder("json-analyst")
        .model(ScriptedModel::new())
        .tools(tools![count_keys])
        .fixers(fixers![json_fixer])
}

#[test]
fn an_agent_entry_the_tools_execution_always_answers_first_is_refused() {
    let error = builder()
        .on_tool_error("count_keys", policy!(timeout = retry(5)))
        .build()
        .unwrap_err();
    assert_eq!(
        error.problems(),
        [ConfigProblem::ShadowedAgentEntry {
            tool: "count_keys".into(),
            key: PolicyKey::Kind(ErrorKind::Timeout),
            by_key: PolicyKey::Execution,
            by_layer: PolicyLayer::Tool,
        }]
    );
    let message = error.to_string();
    for needle in [
        "`count_keys`",
        "`timeout`",
        "tool layer's `execution`",
        "on_error(...)",
    ] {
        assert!(message.contains(needle), "{needle} in {message}");
    }
}

#[test]
fn an_agent_entry_for_a_key_the_tool_sets_itself_is_refused() {
    let error = builder()
        .on_tool_error("count_keys", policy!(invalid_args = escalate))
        .build()
        .unwrap_err();
    assert!(matches!(
        error.problems(),
        [ConfigProblem::ShadowedAgentEntry {
            key: PolicyKey::InvalidArgs,
            by_key: PolicyKey::InvalidArgs,
            ..
        }]
    ));
}

#[test]
fn auth_never_follows_execution_so_an_agent_auth_entry_applies() {
    let agent = builder()
        .on_tool_error("count_keys", policy!(auth = escalate))
        .build()
        .unwrap();
    let explained = agent.explain("count_keys").unwrap();
    assert_eq!(
        explained.shadowed_by(PolicyKey::Kind(ErrorKind::Auth)),
        None
    );
    assert_eq!(explained.for_kind(ErrorKind::Auth).2, PolicyLayer::Agent);
}

#[test]
fn agent_wide_defaults_may_be_shadowed_and_explain_says_by_what() {
    let agent = builder()
        .on_any_tool_error(policy!(timeout = retry(5)))
        .build()
        .unwrap();
    let explained = agent.explain("count_keys").unwrap();
    assert_eq!(
        explained.shadowed_by(PolicyKey::Kind(ErrorKind::Timeout)),
        Some((PolicyKey::Execution, PolicyLayer::Tool))
    );
    let text = explained.to_string();
    assert_eq!(
        text,
        "policy for `count_keys`:\n\
         \x20 invalid_args  = fix(agent = \"json_fixer\", retries = 1)  <- tool\n\
         \x20 execution     = [retry(2), escalate]  <- tool\n\
         \x20 timeout       = retry(5)  <- agent, every tool  (shadowed by `execution` <- tool)\n\
         \x20 auth          = throw  <- built-in\n\
         \x20 outcome_unknown = escalate  <- built-in\n\
         \x20 execution     = retry(3)  <- crate defaults  (shadowed by `execution` <- tool)\n\
         \x20 warning: `count_keys`: `execution = retry(..)` (tool) can apply the call's effect \
         twice: a failure under `execution` may come after the service acted, and `count_keys` is \
         neither idempotent nor keyed. Mark it `idempotent` if a second call does no more than \
         the first, hand it the call's idempotency key and mark it `keyed`, or write \
         `retry(n, when_safe)`, which answers such a failure as an unknown outcome\n"
    );
    let shadowed = explained.shadowed();
    assert_eq!(shadowed.len(), 2);
}

#[test]
fn a_misspelled_fixer_gets_a_suggestion() {
    let error = Agent::builder("a")
        .model(ScriptedModel::new())
        .tools(tools![count_keys])
        .fixers(fixers![json_fixer])
        .on_any_tool_error(policy!(invalid_args = fix(agent = "jsn_fixer")))
        .on_tool_error("count_keys", policy!(auth = fallback(tool = "count_key")))
        .build()
        .unwrap_err();
    let message = error.to_string();
    assert!(message.contains("did you mean `count_keys`?"), "{message}");
    // The misspelled agent-wide fixer is shadowed by the tool's own `invalid_args`, so it is
    // checked on a tool where it applies.
    let error = Agent::builder("a")
        .model(ScriptedModel::new())
        .tool(agent_errors::ToolDef::new(
            "plain",
            "A tool.",
            |_: serde_json::Value| async move { Ok::<_, std::io::Error>("ok") },
        ))
        .fixers(fixers![json_fixer])
        .on_tool_error("plain", policy!(invalid_args = fix(agent = "jsn_fixer")))
        .build()
        .unwrap_err();
    let message = error.to_string();
    assert!(message.contains("did you mean `json_fixer`?"), "{message}");
}
