//! The crate's headline usage, run through the agent loop: macros, an agent-level override, an
//! `on_llm_error` handler, and `run(..).await?`.

use std::io;
use std::time::Duration;

use agent_errors::policy::PolicyKey;
use agent_errors::prelude::*;
use agent_errors::testing::{ReportAssertions, ScriptedModel};

// The crate-wide `defaults!` these tools inherit (`execution = retry(3)`) is in `main.rs`.

#[derive(Debug, thiserror::Error)]
#[error("not a JSON object")]
struct CountError;

/// Count the top-level keys of a JSON object.
#[tool(on_error(invalid_args = fix(agent = "json_fixer"), execution = [retry(2), escalate]))]
async fn count_keys(json: String) -> Result<usize, CountError> {
    match serde_json::from_str::<serde_json::Value>(&json) {
        Ok(serde_json::Value::Object(map)) => Ok(map.len()),
        _ => Err(CountError),
    }
}

/// Repairs a trailing comma.
#[fixer]
fn json_fixer(req: FixRequest) -> Result<Fix, FixerError> {
    Ok(Fix::args(req.raw_args.replace(",}", "}")))
}

#[tokio::test(start_paused = true)]
async fn the_sketch_runs_end_to_end() -> Result<(), Box<dyn std::error::Error>> {
    let model = ScriptedModel::new()
        .error(io::Error::from(io::ErrorKind::ConnectionReset))
        // A trailing comma: invalid arguments, repaired by the fixer within the call.
        .tool_call(
            "count_keys",
            r#"{"json": "{\"name\": \"world\", \"age\": 30}",}"#,
        )
        .text("2");
    let agent = Agent::builder("json-analyst")
        .model(model.clone())
        .tools(tools![count_keys])
        .fixers(fixers![json_fixer])
        // The tool's own `execution` answers every other kind first: only `auth` (which never
        // follows `execution`) can be overridden here.
        .on_tool_error("count_keys", policy!(auth = escalate))
        .on_llm_error(|_err, _attempt| LlmErrorDecision::retry(3, Duration::from_millis(500)))
        .build()?;

    // A run is Send: it can be spawned.
    let spawned = tokio::spawn({
        let agent = agent.clone();
        async move {
            agent
                .run_with_report("How many keys? {name: world, age: 30}")
                .await
        }
    });
    let outcome = spawned.await?;
    assert_eq!(outcome.result?, "2");
    outcome
        .report
        .assert_events(&["llm_retry", "tool_rerun", "tool_fixed"])
        .assert_turns(2)
        .assert_model_calls(3);

    let explained = agent.explain("count_keys").expect("a registered tool");
    assert_eq!(
        explained.source_of(PolicyKey::Execution),
        Some(agent_errors::policy::PolicyLayer::Tool)
    );
    assert_eq!(
        explained.source_of(PolicyKey::Kind(agent_errors::ErrorKind::Auth)),
        Some(agent_errors::policy::PolicyLayer::Agent)
    );
    Ok(())
}
