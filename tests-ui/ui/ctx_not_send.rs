use std::rc::Rc;

use agent_errors::prelude::*;

/// Reads a value that can't be shared between threads.
#[tool]
fn local(user: Ctx<Rc<String>>) -> String {
    user.to_string()
}

fn main() {}
