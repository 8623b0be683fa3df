//! What an agent asks of the provider beyond the conversation: its request options on every
//! model call of a run, and the schema of a `Json<T>` output as structured output.

use agent_errors::testing::{ScriptedModel, echo_tool};
use agent_errors::{
    Agent, AgentBuilder, ChatRequest,
    llm::{RequestOptions, ResponseFormat, ToolChoice},
    run::Json,
};
use serde_json::json;

use crate::support::tools::count_keys;

/// What a judge agent answers.
#[derive(Debug, PartialEq, serde::Deserialize, schemars::JsonSchema)]
struct Verdict {
    /// Whether it is fine.
    ok: bool,
    /// Why not, when not.
    reason: Option<String>,
}

fn response_format(request: &ChatRequest) -> Option<&ResponseFormat> {
    request.options.response_format.as_ref()
}

#[tokio::test(start_paused = true)]
async fn a_json_agent_asks_for_its_output_schema_and_a_text_agent_does_not() {
    let judge_model = ScriptedModel::new().text(r#"{"ok": false, "reason": "late"}"#);
    let judge = AgentBuilder::<Json<Verdict>>::new("judge")
        .model(judge_model.clone())
        .build()
        .unwrap();
    let verdict = judge.run("Is it fine?").await.unwrap().0;
    assert_eq!(
        verdict,
        Verdict {
            ok: false,
            reason: Some("late".into())
        }
    );

    let asked = judge_model.last_request().unwrap();
    let Some(ResponseFormat::JsonSchema {
        name,
        schema,
        strict,
    }) = response_format(&asked)
    else {
        panic!("expected a JSON Schema format, got {:?}", asked.options);
    };
    assert_eq!(name, "Verdict");
    assert!(!strict, "schemars' schemas are not strict-compatible");
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["properties"]["ok"]["type"], "boolean");
    assert_eq!(
        schema["properties"]["ok"]["description"],
        "Whether it is fine."
    );
    assert_eq!(schema["required"], json!(["ok"]));

    let text_model = ScriptedModel::new().text("fine");
    let text = Agent::builder("plain")
        .model(text_model.clone())
        .build()
        .unwrap();
    text.run("Is it fine?").await.unwrap();
    assert_eq!(response_format(&text_model.last_request().unwrap()), None);
}

#[tokio::test(start_paused = true)]
async fn a_response_format_the_user_set_replaces_the_output_schema() {
    let model = ScriptedModel::new().text(r#"{"ok": true}"#);
    let agent = AgentBuilder::<Json<Verdict>>::new("judge")
        .model(model.clone())
        .request_options(RequestOptions::new().response_format(ResponseFormat::JsonObject))
        .build()
        .unwrap();
    agent.run("Is it fine?").await.unwrap();
    assert_eq!(
        response_format(&model.last_request().unwrap()),
        Some(&ResponseFormat::JsonObject)
    );
}

#[tokio::test(start_paused = true)]
async fn every_model_call_of_a_run_carries_the_agents_options() {
    let options = RequestOptions::new()
        .temperature(0.0)
        .seed(3)
        .stop(["END"])
        .tool_choice(ToolChoice::Auto)
        .parallel_tool_calls(false);
    let model = ScriptedModel::new()
        .tool_call("echo", json!({"text": "a"}))
        .tool_call("echo", json!({"text": "b"}))
        .text("done");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tool(echo_tool("echo"))
        .request_options(options.clone())
        .build()
        .unwrap();

    assert_eq!(agent.run("go").await.unwrap(), "done");
    let requests = model.requests();
    assert_eq!(requests.len(), 3);
    for request in &requests {
        assert_eq!(request.options, options);
    }
}

#[tokio::test(start_paused = true)]
async fn a_fixer_agent_sends_its_own_options_not_its_parents() {
    let fixer_model = ScriptedModel::new().text(r#"{"json": "{\"a\": 1}"}"#);
    let fixer_options = RequestOptions::new().temperature(0.0);
    let fixer = Agent::builder("fixer")
        .model(fixer_model.clone())
        .request_options(fixer_options.clone())
        .build()
        .unwrap()
        .into_fixer("json_fixer");
    let parent_options = RequestOptions::new().temperature(0.9).seed(1);
    let model = ScriptedModel::new()
        .tool_call("count_keys", json!({"json": "{a: 1}"}))
        .text("1");
    let agent = Agent::builder("parent")
        .model(model.clone())
        .tool(count_keys())
        .fixer(fixer)
        .request_options(parent_options.clone())
        .build()
        .unwrap();

    assert_eq!(agent.run("How many keys?").await.unwrap(), "1");
    assert_eq!(fixer_model.last_request().unwrap().options, fixer_options);
    assert!(model.requests().iter().all(|r| r.options == parent_options));
}
