//! Tools with state (`#[toolset]`), values given to one run (`Ctx<T>`), conversations that
//! continue, and the agent's own classifier and defaults: driven as a user would.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use agent_errors::classify::Classifier;
use agent_errors::prelude::*;
use agent_errors::testing::ScriptedModel;
use agent_errors::{
    ChatRequest, ErrorKind, Message, RunContext, RunOptions, ToolCall, ToolResult, crate_defaults,
    policy::{PolicyKey, PolicyLayer},
};

agent_errors::defaults!(on_error(execution = [retry(2), escalate]));

#[derive(Debug, thiserror::Error)]
#[error("no customer {0}")]
struct NoSuchCustomer(u64);

#[derive(Debug, thiserror::Error)]
#[error("the database is busy")]
struct Busy;

/// Who is asking: given per run, never shown to the model.
struct User {
    name: String,
}

/// A service holding state its tools share.
struct Crm {
    customers: Vec<String>,
    calls: AtomicU32,
    /// Fails this many lookups before answering.
    busy_for: u32,
}

#[toolset]
impl Crm {
    /// Looks a customer up by id.
    #[tool(on_error(transient = [retry(3), escalate]))]
    async fn lookup(&self, id: u64) -> Result<String, BoxError> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        if call < self.busy_for {
            return Err(Busy.into());
        }
        let index = usize::try_from(id).map_err(|_| NoSuchCustomer(id))?;
        self.customers
            .get(index)
            .cloned()
            .ok_or_else(|| NoSuchCustomer(id).into())
    }

    /// Greets the customer on behalf of the user asking.
    #[tool]
    fn greet(&self, user: Ctx<User>, customer: String) -> String {
        format!("{} greets {customer}", user.name)
    }

    /// Counts the customers.
    #[tool(name = "count")]
    fn count_customers() -> usize {
        3
    }

    #[fixer]
    fn id_fixer(&self, request: FixRequest) -> Result<Fix, FixerError> {
        // `{"id": "0"}` -> `{"id": 0}`: the model quoted a number.
        Ok(Fix::args(
            request
                .raw_args
                .replace("\": \"", "\": ")
                .replace("\"}", "}"),
        ))
    }
}

/// The user every run of the `crm` tools is for: `greet` needs one.
fn user() -> User {
    User { name: "lin".into() }
}

fn crm(busy_for: u32) -> Arc<Crm> {
    Arc::new(Crm {
        customers: vec!["ada".into(), "grace".into()],
        calls: AtomicU32::new(0),
        busy_for,
    })
}

fn classifier() -> Classifier {
    Classifier::new()
        .rule(|_: &Busy| Some(ErrorKind::Transient))
        .rule(|_: &NoSuchCustomer| Some(ErrorKind::NotFound))
}

fn tool_results(request: &ChatRequest) -> Vec<&ToolResult> {
    request
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(r) => Some(r),
            _ => None,
        })
        .collect()
}

#[test]
fn a_toolset_offers_its_methods_with_their_schemas_and_policies() {
    let tools = crm(0).tools();
    let names: Vec<&str> = tools.iter().map(|t| t.name()).collect();
    assert_eq!(names, ["lookup", "greet", "count"]);
    assert_eq!(tools[0].description(), "Looks a customer up by id.");
    assert_eq!(tools[0].parameters()["required"][0], "id");
    // The context parameter is not part of the schema.
    let greet = tools[1].parameters();
    assert!(greet["properties"].get("user").is_none(), "{greet}");
    assert!(greet["properties"].get("customer").is_some());
    // The crate's defaults reach method tools too.
    assert!(tools[0].crate_defaults().is_some());
    assert_eq!(crm(0).fixers()[0].name(), "id_fixer");
}

#[tokio::test(start_paused = true)]
async fn a_method_tool_shares_its_instance_and_recovers_under_its_policy() {
    let service = crm(2);
    let model = ScriptedModel::new()
        .tool_call("lookup", r#"{"id": 1}"#)
        .text("found grace");
    let agent = Agent::builder("crm")
        .model(model.clone())
        .tools(Arc::clone(&service).tools())
        .classifier(classifier())
        .build()
        .unwrap();

    let options = RunOptions::new().context(user());
    assert_eq!(
        agent.run_with("who is 1?", options).await.result.unwrap(),
        "found grace"
    );
    assert_eq!(service.calls.load(Ordering::SeqCst), 3);
    let request = model.last_request().unwrap();
    assert_eq!(tool_results(&request)[0].content, "grace");
}

#[tokio::test(start_paused = true)]
async fn a_fixer_method_repairs_a_call() {
    let service = crm(0);
    let model = ScriptedModel::new()
        .tool_call("lookup", r#"{"id": "0"}"#)
        .text("ada");
    let agent = Agent::builder("crm")
        .model(model.clone())
        .tools(Arc::clone(&service).tools())
        .fixers(service.fixers())
        .on_tool_error("lookup", policy!(invalid_args = fix(agent = "id_fixer")))
        .build()
        .unwrap();
    let options = RunOptions::new().context(user());
    assert_eq!(
        agent.run_with("who is 0?", options).await.result.unwrap(),
        "ada"
    );
    let request = model.last_request().unwrap();
    assert_eq!(tool_results(&request)[0].content, "ada");
}

#[tokio::test]
async fn a_tool_reads_the_runs_context_and_a_run_missing_one_is_refused_naming_tool_and_type() {
    let model = ScriptedModel::new()
        .tool_call("greet", r#"{"customer": "ada"}"#)
        .text("done")
        .tool_call("greet", r#"{"customer": "ada"}"#)
        .text("done");
    let agent = Agent::builder("crm")
        .model(model.clone())
        .tools(crm(0).tools())
        .build()
        .unwrap();

    let options = RunOptions::new().context(User { name: "lin".into() });
    let outcome = agent.run_with("greet ada", options).await;
    assert_eq!(outcome.result.unwrap(), "done");
    let request = model.last_request().unwrap();
    assert_eq!(tool_results(&request)[0].content, "lin greets ada");

    let asked = model.calls();
    let outcome = agent.run_with("greet ada", RunOptions::new()).await;
    match outcome.result {
        Err(agent_errors::RunError::MissingContext { tool, type_name }) => {
            assert_eq!(tool, "greet");
            assert!(type_name.ends_with("User"), "{type_name}");
        }
        other => panic!("a developer's error, before the model is asked: {other:?}"),
    }
    assert_eq!(model.calls(), asked, "the model was not asked");
}

#[tokio::test]
async fn a_registry_caller_missing_a_context_value_gets_an_error_result() {
    let registry = agent_errors::Registry::builder()
        .tools(crm(0).tools())
        .build()
        .unwrap();
    let call = ToolCall::new("c1", "greet", r#"{"customer": "bo"}"#);
    let outcome = registry.execute(&RunContext::new(), &call).await;
    let shown = outcome.result().unwrap();
    assert!(shown.is_error);
    assert!(shown.content.contains("User"), "{}", shown.content);
}

#[tokio::test]
async fn a_registry_caller_sets_the_context_on_the_run() {
    let registry = agent_errors::Registry::builder()
        .tools(crm(0).tools())
        .build()
        .unwrap();
    let ctx = RunContext::new()
        .with_extensions(agent_errors::call::Extensions::new().with(User { name: "kim".into() }));
    let call = ToolCall::new("c1", "greet", r#"{"customer": "bo"}"#);
    let outcome = registry.execute(&ctx, &call).await;
    assert_eq!(outcome.result().unwrap().content, "kim greets bo");
}

#[tokio::test]
async fn a_conversation_continues_from_its_history() {
    let model = ScriptedModel::new()
        .text("hello")
        .tool_call("count", "{}")
        .text("3 customers")
        .text("bye");
    let agent = Agent::builder("crm")
        .model(model.clone())
        .system_prompt("be brief")
        .tools(crm(0).tools())
        .build()
        .unwrap();
    let mut chat = agent.conversation().context(user());
    assert_eq!(chat.send("hi").await.unwrap(), "hello");
    assert_eq!(chat.send("how many?").await.unwrap(), "3 customers");
    assert_eq!(chat.send("thanks").await.unwrap(), "bye");

    let last = model.last_request().unwrap();
    let systems = last
        .messages
        .iter()
        .filter(|m| matches!(m, Message::System { .. }))
        .count();
    assert_eq!(systems, 1, "the system prompt is sent once");
    let users: Vec<_> = last
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::User { content } => Some(content.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(users, ["hi", "how many?", "thanks"]);
    assert_eq!(chat.history().len(), last.messages.len() + 1);
}

#[tokio::test(start_paused = true)]
async fn each_run_of_a_conversation_has_a_fresh_per_run_breaker() {
    let failing = ToolDef::new("flaky", "Always busy.", |_: serde_json::Value| async move {
        Err::<String, _>(HttpError::new(400, "bad"))
    });
    let model = ScriptedModel::new()
        .tool_call("flaky", "{}")
        .tool_call("flaky", "{}")
        .text("gave up")
        .tool_call("flaky", "{}")
        .tool_call("flaky", "{}")
        .text("gave up again");
    let agent = Agent::builder("a")
        .model(model)
        .tool(failing)
        .breaker_threshold(3)
        .build()
        .unwrap();
    let mut chat = agent.conversation();
    assert_eq!(chat.send("one").await.unwrap(), "gave up");
    // Two more failures would trip a breaker that carried over (4 > 3).
    assert_eq!(chat.send("two").await.unwrap(), "gave up again");
}

#[tokio::test]
async fn run_conversation_returns_the_history_to_continue_from() {
    let model = ScriptedModel::new().text("second answer");
    let agent = Agent::builder("a").model(model).build().unwrap();
    let history = vec![
        Message::user("first"),
        Message::assistant(Some("first answer".into()), Vec::new()),
        Message::user("second"),
    ];
    let outcome = agent.run_conversation(history, RunOptions::new()).await;
    assert_eq!(outcome.result.unwrap(), "second answer");
    assert_eq!(outcome.transcript.len(), 4);
}

/// A history that breaks the one-result-per-call rule is refused before the model is called,
/// with the message that breaks it; a provider would answer it with a 400 on every turn.
#[tokio::test]
async fn a_forged_or_damaged_history_is_refused_naming_the_message() {
    use agent_errors::{RunError, run::HistoryError};

    let call = ToolCall::new("call_1", "lookup", "{}");
    let other = ToolCall::new("call_2", "lookup", "{}");
    let asked = || Message::assistant(None, vec![call.clone(), other.clone()]);
    let answer = |call: &ToolCall| Message::Tool(ToolResult::ok(call, "found"));
    let cases = [
        (
            vec![Message::user("hi"), answer(&call), Message::user("again")],
            HistoryError::ResultWithoutCall {
                index: 1,
                call_id: "call_1".into(),
            },
        ),
        (
            vec![
                Message::user("hi"),
                asked(),
                answer(&call),
                answer(&other),
                answer(&call),
            ],
            HistoryError::DuplicateResult {
                index: 4,
                call_id: "call_1".into(),
            },
        ),
        (
            vec![
                Message::user("hi"),
                asked(),
                answer(&other),
                Message::user("again"),
            ],
            HistoryError::CallWithoutResult {
                index: 1,
                call_id: "call_1".into(),
            },
        ),
        (
            vec![Message::user("hi"), asked(), answer(&call)],
            HistoryError::CallWithoutResult {
                index: 1,
                call_id: "call_2".into(),
            },
        ),
        (
            vec![
                Message::user("hi"),
                asked(),
                answer(&call),
                Message::user("meanwhile"),
                answer(&other),
            ],
            HistoryError::CallWithoutResult {
                index: 1,
                call_id: "call_2".into(),
            },
        ),
        (
            vec![
                Message::user("hi"),
                Message::assistant(None, vec![call.clone(), call.clone()]),
                answer(&call),
            ],
            HistoryError::DuplicateCallId {
                index: 1,
                call_id: "call_1".into(),
            },
        ),
    ];
    for (history, expected) in cases {
        let model = ScriptedModel::new().text("answered");
        let agent = Agent::builder("a").model(model.clone()).build().unwrap();
        let outcome = agent
            .run_conversation(history.clone(), RunOptions::new())
            .await;
        match outcome.result {
            Err(RunError::InvalidHistory(error)) => assert_eq!(error, expected),
            other => panic!("{expected:?}: {other:?}"),
        }
        assert!(
            model.requests().is_empty(),
            "{expected:?} reached the model"
        );
        assert_eq!(outcome.transcript, history);
    }

    // Through a conversation handed a damaged history: the turn is refused the same way.
    let model = ScriptedModel::new().text("answered");
    let agent = Agent::builder("a").model(model.clone()).build().unwrap();
    let mut chat =
        agent_errors::Conversation::from_history(agent, vec![Message::user("hi"), asked()]);
    let error = chat.send("and?").await.unwrap_err();
    assert!(
        matches!(
            error,
            RunError::InvalidHistory(HistoryError::CallWithoutResult { index: 1, .. })
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("message 1"), "{error}");
    assert!(model.requests().is_empty());

    // A well-formed history with tool calls goes through.
    let history = vec![
        Message::user("hi"),
        asked(),
        answer(&other),
        answer(&call),
        Message::user("thanks"),
    ];
    let model = ScriptedModel::new().text("answered");
    let agent = Agent::builder("a").model(model).build().unwrap();
    let outcome = agent.run_conversation(history, RunOptions::new()).await;
    assert_eq!(outcome.result.unwrap(), "answered");
}

#[test]
fn a_hand_built_tool_takes_the_crate_defaults() {
    let tool = ToolDef::new("t", "A tool.", |_: serde_json::Value| async move {
        Ok::<_, std::io::Error>("ok")
    })
    .with_crate_defaults(crate_defaults!());
    let registry = agent_errors::Registry::builder()
        .tool(tool)
        .build()
        .unwrap();
    let explained = registry.explain("t").unwrap();
    assert_eq!(
        explained.source_of(PolicyKey::Execution),
        Some(PolicyLayer::CrateDefaults)
    );
}

#[test]
fn agent_defaults_sit_between_the_agent_entry_and_the_crate_defaults() {
    let agent = Agent::builder("a")
        .model(ScriptedModel::new())
        .tools(crm(0).tools())
        .on_any_tool_error(policy!(execution = escalate, not_found = escalate))
        .on_tool_error("greet", policy!(execution = [retry(4), escalate]))
        .build()
        .unwrap();
    let greet = agent.explain("greet").unwrap();
    assert_eq!(
        greet.source_of(PolicyKey::Execution),
        Some(PolicyLayer::Agent)
    );
    let count = agent.explain("count").unwrap();
    assert_eq!(
        count.source_of(PolicyKey::Execution),
        Some(PolicyLayer::AgentDefaults)
    );
    let text = count.to_string();
    assert!(text.contains("<- agent, every tool"), "{text}");
    // The crate's `execution` never decides for `count`: listed as shadowed.
    assert!(
        text.contains("<- crate defaults  (shadowed by `execution` <- agent, every tool)"),
        "{text}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_agents_classifier_makes_its_own_errors_fire_their_keys() {
    let model = ScriptedModel::new()
        .tool_call("lookup", r#"{"id": 9}"#)
        .text("no such customer");
    let agent = Agent::builder("crm")
        .model(model.clone())
        .tools(crm(0).tools())
        .on_tool_error("lookup", policy!(not_found = throw))
        .classifier(classifier())
        .build()
        .unwrap();
    let options = RunOptions::new().context(user());
    let error = agent
        .run_with("who is 9?", options)
        .await
        .result
        .unwrap_err();
    let terminated = error.terminated().expect("not_found = throw ends the run");
    assert_eq!(terminated.kind, ErrorKind::NotFound);

    // Another agent without the classifier sees an unknown error, shown to the model.
    let model = ScriptedModel::new()
        .tool_call("lookup", r#"{"id": 9}"#)
        .text("no such customer");
    let plain = Agent::builder("crm")
        .model(model)
        .tools(crm(0).tools())
        .on_tool_error("lookup", policy!(not_found = throw))
        .build()
        .unwrap();
    let options = RunOptions::new().context(user());
    let answer = plain.run_with("who is 9?", options).await.result;
    assert_eq!(answer.unwrap(), "no such customer");
}

/// An order, as rig and rmcp tools take it: the struct is the whole argument object.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct OrderRequest {
    /// What to buy.
    item: String,
    quantity: u32,
}

/// Places an order.
#[tool]
async fn place_order(#[args] order: OrderRequest, user: Ctx<User>) -> String {
    format!("{} ordered {} x {}", user.name, order.quantity, order.item)
}

#[tokio::test]
async fn an_args_parameter_is_the_whole_argument_object() {
    let tool = &tools![place_order][0];
    let schema = tool.parameters();
    assert_eq!(schema["properties"]["item"]["type"], "string", "{schema}");
    assert!(schema["properties"].get("order").is_none(), "{schema}");
    assert!(schema["properties"].get("user").is_none(), "{schema}");

    let registry = agent_errors::Registry::builder()
        .tools(tools![place_order])
        .build()
        .unwrap();
    let ctx = RunContext::new()
        .with_extensions(agent_errors::call::Extensions::new().with(User { name: "ada".into() }));
    let call = ToolCall::new("c1", "place_order", r#"{"item": "tea", "quantity": 2}"#);
    let outcome = registry.execute(&ctx, &call).await;
    assert_eq!(outcome.result().unwrap().content, "ada ordered 2 x tea");
}
