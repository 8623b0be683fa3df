//! Tools several suite files run.

use std::sync::{Arc, Mutex};

use agent_errors::ToolDef;

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
