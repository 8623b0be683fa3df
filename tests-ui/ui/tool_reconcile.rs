use agent_errors::prelude::*;

/// Refunds an order.
#[tool(reconcile = "")]
async fn refund(order: String) -> String {
    order
}

/// Refunds an order, named twice.
#[tool(reconcile = "check_refund", reconcile = "check_again")]
async fn refund_twice(order: String) -> String {
    order
}

/// Refunds an order, its reconciler named by a path.
#[tool(reconcile = check_refund)]
async fn refund_path(order: String) -> String {
    order
}

/// Refunds an order, with no reconciler named.
#[tool(reconcile)]
async fn refund_bare(order: String) -> String {
    order
}

fn main() {}
