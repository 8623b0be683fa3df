//! Tools several suite files run.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use agent_errors::ToolDef;
use agent_errors::policy::{Action, Policy, PolicyKey};

/// The arguments of [`transfer`].
#[derive(serde::Deserialize, schemars::JsonSchema)]
pub struct TransferArgs {
    /// How much to send.
    pub amount: u32,
}

/// `transfer`, which sends money: remembers every amount its body ran with, in order.
pub fn transfer(sent: &Arc<Mutex<Vec<u32>>>) -> ToolDef {
    let sent = Arc::clone(sent);
    ToolDef::new("transfer", "Sends money.", move |args: TransferArgs| {
        let sent = Arc::clone(&sent);
        async move {
            sent.lock().unwrap().push(args.amount);
            Ok::<_, std::io::Error>(format!("sent {}", args.amount))
        }
    })
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct CountArgs {
    /// A JSON object, as text.
    json: String,
}

#[derive(Debug, thiserror::Error)]
#[error("not a JSON object: {0}")]
struct NotAnObject(#[from] serde_json::Error);

/// `count_keys`, which counts the top-level keys of a JSON object and hands text that is not
/// one to the fixer `json_fixer` (once).
pub fn count_keys() -> ToolDef {
    ToolDef::new(
        "count_keys",
        "Counts the top-level keys of a JSON object.",
        |args: CountArgs| async move {
            let object: BTreeMap<String, serde_json::Value> = serde_json::from_str(&args.json)?;
            Ok::<_, NotAnObject>(object.len())
        },
    )
    .with_policy(Policy::new().on(PolicyKey::Execution, Action::fix("json_fixer", 1).unwrap()))
}
