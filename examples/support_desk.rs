//! A support desk: one stateful service with several tools, the user's identity given per run,
//! and a conversation of three user turns, each with a failure the recovery layer absorbs.
//!
//! Offline, on a scripted model:
//!
//! 1. "where is my order?": the order database is busy twice; `retry(3)` gets the answer and the
//!    model never sees the failures.
//! 2. "cancel it": the model quotes the order number as a string; the service's own fixer method
//!    repairs the arguments within the call.
//! 3. "refund it then": the refund belongs to another user's account; the permission hook, which
//!    reads the user from the run's context, denies it, and the model explains.
//!
//! ```sh
//! cargo run -p agent-errors-examples --bin support_desk
//! ```

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use agent_errors::classify::Classifier;
use agent_errors::prelude::*;
use agent_errors::testing::ScriptedModel;
use agent_errors::{
    ErrorKind, RunOptions, ToolCall,
    permission::{Permission, PermissionContext, PermissionHook},
};

/// Who is asking: given with each run, never shown to the model.
#[derive(Debug, Clone)]
struct Customer {
    name: &'static str,
}

#[derive(Debug, thiserror::Error)]
#[error("the order database is busy")]
struct DatabaseBusy;

#[derive(Debug, thiserror::Error)]
#[error("no order {0}")]
struct NoSuchOrder(u64);

/// The desk's state, shared by its tools.
struct Desk {
    /// Order number -> (owner, status).
    orders: Mutex<HashMap<u64, (&'static str, &'static str)>>,
    /// Lookups still to fail, to show a retry.
    busy_for: AtomicU32,
}

#[toolset]
impl Desk {
    /// Tells where an order is.
    #[tool(on_error(transient = [retry(3), escalate]))]
    async fn order_status(&self, customer: Ctx<Customer>, order: u64) -> Result<String, BoxError> {
        if self
            .busy_for
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(DatabaseBusy.into());
        }
        let orders = self
            .orders
            .lock()
            .expect("never poisoned: no panics under it");
        match orders.get(&order) {
            Some((owner, status)) if *owner == customer.name => {
                Ok(format!("order {order} is {status}"))
            }
            _ => Err(NoSuchOrder(order).into()),
        }
    }

    /// Cancels an order that has not shipped.
    #[tool(on_error(invalid_args = fix(agent = "number_fixer")))]
    async fn cancel_order(&self, customer: Ctx<Customer>, order: u64) -> Result<String, BoxError> {
        let mut orders = self
            .orders
            .lock()
            .expect("never poisoned: no panics under it");
        match orders.get_mut(&order) {
            Some((owner, status)) if *owner == customer.name => {
                *status = "cancelled";
                Ok(format!("order {order} is cancelled"))
            }
            _ => Err(NoSuchOrder(order).into()),
        }
    }

    /// Refunds an order.
    #[tool]
    async fn refund(&self, order: u64) -> String {
        format!("order {order} refunded")
    }

    /// Unquotes numbers the model sent as strings: `{"order": "42"}` -> `{"order": 42}`.
    #[fixer]
    fn number_fixer(&self, request: FixRequest) -> Result<Fix, FixerError> {
        let mut args: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&request.raw_args)
                .map_err(|_| FixerError::escalate(request.failure.clone(), Severity::Low))?;
        for value in args.values_mut() {
            if let Some(number) = value.as_str().and_then(|s| s.parse::<u64>().ok()) {
                *value = number.into();
            }
        }
        Ok(Fix::args(serde_json::Value::Object(args).to_string()))
    }
}

/// Refunds only of the asking customer's own orders.
struct OwnOrdersOnly(Arc<Desk>);

impl PermissionHook for OwnOrdersOnly {
    fn check(&self, _call: &ToolCall) -> Permission {
        Permission::Deny("no customer".into())
    }

    fn check_in(&self, call: &ToolCall, run: &PermissionContext<'_>) -> Permission {
        if &*call.name != "refund" {
            return Permission::Allow;
        }
        let Some(customer) = run.extensions().get::<Customer>() else {
            return Permission::Deny("no customer".into());
        };
        let order = serde_json::from_str::<serde_json::Value>(&call.arguments)
            .ok()
            .and_then(|args| args["order"].as_u64());
        let orders = self
            .0
            .orders
            .lock()
            .expect("never poisoned: no panics under it");
        match order.and_then(|order| orders.get(&order)) {
            Some((owner, _)) if *owner == customer.name => Permission::Allow,
            _ => Permission::Deny("refunds are only for your own orders".into()),
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let desk = Arc::new(Desk {
        orders: Mutex::new(HashMap::from([
            (42, ("ada", "shipped")),
            (7, ("bo", "packed")),
        ])),
        busy_for: AtomicU32::new(2),
    });
    let model = ScriptedModel::new()
        .tool_call("order_status", r#"{"order": 42}"#)
        .text("Your order 42 has shipped.")
        .tool_call("cancel_order", r#"{"order": "42"}"#)
        .text("Order 42 is cancelled.")
        .tool_call("refund", r#"{"order": 7}"#)
        .text("I can only refund your own orders; order 7 is not yours.");
    let agent = Agent::builder("support-desk")
        .model(model)
        .system_prompt("You are a support agent. Be brief.")
        .tools(Arc::clone(&desk).tools())
        .fixers(Arc::clone(&desk).fixers())
        .permission(OwnOrdersOnly(Arc::clone(&desk)))
        .classifier(Classifier::new().rule(|_: &DatabaseBusy| Some(ErrorKind::Transient)))
        .build()?;

    let mut chat = agent.conversation().context(Customer { name: "ada" });
    for question in [
        "Where is my order 42?",
        "Cancel it.",
        "Refund order 7 then.",
    ] {
        let outcome = chat.send_with(question, RunOptions::new()).await;
        let events: Vec<&str> = outcome.report.events.iter().map(|e| e.name()).collect();
        println!("user:  {question}");
        println!("agent: {}", outcome.result?);
        println!("       (recovery: {})", events.join(", "));
    }
    println!("{} messages in the conversation", chat.history().len());
    Ok(())
}
