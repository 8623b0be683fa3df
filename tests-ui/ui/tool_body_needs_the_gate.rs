//! A tool body starts only from what the gate cleared: a `ToolDef` in hand does not reach its
//! handler (and `gate_value_is_not_forged.rs`: the gate's answer cannot be made elsewhere).

use agent_errors::ToolDef;
use agent_errors::prelude::*;

/// Sends money.
#[tool(approval = required)]
async fn transfer(amount: u32) -> Result<String, std::io::Error> {
    Ok(format!("sent {amount}"))
}

fn main() {
    let tool: ToolDef = tools![transfer].remove(0);
    // Around the gate, with arguments no one approved: the handler is not reachable.
    let _running = tool.handler().call(r#"{"amount": 90000}"#);
}
