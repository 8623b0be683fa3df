//! The gate's answer, the only value a tool body starts from, is made by the gate alone: its
//! fields are private and it has no public constructor.

use agent_errors::ToolDef;
use agent_errors::call::Cleared;
use agent_errors::prelude::*;

/// Sends money.
#[tool(approval = required)]
async fn transfer(amount: u32) -> Result<String, std::io::Error> {
    Ok(format!("sent {amount}"))
}

fn main() {
    let tool: ToolDef = tools![transfer].remove(0);
    let _forged = Cleared {
        tool: &tool,
        arguments: r#"{"amount": 90000}"#.into(),
    };
}
