//! Which key a write sends when the model, shown its failure, asks for it again: the call's key
//! names the call, so a repeat would be new work, and the repeat of a call whose outcome is
//! unknown is sent under the first call's key instead; the effect's key names what is asked
//! for, so the service recognises the repeat either way.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use agent_errors::call::IdempotencyKey;
use agent_errors::testing::{Reply, ScriptedModel, transcript_violations};
use agent_errors::{
    Agent, BoxError, ChatResponse, Ctx, HttpError, Message, RunOptions, ToolCall, ToolDef, tool,
    tools,
};
use serde::Serialize;

/// A ticket service that remembers the answer it gave per idempotency key, and whose first
/// answer is lost on the way back (a 504 after the ticket was opened).
#[derive(Default)]
struct Tickets {
    answered: Mutex<HashMap<String, String>>,
    opened: Mutex<u32>,
}

impl Tickets {
    fn open(&self, key: &IdempotencyKey, summary: &str) -> Result<String, HttpError> {
        let mut answered = self.answered.lock().unwrap();
        if let Some(answer) = answered.get(&key.to_string()) {
            return Ok(answer.clone());
        }
        let mut opened = self.opened.lock().unwrap();
        *opened += 1;
        let answer = format!("ticket {} opened: {summary}", *opened);
        answered.insert(key.to_string(), answer.clone());
        if *opened == 1 {
            return Err(HttpError::new(504, "gateway timeout"));
        }
        Ok(answer)
    }

    fn opened(&self) -> u32 {
        *self.opened.lock().unwrap()
    }
}

#[derive(Serialize)]
struct TicketArgs<'a> {
    customer_id: u64,
    summary: &'a str,
}

/// Opens a ticket keyed by the call.
#[tool(on_error(execution = escalate))]
async fn open_per_call(
    key: Ctx<IdempotencyKey>,
    tickets: Ctx<Arc<Tickets>>,
    customer_id: u64,
    summary: String,
) -> Result<String, HttpError> {
    let _ = customer_id;
    tickets.open(&key, &summary)
}

/// Opens a ticket keyed by the effect.
#[tool(on_error(execution = escalate))]
async fn open_per_effect(
    key: Ctx<IdempotencyKey>,
    tickets: Ctx<Arc<Tickets>>,
    customer_id: u64,
    summary: String,
) -> Result<String, BoxError> {
    let args = TicketArgs {
        customer_id,
        summary: &summary,
    };
    let key = key.for_effect("open_ticket", &args)?;
    Ok(tickets.open(&key, &summary)?)
}

/// The model asks for the ticket, is shown the 504, and asks again with the same arguments
/// (written in another key order): two calls. Returns the service and the last tool result.
async fn asked_twice(name: &str, tools: Vec<ToolDef>) -> (Arc<Tickets>, String) {
    let model = ScriptedModel::new()
        .tool_call(name, r#"{"customer_id": 42, "summary": "refund"}"#)
        .tool_call(name, r#"{"summary": "refund", "customer_id": 42}"#)
        .text("done");
    let agent = Agent::builder("desk")
        .model(model.clone())
        .tools(tools)
        .build()
        .unwrap();
    let tickets = Arc::new(Tickets::default());
    let options = RunOptions::new()
        .run_id("run-7")
        .context(Arc::clone(&tickets));
    let outcome = agent.run_with("open a refund ticket", options).await;
    assert_eq!(outcome.result.unwrap(), "done");
    let last = model.last_request().unwrap();
    let Some(Message::Tool(result)) = last.messages.last() else {
        panic!("the last message sent is the second call's result");
    };
    (tickets, result.content.clone())
}

#[tokio::test]
async fn a_write_asked_for_again_after_its_outcome_was_lost_is_sent_under_its_first_key() {
    // The repeat is a new call, whose own key a service could not tell from a new request; the
    // tool reads its key, so it is keyed, and the repeat of a call whose outcome is unknown is
    // sent under the first call's key: the service answers it from its record.
    let (tickets, second) = asked_twice("open_per_call", tools![open_per_call]).await;
    assert_eq!(tickets.opened(), 1, "the repeat carried the first key");
    assert_eq!(second, "ticket 1 opened: refund");
}

#[tokio::test]
async fn a_write_asked_for_again_is_applied_once_under_the_effect_idempotency_key() {
    let (tickets, second) = asked_twice("open_per_effect", tools![open_per_effect]).await;
    assert_eq!(
        tickets.opened(),
        1,
        "the repeat carries the first call's effect key"
    );
    assert_eq!(second, "ticket 1 opened: refund");
}

#[test]
fn keys_with_different_parts_never_print_alike() {
    let pairs = [
        (("tenant:a", "call_1"), ("tenant", "a:call_1")),
        (("a%3Ab", "c"), ("a:b", "c")),
        (("run", "7:call_1"), ("run:7", "call_1")),
    ];
    for ((run_a, call_a), (run_b, call_b)) in pairs {
        let a = IdempotencyKey::new(run_a, call_a);
        let b = IdempotencyKey::new(run_b, call_b);
        assert_ne!(a.to_string(), b.to_string(), "{a:?} and {b:?}");
    }
    assert_eq!(
        IdempotencyKey::new("run-7", "call_1").to_string(),
        "run-7:call_1",
        "a run id without `:` or `%` prints as it is"
    );
}

type Paid = Arc<Mutex<Vec<(String, String)>>>;

/// Pays `to`, recording the key it hands the payment service.
#[tool]
async fn pay(key: Ctx<IdempotencyKey>, paid: Ctx<Paid>, to: String) -> String {
    paid.lock().unwrap().push((key.to_string(), to));
    "paid".to_owned()
}

#[tokio::test]
async fn two_calls_under_one_id_from_the_provider_get_keys_of_their_own() {
    // Some servers number calls per turn: the second payment comes back as `call_1` too, and in
    // one turn a server may even give two calls one id.
    let model = ScriptedModel::new();
    let call = |id: &str, to: &str| ToolCall::new(id, "pay", format!(r#"{{"to": "{to}"}}"#));
    model.push(Reply::response(ChatResponse::tool_calls(vec![call(
        "call_1", "ada",
    )])));
    let turn = vec![call("call_1", "bob"), call("call_1", "cy")];
    model.push(Reply::response(ChatResponse::tool_calls(turn)));
    model.push(Reply::response(ChatResponse::text("done")));
    let agent = Agent::builder("payer")
        .model(model)
        .tools(tools![pay])
        .build()
        .unwrap();
    let paid: Paid = Arc::default();
    let options = RunOptions::new().run_id("r").context(Arc::clone(&paid));
    let outcome = agent.run_with("pay everyone", options).await;

    assert_eq!(outcome.result.unwrap(), "done");
    let paid = paid.lock().unwrap().clone();
    let keys: HashSet<&str> = paid.iter().map(|(key, _)| key.as_str()).collect();
    assert_eq!(keys.len(), 3, "three payments, three keys: {paid:?}");
    assert!(
        keys.contains("r:call_1"),
        "the first keeps the provider's id: {paid:?}"
    );
    assert!(transcript_violations(&outcome.transcript).is_empty());
}
