use agent_errors::prelude::*;

/// A ready check without the kind of failure it reports.
#[tool(output_check = error_member)]
async fn one(key: String) -> String {
    key
}

/// A kind of failure that does not exist.
#[tool(output_check = error_member(flaky))]
async fn two(key: String) -> String {
    key
}

/// A ready check that does not exist.
#[tool(output_check = error_field(transient))]
async fn three(key: String) -> String {
    key
}

/// Quoted.
#[tool(output_check = "ok_false(quota)")]
async fn four(key: String) -> String {
    key
}

/// No kind in the parentheses.
#[tool(output_check = ok_false())]
async fn five(key: String) -> String {
    key
}

fn not_a_check(output: String) -> bool {
    output.is_empty()
}

/// A function of the wrong type.
#[tool(output_check = not_a_check)]
async fn six(key: String) -> String {
    key
}

fn main() {}
