//! Procedural macros for [agent-errors](https://docs.rs/agent-errors). Use them through the
//! `agent-errors` crate (`use agent_errors::prelude::*;`), which re-exports every macro here;
//! the generated code refers to `::agent_errors`, so this crate alone is not enough.
//!
//! | macro | what it declares |
//! | --- | --- |
//! | [`#[tool]`](macro@tool) | a tool: name, description, argument schema, recovery policy |
//! | [`#[fixer]`](macro@fixer) | a fixer that repairs failed calls |
//! | [`tools!`] / [`fixers!`] | the `Vec<ToolDef>` / `Vec<FixerDef>` of some of them |
//! | [`policy!`] | a `Policy` value, for an agent's `on_tool_error` |
//! | [`defaults!`] | the crate-wide policy every `#[tool]` of the crate inherits |
//!
//! # The policy grammar
//!
//! `on_error(...)` in `#[tool]` and `defaults!`, and the whole of `policy!(...)`, read the same
//! list of entries:
//!
//! ```text
//! policy   := entry ("," entry)* ","?
//! entry    := key "=" ladder | "run_breaker" "=" on_trip | "recommended"
//! key      := "invalid_args" | "execution"
//!           | "transient" | "timeout" | "quota" | "server_error"
//!           | "auth" | "not_found" | "validation" | "bug" | "unknown"
//!           | "outcome_unknown"
//! ladder   := action | "[" action ("," action)* ","? "]"
//! action   := "retry" "(" count ")"
//!           | "retry" "(" retry_arg ("," retry_arg)* ")"
//!           | "fix" "(" "agent" "=" STRING ("," "retries" "=" count)? ")"
//!           | "fallback" "(" "tool" "=" STRING ")"
//!           | "escalate" | "throw" | "degrade" | "ask_person"
//! on_trip  := ("stop_run" | "remove_tool") ("(" "per_kind" ")")?
//! retry_arg:= count | "max_attempts" "=" count
//!           | "initial" "=" duration | "max" "=" duration | "when_safe"
//! count    := a positive integer literal (u32)
//! duration := a string: a number, optionally with a fraction, then `ms`, `s`, `m` or `h`
//!             ("250ms", "1.5s", "10s", "2m"); never zero
//! ```
//!
//! Named arguments may come in any order; `retry(3)` is short for `retry(max_attempts = 3)`.
//! `fix` retries default to 1.
//!
//! `recommended` puts the recommended preset just below the entries written beside it (in
//! `policy!`, a tool's `on_error`, or `defaults!(recommended)`): they win key by key, and
//! `explain` shows the preset's entries as the layer "recommended preset". What it does, rule
//! by rule, is said on `Policy::recommended` in agent-errors.
//!
//! What the keys mean:
//!
//! * `invalid_args`: the model's arguments are not JSON, or do not fit the parameter types.
//! * `execution`: the tool ran and failed, whatever the kind of failure.
//! * one key per error kind (`transient`, `timeout`, `quota`, `server_error`, `auth`,
//!   `not_found`, `validation`, `bug`, `unknown`): the tool ran and failed with that kind; the
//!   entry takes precedence over `execution`.
//! * `outcome_unknown`: whether the call took effect is unknown: a resumed durable run found it
//!   interrupted by a crash, its result never recorded (and the tool not `idempotent`), or the
//!   tool's reconciler could not tell after a failure that may have reached the service. Like
//!   `auth`, only its own entry answers it, never `execution`; built-in: `escalate`.
//!
//! `run_breaker` is not a key but the per-run breaker's rule for the tool (the breaker that
//! counts a tool's consecutive failures in one run, 3 unless the agent's `breaker_threshold`
//! says otherwise): `stop_run` ends the run when it trips (the default), `remove_tool` takes the
//! tool off the table for the rest of the run (no longer offered to the model, which is told
//! why once) and lets the run go on with the other tools. `(per_kind)` counts failures per kind
//! of failure, so timeouts do not add up with validation errors.
//!
//! What the actions do, rung by rung in a ladder:
//!
//! * `retry(n)`: call again with backoff, at most `n` calls in all (the first counts).
//!   `initial` is the first delay, `max` caps each computed delay (before the 0-25% jitter).
//!   `when_safe` retries only where a second call cannot apply the effect twice (the tool is
//!   `idempotent` or keyed, or the failure shows the request was not carried out: connection
//!   refused, a name that did not resolve, a rate limit); another timeout, dropped connection
//!   or 5xx of the tool is answered by its `outcome_unknown` entry instead.
//! * `fix(agent = "name", retries = n)`: ask the `#[fixer]` called `name` to repair the call,
//!   at most `n` times.
//! * `fallback(tool = "name")`: call another tool with the same arguments, under its own
//!   policy's `retry` rungs but not its `fallback` rungs (one level deep).
//! * `escalate`: show the error to the model as an error tool result. Ends the ladder.
//! * `throw`: end the run. Ends the ladder.
//! * `degrade`: drop the tool for the rest of the run and tell the model. Ends the ladder; the
//!   tool must be `optional`.
//! * `ask_person`: hand the failure to a person (the agent's approver). Approved, the tool is
//!   called once more (with the person's arguments, if edited) and a new failure goes on down
//!   the ladder; denied, the model is told; with nobody to answer now, a checkpointed run ends
//!   waiting for the person.
//!
//! # Checked at compile time
//!
//! Each mistake is a compile error on the token at fault, and the annotated item is still
//! emitted so no second error follows from it. Every grammar mistake is reported in one build;
//! the rules that relate several parts (a ladder's order, `degrade` and `optional`, `initial`
//! and `max`) are checked once the grammar is right.
//!
//! * unknown keys, actions or arguments (the message lists the valid ones);
//! * a key or argument given twice;
//! * `retry(0)`, `retries = 0`, a count that is negative, fractional or a string;
//! * `fix` without `agent`, `fallback` without `tool`, `retry` without a count;
//! * a duration that is malformed or zero, or an `initial` longer than `max`;
//! * an empty ladder `[]`, or an action after `escalate`, `throw` or `degrade`;
//! * a `run_breaker` that is not `stop_run` or `remove_tool`, a ladder, or an argument other
//!   than `per_kind`;
//! * `retry` under a key it can never help: `invalid_args` (the same arguments fail the same
//!   way), `auth`, `not_found`, `validation`, `bug`, `unknown` and `outcome_unknown` (never
//!   retried at run time);
//! * a `crate = "..."` that is not a string holding a path;
//! * in `#[tool]` only: `degrade` on a tool not marked `optional`, a fallback to the tool itself,
//!   a missing description, a name model APIs reject.
//!
//! `policy!` and `defaults!` do not know which tool they will apply to, so the agent's registry
//! checks `degrade` and fixer or tool names when it is built.
//!
//! # A renamed or re-exported runtime
//!
//! The generated code names the runtime `::agent_errors`. A crate that depends on it under
//! another name, or reaches it through a re-export, says where it is with `crate = "path"`,
//! accepted by every macro here: `#[tool(crate = "my_sdk::agent_errors", ...)]`,
//! `#[fixer(crate = "...")]`, `policy!(crate = "...", ...)`, `defaults!(crate = "...",
//! on_error(...))`, `tools![crate = "...", ...]` and `fixers![crate = "...", ...]`.

mod ast;
mod attr;
mod ctxt;
mod driver;
mod expand;
mod toolset;
mod valid;

use proc_macro::TokenStream;

/// Declares a tool: the function stays as written, and a hidden sibling function builds the
/// tool's definition, which [`tools!`] collects.
///
/// # Examples
///
/// ```
/// use agent_errors::prelude::*;
///
/// #[derive(Debug, thiserror::Error)]
/// #[error("fetch failed")]
/// struct FetchError;
///
/// /// Fetches a page and returns its text.
/// ///
/// /// Use it for pages the user names.
/// #[tool(on_error(
///     invalid_args = fix(agent = "url_fixer"),
///     execution = [retry(max_attempts = 4, initial = "250ms", max = "10s"),
///                  fallback(tool = "cached_fetch")],
///     auth = throw,
/// ))]
/// async fn fetch(url: String, max_bytes: Option<u64>) -> Result<String, FetchError> {
///     let _ = max_bytes;
///     Ok(format!("the text of {url}"))
/// }
///
/// mod cached {
///     use agent_errors::prelude::*;
///
///     /// Returns the last copy of a page fetched before.
///     #[tool(optional, timeout = "2s")]
///     pub fn cached_fetch(url: String, max_bytes: Option<u64>) -> String {
///         let _ = max_bytes;
///         format!("a copy of {url}")
///     }
/// }
///
/// let tools = tools![fetch, cached::cached_fetch];
/// assert_eq!(tools[0].name(), "fetch");
/// assert_eq!(tools[0].description(), "Fetches a page and returns its text.\n\nUse it for pages the user names.");
/// assert_eq!(tools[1].timeout(), Some(std::time::Duration::from_secs(2)));
/// ```
///
/// # Arguments
///
/// * `name = "..."`: the name the model calls it by. Defaults to the function's name. Model APIs
///   accept 1 to 64 ASCII letters, digits, `_` and `-`.
/// * `description = "..."`: what the model is told the tool does. Defaults to the doc comment,
///   each line trimmed and the lines joined with `\n` (blank lines at either end dropped); a
///   `#[doc = include_str!(..)]` is kept, joined by `concat!`. A tool with neither is an error.
/// * Doc comments on a parameter (`/// The city to look up.`) become that field's description
///   in the schema; they are taken off the emitted function, where rustc does not allow them.
/// * `optional`: the tool may be dropped by `degrade`.
/// * `idempotent`: calling the tool twice with the same arguments does no more than calling it
///   once, so a call a crash interrupted is run again when its durable run resumes (any other
///   tool's interrupted call is answered by its `outcome_unknown` policy instead).
/// * `approval = required`: each call waits for a person's approval before it runs: the
///   agent's approver is asked, and a checkpointed run with nobody to answer now ends waiting
///   for the person (see `agent_errors::approval`).
/// * `timeout = "30s"`: a call still running after this fails with kind `timeout` (and is then
///   handled by the policy like any other failure), so a tool that hangs cannot hold a run open.
/// * `blocking`: says that the body blocks its thread. Every plain `fn` is run that way,
///   marked or not (see [the function](#the-function)), so it changes nothing there; an
///   `async fn` must not block, and `blocking` on one is a compile error.
/// * `reconcile = "check_refund"`: the reconciler asked whether a call took effect when its
///   outcome is unknown (a crash mid-call, a timeout or a connection dropped once the request
///   was sent), before anything else: it answers that the call happened (with its result),
///   did not (the call runs, with the same idempotency key) or is still unknown (the
///   `outcome_unknown` policy answers). Given to the agent with `.reconciler(..)` under that
///   name; a name the agent lacks is refused when it is built.
/// * `breaker = "weather-api"`: the upstream the tool depends on. Tools naming the same key share
///   one service breaker, so two tools on one failing API open together; by default a tool's
///   breaker is keyed by its own name.
/// * `on_error(...)`: the tool's recovery policy; see [the grammar](crate#the-policy-grammar).
/// * `crate = "path"`: where the agent-errors crate is, when not at `::agent_errors`; see
///   [a renamed runtime](crate#a-renamed-or-re-exported-runtime).
///
/// # The function
///
/// A free `fn` or `async fn`, or a method of a [`#[toolset]`](macro@toolset) block; not
/// generic, not `unsafe`. Each parameter
/// is a plain name with an owned type (`String`, not `&str`) that implements `Deserialize` and
/// `JsonSchema`; together they become the tool's arguments, a JSON object with one field per
/// parameter (`Option` fields may be left out, unknown fields are rejected). The agent-errors
/// crate re-exports serde and schemars for the generated code, so a crate whose parameters are
/// standard types needs neither.
///
/// The function returns `Result<T, E>` (any type whose last path segment is `Result`, such as
/// `anyhow::Result<T>` or `io::Result<T>`), with `T: Serialize` and `E` convertible into a
/// `BoxError` (any `std::error::Error + Send + Sync + 'static`, or `anyhow::Error`), or a plain
/// `T: Serialize` that can't fail. An `async fn`'s future must be `Send`.
///
/// A plain `fn` always runs on tokio's blocking pool (`tokio::task::spawn_blocking`), as a
/// body that may block its thread (`std::thread::sleep`, a synchronous client, file or
/// CPU-heavy work) must: the run's other tasks go on meanwhile, and `timeout` fires on time. A
/// timed-out call is no longer waited for, but its thread cannot be stopped: it finishes in
/// the background, and whatever the body does until then still happens. Each call hops to the
/// pool and back; a tool that never blocks and wants no hop can be an `async fn`.
///
/// Two kinds of parameter are not fields of the arguments:
///
/// * `name: Ctx<T>` reads the run's value of type `T` (given with `RunOptions::context`, or
///   `RunContext::with_extensions` for a registry of your own); the schema does not show it. A
///   run without one answers the call with an error result saying which type is missing, and
///   the tool does not run. `T` must be `Send + Sync + 'static`.
/// * `#[args] name: MyArgs` makes `MyArgs` the whole argument object: its fields are the
///   schema's top level, as rig and rmcp tools have them. It must then be the only parameter
///   besides `Ctx<T>` ones. `MyArgs` derives `serde::Deserialize` and `schemars::JsonSchema`
///   (schemars 1.x: `schemars = "1"` in your `[dependencies]`).
///
/// The tool's output reaches the model as text: a `String` as it is, anything else as JSON.
///
/// The tool inherits the crate's [`defaults!`], when the crate declares them, below its own
/// policy and the agent's.
///
/// The hidden sibling is `<fn name>__is_not_a_tool__add_tool_attribute_to_its_definition`, with
/// the function's visibility: named in [`tools!`], a plain function has none, and the compile
/// error quotes that name, which says what to do. Name the function in [`tools!`] rather than
/// calling the sibling.
#[proc_macro_attribute]
pub fn tool(attr: TokenStream, item: TokenStream) -> TokenStream {
    driver::expand(driver::Tool::new(attr.into(), item.into())).into()
}

/// Declares a fixer: a function that repairs failed tool calls, registered under the function's
/// name (or `name = "..."`) and named by `fix(agent = "...")` in a policy.
///
/// # Examples
///
/// ```
/// use agent_errors::prelude::*;
///
/// #[fixer]
/// fn json_fixer(request: FixRequest) -> Result<Fix, FixerError> {
///     let repaired = request.raw_args.replace('\'', "\"");
///     Ok(Fix::args(repaired))
/// }
///
/// #[fixer(name = "llm_fixer")]
/// async fn ask_a_model(request: FixRequest) -> Result<Fix, FixerError> {
///     Err(FixerError::escalate(request.failure, Severity::Low))
/// }
///
/// let fixers = fixers![json_fixer, ask_a_model];
/// assert_eq!(fixers.len(), 2);
/// ```
///
/// The function, `fn` or `async fn`, takes exactly one `FixRequest` and returns
/// `Result<Fix, FixerError>`; an `async fn`'s future must be `Send`. It stays callable as
/// written. A hidden sibling builds its `FixerDef`, which [`fixers!`] collects. `crate = "..."`
/// says where agent-errors is, as for [`#[tool]`](macro@tool).
#[proc_macro_attribute]
pub fn fixer(attr: TokenStream, item: TokenStream) -> TokenStream {
    driver::expand(driver::Fixer::new(attr.into(), item.into())).into()
}

/// Makes the `#[tool]` and `#[fixer]` methods of an `impl` block the tools and fixers of one
/// shared instance, for tools that hold state (a database pool, an HTTP client).
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use agent_errors::prelude::*;
///
/// struct Accounts {
///     names: Vec<String>,
/// }
///
/// #[toolset]
/// impl Accounts {
///     /// Looks an account up by number.
///     #[tool(on_error(not_found = escalate))]
///     async fn lookup(&self, id: usize) -> Option<String> {
///         self.names.get(id).cloned()
///     }
///
///     #[fixer]
///     fn trim_fixer(&self, request: FixRequest) -> Result<Fix, FixerError> {
///         Ok(Fix::args(request.raw_args.trim().to_owned()))
///     }
/// }
///
/// let accounts = Arc::new(Accounts { names: vec!["ada".into()] });
/// let tools = Arc::clone(&accounts).tools();
/// let fixers = accounts.fixers();
/// assert_eq!(tools[0].name(), "lookup");
/// assert_eq!(fixers.len(), 1);
/// ```
///
/// The block adds two methods, `tools(self: Arc<Self>) -> Vec<ToolDef>` and
/// `fixers(self: Arc<Self>) -> Vec<FixerDef>`. A `#[tool]` method takes the same arguments, and
/// gets the same policies, crate defaults and checks, as a free `#[tool]` fn; it takes `&self`
/// (calls run concurrently on the shared instance: keep state that changes behind a lock) or no
/// `self` at all. A `#[fixer]` method takes `&self` and one `FixRequest`. The block must be an
/// inherent, non-generic `impl` with at least one such method. `crate = "..."` says where
/// agent-errors is, as for [`#[tool]`](macro@tool).
#[proc_macro_attribute]
pub fn toolset(attr: TokenStream, item: TokenStream) -> TokenStream {
    driver::expand(toolset::Toolset::new(attr.into(), item.into())).into()
}

/// Builds a `Policy` from the [policy grammar](crate#the-policy-grammar), for an agent's
/// `on_tool_error(tool, policy)`.
///
/// # Examples
///
/// ```
/// let policy = agent_errors::policy!(
///     execution = [retry(5), escalate],
///     auth = throw,
/// );
/// assert_eq!(policy.entries().count(), 2);
/// ```
///
/// Entries keep the order written. Whether `degrade` is allowed depends on the tool, so the
/// agent's registry checks it when it is built. A `crate = "..."` entry says where agent-errors
/// is, as for [`#[tool]`](macro@tool).
#[proc_macro]
pub fn policy(input: TokenStream) -> TokenStream {
    driver::expand(driver::Policy::new(input.into())).into()
}

/// Declares the crate-wide policy that every [`#[tool]`](macro@tool) of this crate inherits,
/// below the tool's own policy and the agent's `on_tool_error`, above the built-in default.
///
/// # Examples
///
/// ```
/// // at the crate root: lib.rs or main.rs
/// agent_errors::defaults!(on_error(
///     invalid_args = fix(agent = "json_fixer"),
///     execution = [retry(3), escalate],
/// ));
/// # fn main() {}
/// ```
///
/// `defaults!(recommended)` gives every tool of the crate the recommended preset (see
/// `Policy::recommended` in agent-errors); `on_error(...)` beside it sets keys over it:
///
/// ```
/// agent_errors::defaults!(recommended, on_error(not_found = throw));
/// # fn main() {}
/// ```
///
/// It must be invoked once, at the crate root; anywhere else is a compile error naming that
/// rule, and a second invocation is a "defined multiple times" error. Tools in any module of
/// the crate pick it up; tools of other crates do not. `degrade` can't be checked here: the
/// agent's registry reports it for tools that are not optional.
#[proc_macro]
pub fn defaults(input: TokenStream) -> TokenStream {
    driver::expand(driver::Defaults::new(input.into())).into()
}

/// The calling crate's [`defaults!`] policy, as an `Option<Policy>` (`None` when the crate
/// declares none), for a `ToolDef` built by hand: `#[tool]` functions get it on their own.
///
/// # Examples
///
/// ```
/// use agent_errors::{ToolDef, crate_defaults};
///
/// agent_errors::defaults!(on_error(execution = [retry(3), escalate]));
///
/// type Args = std::collections::HashMap<String, String>;
///
/// # fn main() {
/// let weather = ToolDef::new("weather", "Today's weather.", |args: Args| async move {
///     Ok::<_, std::io::Error>(args.len())
/// })
/// .with_crate_defaults(crate_defaults!());
/// assert!(weather.crate_defaults().is_some());
/// # }
/// ```
///
/// Call it from inside the crate whose defaults you mean; `crate = "..."` says where
/// agent-errors is, as for [`#[tool]`](macro@tool).
#[proc_macro]
pub fn crate_defaults(input: TokenStream) -> TokenStream {
    driver::expand(driver::CrateDefaults::new(input.into())).into()
}

/// The `Vec<ToolDef>` of the named [`#[tool]`](macro@tool) functions, by path.
///
/// # Examples
///
/// ```
/// mod web {
///     /// Fetches a page.
///     #[agent_errors::tool]
///     pub fn fetch(url: String) -> String {
///         url
///     }
/// }
///
/// let tools = agent_errors::tools![web::fetch];
/// assert_eq!(tools[0].name(), "fetch");
/// ```
///
/// Each path must name a function annotated with `#[tool]` (the macro calls its hidden
/// sibling, so the function's visibility applies).
#[proc_macro]
pub fn tools(input: TokenStream) -> TokenStream {
    driver::expand(driver::List::new(input.into(), "tool", "ToolDef")).into()
}

/// The `Vec<FixerDef>` of the named [`#[fixer]`](macro@fixer) functions, by path.
///
/// # Examples
///
/// ```
/// mod repair {
///     use agent_errors::prelude::*;
///
///     #[fixer]
///     pub fn url_fixer(request: FixRequest) -> Result<Fix, FixerError> {
///         Ok(Fix::args(request.raw_args.trim().to_owned()))
///     }
/// }
///
/// let fixers = agent_errors::fixers![repair::url_fixer];
/// assert_eq!(fixers.len(), 1);
/// ```
#[proc_macro]
pub fn fixers(input: TokenStream) -> TokenStream {
    driver::expand(driver::List::new(input.into(), "fixer", "FixerDef")).into()
}

/// Every policy key the macros know, as `[(name, PolicyKey, can_retry), ...]`, for the test
/// that fails when this crate's list and the runtime's drift apart. Not public API.
#[doc(hidden)]
#[proc_macro]
pub fn __policy_keys(input: TokenStream) -> TokenStream {
    driver::expand(driver::KnownList::keys(input.into())).into()
}

/// Every action the macros know, as `[(name, Rung, is_terminal), ...]`, for the test that fails
/// when this crate's list and the runtime's drift apart. Not public API.
#[doc(hidden)]
#[proc_macro]
pub fn __policy_actions(input: TokenStream) -> TokenStream {
    driver::expand(driver::KnownList::actions(input.into())).into()
}
