//! Every form of declaration compiles without a warning, even when nothing uses the tools.
#![deny(warnings, missing_docs, unused)]

use agent_errors::prelude::*;

agent_errors::defaults!(on_error(
    execution = [retry(3), escalate],
    invalid_args = [fix(builtin), escalate]
));

/// Errors of the catalogue.
#[derive(Debug, thiserror::Error)]
pub enum CatalogueError {
    /// Nothing matched.
    #[error("no match")]
    NoMatch,
}

/// Searches the catalogue.
#[tool(
    name = "catalogue_search",
    optional,
    on_error(
        invalid_args = fix(agent = "json_fixer", retries = 2),
        execution = [retry(max_attempts = 4, initial = "250ms", max = "10s"), fallback(tool = "cached"), degrade],
        auth = throw,
    ),
)]
pub async fn search(query: String, limit: Option<u32>) -> Result<Vec<String>, CatalogueError> {
    match limit {
        Some(0) => Err(CatalogueError::NoMatch),
        _ => Ok(vec![query]),
    }
}

/// Returns cached results.
#[tool(idempotent, on_error(outcome_unknown = [fix(agent = "json_fixer"), escalate], invalid_args = fix(builtin, retries = 2)))]
fn cached(query: String, limit: Option<u32>) -> Vec<String> {
    let _ = limit;
    vec![query]
}

/// Sends money once a person approves; a failure is handed to a person too.
#[tool(approval = required, on_error(execution = [ask_person, escalate]))]
pub async fn transfer(cents: u64) -> u64 {
    cents
}

/// Waits on a synchronous client with a timeout, unmarked: every plain `fn` runs on the
/// blocking pool, so the timeout holds.
#[tool(timeout = "2s")]
pub fn wait_for_client(id: u64) -> u64 {
    std::thread::yield_now();
    id
}

/// Reads a file with the standard library, which blocks its thread.
#[tool(blocking, timeout = "5s", on_error(timeout = escalate))]
fn read_file(path: String) -> std::io::Result<String> {
    std::fs::read_to_string(path)
}

/// Reads a quote from a service that answers 200 with `{"error": ...}` when it is busy.
#[tool(output_check = error_member(transient), on_error(transient = retry(3)))]
pub async fn quote(symbol: String) -> String {
    symbol
}

/// Posts to a service that answers `{"ok": false}` when it refuses.
#[tool(output_check = ok_false(quota))]
pub async fn post(text: String) -> String {
    text
}

/// Says whether a ledger's answer reports a locked account.
pub fn locked(output: &str) -> Result<(), agent_errors::call::OutputRejected> {
    match output.contains("LOCKED") {
        true => Err(agent_errors::call::OutputRejected::new(
            agent_errors::ErrorKind::Auth,
            "locked",
        )),
        false => Ok(()),
    }
}

/// Reads a ledger, checked by a function of ours.
#[tool(output_check = locked)]
pub async fn ledger(account: String) -> String {
    account
}

/// Refunds an order; a call whose outcome is unknown is looked up by `check_refund` first.
#[tool(reconcile = "check_refund", on_error(outcome_unknown = escalate))]
pub async fn refund(order: String) -> String {
    order
}

/// Repairs quotes.
#[fixer]
pub fn json_fixer(request: FixRequest) -> Result<Fix, FixerError> {
    Ok(Fix::args(request.raw_args.replace('\'', "\"")))
}

/// Tools in a module.
pub mod more {
    use agent_errors::prelude::*;

    /// Counts words.
    #[tool]
    pub(crate) async fn count_words(mut text: String) -> usize {
        text.push(' ');
        text.split_whitespace().count()
    }

    /// Asks nobody.
    #[fixer(name = "nobody")]
    async fn ask(request: FixRequest) -> Result<Fix, FixerError> {
        Err(FixerError::escalate(request.failure, Severity::Low))
    }
}

fn main() {
    /// A tool declared inside a function.
    #[tool]
    fn local(n: i32) -> i32 {
        n
    }

    let _ = (tools![local], policy!(execution = retry(2)));
}
