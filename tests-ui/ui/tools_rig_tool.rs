use agent_errors::prelude::*;

// Stands in for a rig tool: `tools![..]` reads only the name, so any type (a rig `Tool` or
// `PortableTool` alike) gets the same message. A capitalised name is read as a type.
struct Weather;

mod rig_tools {
    // A type named by its path.
    pub struct Forecast;
}

/// Looks up a word.
#[tool]
async fn lookup(word: String) -> String {
    word
}

fn main() {
    let _ = (Weather, rig_tools::Forecast);
    let _tools = tools![lookup, Weather];
    let _tools = tools![rig_tools::Forecast];
}
