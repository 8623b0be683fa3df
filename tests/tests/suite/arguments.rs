//! The model's arguments: a value of the wrong type is reported with the parameter it was meant
//! for, and arguments that give a key twice never reach a permission hook or a tool.

use std::sync::{Arc, Mutex};

use agent_errors::prelude::*;
use agent_errors::testing::ScriptedModel;
use agent_errors::{Message, ToolCall, permission::Permission};

/// The error results the model was sent, as JSON, in order.
fn error_results(model: &ScriptedModel) -> Vec<serde_json::Value> {
    let request = model.last_request().expect("the model was asked");
    request
        .messages
        .iter()
        .filter_map(|message| match message {
            Message::Tool(result) if result.is_error => {
                Some(serde_json::from_str(&result.content).expect("an error result is JSON"))
            }
            _ => None,
        })
        .collect()
}

/// Reserves seats.
#[tool]
fn reserve(count: u32) -> String {
    format!("{count} seats")
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Line {
    /// The product.
    id: u64,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Order {
    /// What to ship.
    items: Vec<Line>,
}

/// Places an order.
#[tool]
fn place(#[args] order: Order) -> u64 {
    order.items.iter().map(|line| line.id).sum()
}

#[tokio::test]
async fn a_value_of_the_wrong_type_is_reported_with_its_parameter() {
    let model = ScriptedModel::new()
        .tool_call("reserve", r#"{"count":"abc"}"#)
        .tool_call("place", r#"{"items": [{"id": 1}, {"id": 2}, {"id": "x"}]}"#)
        .text("done");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tools(tools![reserve, place])
        .build()
        .unwrap();
    assert_eq!(agent.run("go").await.unwrap(), "done");
    let shown = error_results(&model);
    assert_eq!(shown.len(), 2, "{shown:?}");
    assert_eq!(shown[0]["kind"], "validation");
    assert_eq!(
        shown[0]["message"],
        "arguments do not fit the tool's parameters: `count`: invalid type: string \"abc\", \
         expected u32 at line 1 column 14"
    );
    let nested = shown[1]["message"].as_str().unwrap();
    assert!(
        nested.contains("`items[2].id`: invalid type: string \"x\", expected u64"),
        "{nested}"
    );
}

/// Books seats; its arguments are repaired by `seat_fixer`.
#[tool(on_error(invalid_args = fix(agent = "seat_fixer")))]
fn book(count: u32) -> String {
    format!("{count} booked")
}

#[tokio::test]
async fn a_fixer_is_told_which_parameter_did_not_fit() {
    let told = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&told);
    let fixer = agent_errors::build::FixerDef::from_fn("seat_fixer", move |request: FixRequest| {
        seen.lock().unwrap().push(request.failure.clone());
        Ok(Fix::args(r#"{"count": 2}"#))
    });
    let model = ScriptedModel::new()
        .tool_call("book", r#"{"count":"two"}"#)
        .text("done");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tools(tools![book])
        .fixer(fixer)
        .build()
        .unwrap();
    assert_eq!(agent.run("go").await.unwrap(), "done");
    let told = told.lock().unwrap();
    assert_eq!(told.len(), 1);
    assert!(told[0].contains("`count`: invalid type"), "{}", told[0]);
    assert!(error_results(&model).is_empty());
}

/// Transfers money; takes its arguments as they come.
fn transfer_tool(ran_with: Arc<Mutex<Vec<serde_json::Value>>>) -> ToolDef {
    ToolDef::new(
        "transfer",
        "Moves money.",
        move |args: serde_json::Value| {
            let ran_with = Arc::clone(&ran_with);
            async move {
                ran_with.lock().unwrap().push(args);
                Ok::<_, std::io::Error>("moved")
            }
        },
    )
}

/// Allows transfers of at most 10, and remembers what it was asked.
fn small_amounts_only(asked: Arc<Mutex<Vec<String>>>) -> impl Fn(&ToolCall) -> Permission {
    move |call: &ToolCall| {
        asked.lock().unwrap().push(call.arguments.clone());
        let args: serde_json::Value = serde_json::from_str(&call.arguments).unwrap_or_default();
        match args["amount"].as_u64() {
            Some(amount) if amount <= 10 => Permission::Allow,
            _ => Permission::Deny("amounts over 10 need a person".into()),
        }
    }
}

#[tokio::test]
async fn a_key_given_twice_reaches_neither_the_hook_nor_the_tool() {
    let ran_with = Arc::new(Mutex::new(Vec::new()));
    let asked = Arc::new(Mutex::new(Vec::new()));
    let model = ScriptedModel::new()
        .tool_call("transfer", r#"{"amount": 1, "amount": 1000}"#)
        .tool_call(
            "transfer",
            r#"{"to": {"iban": "A", "iban": "B"}, "amount": 5}"#,
        )
        .tool_call("transfer", r#"{"amount": 5}"#)
        .text("done");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tool(transfer_tool(Arc::clone(&ran_with)))
        .permission(small_amounts_only(Arc::clone(&asked)))
        .build()
        .unwrap();
    assert_eq!(agent.run("go").await.unwrap(), "done");

    assert_eq!(asked.lock().unwrap().as_slice(), [r#"{"amount": 5}"#]);
    assert_eq!(
        ran_with.lock().unwrap().as_slice(),
        [serde_json::json!({"amount": 5})]
    );
    let shown = error_results(&model);
    assert_eq!(shown.len(), 2, "{shown:?}");
    assert_eq!(shown[0]["kind"], "validation");
    let top = shown[0]["message"].as_str().unwrap();
    assert!(top.contains("duplicate key `amount`"), "{top}");
    let nested = shown[1]["message"].as_str().unwrap();
    assert!(nested.contains("`to`: duplicate key `iban`"), "{nested}");
}

/// Counts keys of an object the model sends; repaired by `dedupe`.
#[tool(on_error(invalid_args = fix(agent = "dedupe", retries = 2)))]
fn count_keys(object: serde_json::Map<String, serde_json::Value>) -> usize {
    object.len()
}

#[tokio::test]
async fn a_fixer_may_repair_a_duplicate_but_not_write_one() {
    let answers = Arc::new(Mutex::new(vec![
        // The fixer's first answer repeats a key too: refused like the model's.
        r#"{"object": {"a": 1, "a": 2}}"#,
        r#"{"object": {"a": 1}}"#,
    ]));
    let failures = Arc::new(Mutex::new(Vec::new()));
    let (next, told) = (Arc::clone(&answers), Arc::clone(&failures));
    let fixer = agent_errors::build::FixerDef::from_fn("dedupe", move |request: FixRequest| {
        told.lock().unwrap().push(request.failure.clone());
        Ok(Fix::args(next.lock().unwrap().remove(0)))
    });
    let model = ScriptedModel::new()
        .tool_call("count_keys", r#"{"object": {"b": 1, "b": 1}}"#)
        .text("done");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tools(tools![count_keys])
        .fixer(fixer)
        .build()
        .unwrap();
    let outcome = agent.run_with_report("go").await;
    assert_eq!(outcome.result.unwrap(), "done");
    let failures = failures.lock().unwrap();
    assert_eq!(failures.len(), 2);
    assert!(
        failures[0].contains("`object`: duplicate key `b`"),
        "{}",
        failures[0]
    );
    assert!(
        failures[1].contains("`object`: duplicate key `a`"),
        "{}",
        failures[1]
    );
    assert!(error_results(&model).is_empty());
    let last = model.last_request().unwrap();
    assert!(
        matches!(last.messages.last(), Some(Message::Tool(result)) if result.content == "1"),
        "{:?}",
        last.messages.last()
    );
}

#[tokio::test]
async fn deeply_nested_arguments_fail_as_invalid_json_without_overflowing() {
    let ran_with = Arc::new(Mutex::new(Vec::new()));
    let deep = format!(
        r#"{{"amount": {}1{}}}"#,
        "[".repeat(50_000),
        "]".repeat(50_000)
    );
    let model = ScriptedModel::new()
        .tool_call("transfer", deep)
        .text("done");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tool(transfer_tool(Arc::clone(&ran_with)))
        .build()
        .unwrap();
    assert_eq!(agent.run("go").await.unwrap(), "done");
    assert!(ran_with.lock().unwrap().is_empty());
    let shown = error_results(&model);
    let message = shown[0]["message"].as_str().unwrap();
    assert!(message.contains("recursion limit exceeded"), "{message}");
}

/// Reserves seats in a row; counts its runs.
#[tool]
fn seat(count: u32, row: Option<Vec<String>>) -> String {
    SEAT_RUNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    format!("{count} seats in {row:?}")
}

static SEAT_RUNS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

#[tokio::test]
async fn a_tool_of_plain_parameters_refuses_a_key_given_twice_with_or_without_a_hook() {
    let asked = Arc::new(Mutex::new(Vec::new()));
    let model = ScriptedModel::new()
        .tool_call("seat", r#"{"count": 1, "count": 1000}"#)
        .text("done");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tools(tools![seat])
        .build()
        .unwrap();
    assert_eq!(agent.run("go").await.unwrap(), "done");
    let shown = error_results(&model);
    assert_eq!(shown.len(), 1, "{shown:?}");
    assert_eq!(shown[0]["kind"], "validation");
    let message = shown[0]["message"].as_str().unwrap();
    assert!(message.contains("duplicate key `count`"), "{message}");

    // With a hook, the hook is not asked about them either.
    let model = ScriptedModel::new()
        .tool_call("seat", r#"{"count": 1, "count": 1000}"#)
        .tool_call("seat", r#"{"count": 2}"#)
        .text("done");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tools(tools![seat])
        .permission({
            let asked = Arc::clone(&asked);
            move |call: &ToolCall| {
                asked.lock().unwrap().push(call.arguments.clone());
                Permission::Allow
            }
        })
        .build()
        .unwrap();
    assert_eq!(agent.run("go").await.unwrap(), "done");
    assert_eq!(asked.lock().unwrap().as_slice(), [r#"{"count": 2}"#]);
    assert_eq!(SEAT_RUNS.load(std::sync::atomic::Ordering::SeqCst), 1);
}
