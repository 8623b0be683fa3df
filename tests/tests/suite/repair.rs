//! `fix(builtin)`: arguments a model almost got right are repaired without a model, in the same
//! turn, and the repaired arguments pass the gate like any fixer's before the tool sees them.

use std::sync::{Arc, Mutex};

use agent_errors::approval::{Decision, PendingApproval};
use agent_errors::policy::{Action, Policy, PolicyKey};
use agent_errors::prelude::*;
use agent_errors::run::{UsageLimit, UsageLimits};
use agent_errors::testing::{ReportAssertions, ScriptedModel};
use agent_errors::{Event, Message, RunError, ToolCall, ToolResult, permission::Permission};

/// The tool results the model was last sent.
fn results(model: &ScriptedModel) -> Vec<ToolResult> {
    let request = model.last_request().expect("the model was asked");
    request
        .messages
        .into_iter()
        .filter_map(|message| match message {
            Message::Tool(result) => Some(result),
            _ => None,
        })
        .collect()
}

/// Searches the catalogue.
#[tool(on_error(invalid_args = fix(builtin)))]
fn search(query: String, max_results: u32, exact: bool) -> String {
    format!("{max_results} results for {query} (exact: {exact})")
}

#[tokio::test]
async fn broken_arguments_reach_the_tool_repaired_in_the_same_turn() {
    let sent = "Sure, calling it:\n```json\n{query: 'rust', maxResults: 3, exact: True,}\n```";
    let model = ScriptedModel::new().tool_call("search", sent).text("done");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tools(tools![search])
        .build()
        .unwrap();

    let outcome = agent.run_with_report("find rust").await;

    assert_eq!(outcome.result.unwrap(), "done");
    assert_eq!(model.calls(), 2, "no extra model round trip");
    let shown = results(&model);
    assert_eq!(shown.len(), 1);
    assert!(!shown[0].is_error, "{}", shown[0].content);
    assert_eq!(shown[0].content, "3 results for rust (exact: true)");
    outcome.report.assert_events(&["tool_rerun", "tool_fixed"]);
    let fixed_by = outcome.report.events.iter().find_map(|event| match event {
        Event::ToolFixed { fixer, .. } => Some(fixer.clone()),
        _ => None,
    });
    assert_eq!(fixed_by.as_deref(), Some("builtin"));
}

#[tokio::test]
async fn arguments_the_repair_cannot_complete_are_shown_to_the_model() {
    // `max_results` is missing: the repair does not invent it.
    let model = ScriptedModel::new()
        .tool_call("search", "{query: 'rust', exact: False}")
        .text("done");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tools(tools![search])
        .build()
        .unwrap();

    let outcome = agent.run_with_report("find rust").await;

    assert_eq!(outcome.result.unwrap(), "done");
    let shown = results(&model);
    assert!(shown[0].is_error);
    assert!(
        shown[0].content.contains("validation"),
        "{}",
        shown[0].content
    );
    outcome.report.assert_count("tool_rerun", 0);
}

/// Moves money; says what it was asked to move.
#[tool(on_error(invalid_args = fix(builtin)))]
fn transfer(amount: u64, to: String) -> String {
    format!("moved {amount} to {to}")
}

#[tokio::test]
async fn repaired_arguments_pass_the_permission_hook_before_the_tool() {
    let asked = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&asked);
    let model = ScriptedModel::new()
        .tool_call("transfer", "{amount: 1000, to: 'mallory'}")
        .tool_call("transfer", "{'Amount': 5, 'TO': 'bob'}")
        .text("done");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tools(tools![transfer])
        // A hook that reads JSON: text it cannot read is the tool's parser's to refuse.
        .permission(move |call: &ToolCall| {
            seen.lock().unwrap().push(call.arguments.clone());
            let args: serde_json::Value = serde_json::from_str(&call.arguments).unwrap_or_default();
            match args["amount"].as_u64() {
                Some(amount) if amount > 10 => {
                    Permission::Deny("amounts over 10 need a person".into())
                }
                _ => Permission::Allow,
            }
        })
        .build()
        .unwrap();

    assert_eq!(agent.run("pay").await.unwrap(), "done");

    // The hook could not read the broken text; it was asked again with the repaired text
    // before the tool ran with it, and denied the large amount there.
    let asked = asked.lock().unwrap();
    assert_eq!(
        *asked,
        [
            "{amount: 1000, to: 'mallory'}",
            r#"{"amount":1000,"to":"mallory"}"#,
            "{'Amount': 5, 'TO': 'bob'}",
            r#"{"amount":5,"to":"bob"}"#,
        ]
    );
    let shown = results(&model);
    assert!(shown[0].is_error);
    assert!(shown[0].content.contains("amounts over 10 need a person"));
    assert_eq!(shown[1].content, "moved 5 to bob");
}

/// Counts words; no policy of its own.
#[tool]
fn count_words(text: String) -> usize {
    text.split_whitespace().count()
}

#[tokio::test]
async fn policy_macro_builder_and_explain_name_the_builtin_repair() {
    let by_macro = agent_errors::policy!(invalid_args = fix(builtin, retries = 2));
    let by_builder = Policy::new().on(PolicyKey::InvalidArgs, Action::fix_builtin(2).unwrap());
    assert_eq!(by_macro, by_builder);

    let model = ScriptedModel::new()
        .tool_call("count_words", r#"{"text": "one two three",}"#)
        .text("done");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tools(tools![count_words])
        .on_tool_error("count_words", by_macro)
        .build()
        .unwrap();
    let explained = agent.explain("count_words").unwrap().to_string();
    assert!(
        explained.contains("fix(builtin, retries = 2)"),
        "{explained}"
    );

    assert_eq!(agent.run("count").await.unwrap(), "done");
    assert_eq!(results(&model)[0].content, "3");
}

/// Sends money to someone; a person approves every call.
#[tool(approval = required, on_error(invalid_args = fix(builtin)))]
fn send(amount: u64, to: String) -> String {
    format!("sent {amount} to {to}")
}

#[tokio::test]
async fn a_person_approves_the_repaired_arguments_not_only_the_broken_text() {
    let asked = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&asked);
    let model = ScriptedModel::new()
        .tool_call("send", "{amount: 5, to: 'bob'}")
        .tool_call("send", "{amount: 7, to: 'eve'}")
        .text("done");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tools(tools![send])
        .approver(move |pending: &PendingApproval| {
            let mut asked = seen.lock().unwrap();
            asked.push(pending.arguments.clone());
            // The broken texts and bob's repaired call are approved; eve's is not.
            if pending.arguments.contains("\"eve\"") {
                Decision::Deny("not eve".into())
            } else {
                Decision::Approve
            }
        })
        .build()
        .unwrap();

    assert_eq!(agent.run("pay").await.unwrap(), "done");

    assert_eq!(
        *asked.lock().unwrap(),
        [
            "{amount: 5, to: 'bob'}",
            r#"{"amount":5,"to":"bob"}"#,
            "{amount: 7, to: 'eve'}",
            r#"{"amount":7,"to":"eve"}"#,
        ]
    );
    let shown = results(&model);
    assert_eq!(shown[0].content, "sent 5 to bob");
    assert!(shown[1].is_error, "{}", shown[1].content);
    assert!(!shown[1].content.contains("sent"), "{}", shown[1].content);
}

#[tokio::test]
async fn a_repaired_call_counts_once_against_the_tools_cap() {
    let model = ScriptedModel::new()
        .tool_call("search", "{query: 'a', max_results: 1, exact: True}")
        .tool_call("search", "{query: 'b', max_results: 1, exact: True}")
        .text("done");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tools(tools![search])
        .usage_limits(UsageLimits::new().max_calls_of("search", 1))
        .build()
        .unwrap();

    let error = agent.run("find").await.unwrap_err();

    // The first call, repaired, ran once within the cap; the second, repaired too, is past it.
    let RunError::UsageLimit(exceeded) = error else {
        panic!("the run ended at the cap, not with {error}");
    };
    assert_eq!(
        exceeded.limit,
        UsageLimit::ToolCallsOf {
            tool: "search".into()
        }
    );
    let shown = results(&model);
    assert_eq!(shown[0].content, "1 results for a (exact: true)");
}

/// Looks a city up; no policy of its own.
#[tool]
fn weather(city: String, days: u32) -> String {
    format!("{days} days of sun in {city}")
}

#[tokio::test]
async fn the_recommended_preset_repairs_first_then_shows_the_model_what_is_wrong() {
    let model = ScriptedModel::new()
        .tool_call("weather", "```json\n{'city': 'Oslo', 'Days': 2,}\n```")
        .tool_call("weather", "{city: 'Oslo'}")
        .text("done");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tools(tools![weather])
        .recommended()
        .build()
        .unwrap();
    let explained = agent.explain("weather").unwrap().to_string();
    assert!(
        explained.contains("invalid_args  = [fix(builtin), escalate]  <- recommended preset"),
        "{explained}"
    );

    assert_eq!(agent.run("weather").await.unwrap(), "done");

    let shown = results(&model);
    assert_eq!(shown[0].content, "2 days of sun in Oslo");
    // `days` is missing: nothing to repair without guessing, so the model is told what is
    // wrong with what it sent.
    assert!(shown[1].is_error);
    assert!(
        shown[1].content.contains(r#""kind":"validation""#),
        "{}",
        shown[1].content
    );
}
