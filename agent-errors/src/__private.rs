//! Paths the macros expand to. Not public API: anything here may change in any release.
//!
//! What the macros generate per tool is kept small and free of generic calls wherever the work
//! does not depend on the tool's types: a `#[tool]` expands to its argument struct, one plain
//! `fn` that parses the arguments and starts the call, and a static [`ToolSpec`]; [`tool_def`]
//! does the rest once for every tool. Policies are written as static [`PolicyTable`]s and built
//! by [`policy`], so no ladder is assembled by generated code.

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use crate::ErrorKind;
pub use crate::error::{BoxError, ToolError};
pub use crate::extensions::{Ctx, Extensions};
pub use crate::fix::{Fix, FixRequest, FixerDef, FixerError};
pub use crate::output_check::{OutputCheck, OutputRejected};
pub use crate::policy::{
    Action, FixAction, Ladder, OnTrip, Policy, PolicyKey, RetryAction, RunBreakerRule,
};
pub use crate::tool::ToolDef;
pub use agent_errors_macros::{__policy_actions as policy_actions, __policy_keys as policy_keys};
pub use schemars;
pub use serde;
pub use serde_json;
pub use std;

use crate::tool::{ToolFuture, ToolHandler, schema_of, to_output};

/// A tool's successful output: the text the model sees.
pub type ToolOutput = String;

/// A started call of a `#[tool]` fn.
pub type CallFuture = Pin<Box<dyn Future<Output = Result<ToolOutput, BoxError>> + Send>>;

/// What a `#[tool]`'s generated call fn returns: the started call, or why the arguments did not
/// parse.
pub type CallResult = Result<CallFuture, ToolError>;

/// The generated fn that parses a tool's arguments, reads its context values and starts the
/// call.
pub type Call = fn(&str, &Extensions) -> CallResult;

/// The generated fn of a `#[tool]` method: the same, on the shared instance.
pub type MethodCall<S> = fn(&Arc<S>, &str, &Extensions) -> CallResult;

/// One rung of a ladder, as the macros write it in a static table.
#[derive(Debug, Clone, Copy)]
pub enum Rung {
    /// `retry(...)`; `max_attempts` is never zero (the macro rejects it).
    Retry {
        /// Calls at most, counting the first.
        max_attempts: u32,
        /// `initial = "..."`.
        initial: Option<Duration>,
        /// `max = "..."`.
        max: Option<Duration>,
        /// `when_safe`.
        when_safe: bool,
    },
    /// `fix(agent = "...", retries = n)`; `retries` is never zero.
    Fix {
        /// The fixer's name.
        agent: &'static str,
        /// How many times it may be asked.
        retries: u32,
    },
    /// `fallback(tool = "...")`.
    Fallback(&'static str),
    /// `escalate`.
    Escalate,
    /// `throw`.
    Throw,
    /// `degrade`.
    Degrade,
    /// `ask_person`.
    AskPerson,
}

/// `key = [rungs]` entries, in the order written.
pub type PolicyTable = [(PolicyKey, &'static [Rung])];

fn non_zero(count: u32) -> NonZeroU32 {
    NonZeroU32::new(count).expect("the macros reject zero counts")
}

impl Rung {
    /// The ladder's action this rung writes.
    pub fn action(&self) -> Action {
        match *self {
            Rung::Retry {
                max_attempts,
                initial,
                max,
                when_safe,
            } => Action::Retry(RetryAction {
                max_attempts: non_zero(max_attempts),
                initial,
                max,
                when_safe,
            }),
            Rung::Fix { agent, retries } => Action::Fix(FixAction {
                agent: Cow::Borrowed(agent),
                retries: non_zero(retries),
            }),
            Rung::Fallback(tool) => Action::Fallback {
                tool: Cow::Borrowed(tool),
            },
            Rung::Escalate => Action::Escalate,
            Rung::Throw => Action::Throw,
            Rung::Degrade => Action::Degrade,
            Rung::AskPerson => Action::AskPerson,
        }
    }
}

/// One action of every kind the runtime has, in the order the DSL lists them, for the test
/// that holds the macros' actions against the runtime's.
pub fn every_action() -> Vec<Action> {
    // Each action names the next one. The match has no `_` arm, so a new kind of `Action`
    // stops this compiling until it has a place in the list.
    fn after(action: &Action) -> Option<Action> {
        Some(match action {
            Action::Retry(_) => Rung::Fix {
                agent: "fixer",
                retries: 1,
            }
            .action(),
            Action::Fix(_) => Action::Escalate,
            Action::Escalate => Action::Throw,
            Action::Throw => Action::fallback("other"),
            Action::Fallback { .. } => Action::Degrade,
            Action::Degrade => Action::AskPerson,
            Action::AskPerson => return None,
        })
    }
    let first = Rung::Retry {
        max_attempts: 2,
        initial: None,
        max: None,
        when_safe: false,
    }
    .action();
    std::iter::successors(Some(first), after).collect()
}

/// The `Policy` of a table, entries in the order written.
pub fn policy(table: &PolicyTable) -> Policy {
    table.iter().fold(Policy::new(), |policy, (key, rungs)| {
        policy.on(*key, Ladder::new(rungs.iter().map(Rung::action)))
    })
}

/// What a `#[tool]` declares, known at compile time.
#[derive(Debug)]
pub struct ToolSpec {
    /// The name the model calls it by.
    pub name: &'static str,
    /// What the model is told it does.
    pub description: &'static str,
    /// Its own policy.
    pub policy: &'static PolicyTable,
    /// Its own policy's `run_breaker = ...`.
    pub run_breaker: Option<RunBreakerRule>,
    /// Whether its own policy asks for the recommended preset below its entries.
    pub recommended: bool,
    /// Whether `degrade` may drop it.
    pub optional: bool,
    /// Whether running it twice with the same arguments does no more than once.
    pub idempotent: bool,
    /// Whether each call waits for a person's approval before it runs.
    pub approval_required: bool,
    /// The bound on one call.
    pub timeout: Option<Duration>,
    /// The upstream whose service breaker it shares, when not its own name.
    pub breaker: Option<&'static str>,
    /// Whether its argument struct refuses a key given twice at every depth: every parameter's
    /// type is a scalar, a `String`, or an `Option`/`Vec`/`Box` of one, so no map or
    /// `serde_json::Value` (which keep the last of two values) is anywhere inside.
    pub unique_keys: bool,
    /// The check on its successful outputs, if it declares one.
    pub output_check: Option<OutputCheckSpec>,
    /// The reconciler it names, if it names one.
    pub reconcile: Option<&'static str>,
}

/// A `#[tool(output_check = ...)]`, as a static can hold it.
#[derive(Debug, Clone, Copy)]
pub enum OutputCheckSpec {
    /// `error_member(kind)`.
    ErrorMember(ErrorKind),
    /// `ok_false(kind)`.
    OkFalse(ErrorKind),
    /// The path of a function of the user's.
    Custom(fn(&str) -> Result<(), OutputRejected>),
}

impl OutputCheckSpec {
    fn check(self) -> OutputCheck {
        match self {
            OutputCheckSpec::ErrorMember(kind) => OutputCheck::error_member(kind),
            OutputCheckSpec::OkFalse(kind) => OutputCheck::ok_false(kind),
            OutputCheckSpec::Custom(check) => OutputCheck::new(check),
        }
    }
}

/// The `ToolDef` of a `#[tool]` fn: `schema` is the JSON Schema of its arguments, `call` parses
/// them and starts the call, `crate_defaults` is its crate's `defaults!`.
pub fn tool_def(
    spec: &'static ToolSpec,
    schema: fn() -> serde_json::Value,
    call: Call,
    crate_defaults: Option<Policy>,
) -> ToolDef {
    let def = ToolDef::from_handler(spec.name, spec.description, schema(), CallHandler(call));
    with_spec(def, spec, crate_defaults)
}

/// The facts every `#[tool]` declares, set on its `ToolDef`.
fn with_spec(def: ToolDef, spec: &'static ToolSpec, crate_defaults: Option<Policy>) -> ToolDef {
    let own = match spec.run_breaker {
        Some(rule) => policy(spec.policy).run_breaker(rule),
        None => policy(spec.policy),
    };
    let own = if spec.recommended {
        own.with_recommended()
    } else {
        own
    };
    let def = def
        .with_policy(own)
        .with_crate_defaults(crate_defaults)
        .optional(spec.optional)
        .idempotent(spec.idempotent)
        .requires_approval(spec.approval_required)
        .with_unique_keys(spec.unique_keys);
    let def = match spec.breaker {
        Some(key) => def.with_breaker_key(key),
        None => def,
    };
    let def = match spec.output_check {
        Some(check) => def.with_output_check(check.check()),
        None => def,
    };
    let def = match spec.reconcile {
        Some(name) => def.with_reconcile(name),
        None => def,
    };
    match spec.timeout {
        Some(timeout) => def.with_timeout(timeout),
        None => def,
    }
}

/// The JSON Schema of a tool's arguments.
///
/// Only `A`'s own `JsonSchema` functions depend on `A`; schemars' root-schema code is generic,
/// and instantiating it for every tool is a large share of what a tool costs to compile. So
/// it runs once, for `ArgsRoot`, which forwards to `A`'s functions.
pub fn schema<A: JsonSchema>() -> serde_json::Value {
    ArgsRoot::schema(ArgsFns {
        name: A::schema_name,
        id: A::schema_id,
        json_schema: A::json_schema,
    })
}

/// The `JsonSchema` functions of one argument type.
#[derive(Clone, Copy)]
struct ArgsFns {
    name: fn() -> Cow<'static, str>,
    id: fn() -> Cow<'static, str>,
    json_schema: fn(&mut schemars::SchemaGenerator) -> schemars::Schema,
}

thread_local! {
    /// The argument type whose schema is being generated on this thread.
    static ARGS: std::cell::Cell<Option<ArgsFns>> = const { std::cell::Cell::new(None) };
}

/// Stands for the argument type of the schema being generated: its `JsonSchema` functions are
/// that type's, read from [`ARGS`].
struct ArgsRoot;

impl ArgsRoot {
    fn schema(fns: ArgsFns) -> serde_json::Value {
        /// Puts back what was there, even on unwind.
        struct Restore(Option<ArgsFns>);
        impl Drop for Restore {
            fn drop(&mut self) {
                ARGS.set(self.0);
            }
        }
        let _restore = Restore(ARGS.replace(Some(fns)));
        schema_of::<ArgsRoot>()
    }

    fn fns() -> ArgsFns {
        ARGS.get()
            .expect("ArgsRoot is only asked for a schema inside ArgsRoot::schema")
    }
}

impl JsonSchema for ArgsRoot {
    fn schema_name() -> Cow<'static, str> {
        (Self::fns().name)()
    }

    fn schema_id() -> Cow<'static, str> {
        (Self::fns().id)()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        (Self::fns().json_schema)(generator)
    }
}

/// Parses a tool's arguments.
pub fn parse_args<A: DeserializeOwned>(raw: &str) -> Result<A, ToolError> {
    crate::arguments::parse_args(raw)
}

/// The started call. Its bound, spanned on the tool's name, is what a future that is not `Send`
/// is reported against.
pub fn call<F>(future: F) -> CallResult
where
    F: Future<Output = Result<ToolOutput, BoxError>> + Send + 'static,
{
    Ok(Box::pin(future))
}

/// The started call of a plain `fn` tool: `body` runs on tokio's blocking pool, so a
/// body that blocks its thread holds up no other task and the tool's timeout can fire. A call
/// that times out (or whose run ends) stops being waited for, but its thread cannot be stopped:
/// it runs on in the background until the body returns. A panic in `body` reaches the executor
/// as the tool's panic.
pub fn call_blocking<F>(body: F) -> CallResult
where
    F: FnOnce() -> Result<ToolOutput, BoxError> + Send + 'static,
{
    call(async move {
        match tokio::task::spawn_blocking(body).await {
            Ok(result) => result,
            Err(failed) => match failed.try_into_panic() {
                Ok(payload) => std::panic::resume_unwind(payload),
                // Only a runtime shutting down cancels a blocking task before it starts.
                Err(cancelled) => Err(Box::new(cancelled) as BoxError),
            },
        }
    })
}

/// The `ToolDef` of a `#[tool]` method of a `#[toolset]` block, called on `this`.
pub fn method_tool_def<S: Send + Sync + 'static>(
    spec: &'static ToolSpec,
    schema: fn() -> serde_json::Value,
    this: Arc<S>,
    call: MethodCall<S>,
    crate_defaults: Option<Policy>,
) -> ToolDef {
    let handler = MethodHandler { this, call };
    let def = ToolDef::from_handler(spec.name, spec.description, schema(), handler);
    with_spec(def, spec, crate_defaults)
}

/// A context value a tool asks for with a `Ctx<T>` parameter; missing, the call fails before
/// it starts, classified as a bug the model is told about.
pub fn context<T: Send + Sync + 'static>(
    extensions: &Extensions,
    raw: &str,
) -> Result<Ctx<T>, ToolError> {
    extensions
        .ctx::<T>()
        .map_err(|missing| ToolError::execution(raw, missing))
}

struct CallHandler(Call);

impl ToolHandler for CallHandler {
    fn call(&self, raw_args: &str) -> Result<ToolFuture, ToolError> {
        (self.0)(raw_args, &Extensions::new())
    }

    fn call_with(&self, raw_args: &str, extensions: &Extensions) -> Result<ToolFuture, ToolError> {
        (self.0)(raw_args, extensions)
    }
}

struct MethodHandler<S> {
    this: Arc<S>,
    call: MethodCall<S>,
}

impl<S: Send + Sync + 'static> ToolHandler for MethodHandler<S> {
    fn call(&self, raw_args: &str) -> Result<ToolFuture, ToolError> {
        (self.call)(&self.this, raw_args, &Extensions::new())
    }

    fn call_with(&self, raw_args: &str, extensions: &Extensions) -> Result<ToolFuture, ToolError> {
        (self.call)(&self.this, raw_args, extensions)
    }
}

impl fmt::Debug for CallHandler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallHandler").finish_non_exhaustive()
    }
}

/// The `FixerDef` of a sync `#[fixer]` fn. Its own bound, rather than `FixerDef::from_fn`'s, is
/// what a wrong signature is reported against, so the message does not depend on `fix.rs`.
pub fn fixer<F>(name: &'static str, f: F) -> FixerDef
where
    F: Fn(FixRequest) -> Result<Fix, FixerError> + Send + Sync + 'static,
{
    FixerDef::from_fn(name, f)
}

/// The `FixerDef` of an `async` `#[fixer]` fn.
pub fn async_fixer<F, Fut>(name: &'static str, f: F) -> FixerDef
where
    F: Fn(FixRequest) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Fix, FixerError>> + Send + 'static,
{
    FixerDef::from_async_fn(name, f)
}

/// Serializes a tool's successful value for the model.
pub fn output<T: Serialize + ?Sized>(value: &T) -> Result<ToolOutput, BoxError> {
    to_output(value)
}

/// Boxes a tool's error, keeping it reachable by downcast.
pub fn error<E: Into<BoxError>>(error: E) -> BoxError {
    error.into()
}

/// What a `#[tool]` entry asks for its crate's `defaults!`.
///
/// `defaults!` implements a crate-local trait for this type with a by-value method; a tool entry
/// brings that trait into scope with `use crate::*`, and method resolution prefers it over the
/// by-reference [`NoCrateDefaults`] fallback. Crates without `defaults!` get the fallback.
#[derive(Debug, Clone, Copy)]
pub struct DefaultsProbe;

/// The answer for crates that declare no `defaults!`.
pub trait NoCrateDefaults {
    /// `None`: no crate-wide policy.
    fn __agent_errors_crate_defaults(self) -> Option<Policy>;
}

impl NoCrateDefaults for &DefaultsProbe {
    fn __agent_errors_crate_defaults(self) -> Option<Policy> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Documented, with a nested type that lands in `$defs`.
    #[derive(serde::Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    #[schemars(title = "lookup")]
    #[allow(dead_code)]
    struct Args {
        /// What to look up.
        query: String,
        limit: Option<u32>,
        filter: Filter,
        tags: Vec<Filter>,
    }

    #[derive(serde::Deserialize, JsonSchema)]
    #[allow(dead_code)]
    enum Filter {
        Recent,
        Named { name: String },
    }

    #[derive(serde::Deserialize, JsonSchema)]
    struct Empty {}

    #[test]
    fn the_schema_is_the_one_schemars_generates() {
        assert_eq!(schema::<Args>(), schema_of::<Args>());
        assert_eq!(schema::<Empty>(), schema_of::<Empty>());
        assert_eq!(schema::<Option<u32>>(), schema_of::<Option<u32>>());
        assert!(schema::<Args>()["$defs"]["Filter"].is_object());
    }

    #[test]
    fn a_table_builds_the_policy_the_builder_would() {
        const TABLE: &PolicyTable = &[
            (
                PolicyKey::Execution,
                &[
                    Rung::Retry {
                        max_attempts: 4,
                        initial: Some(Duration::from_millis(250)),
                        max: None,
                        when_safe: false,
                    },
                    Rung::Fallback("cached"),
                    Rung::Degrade,
                ],
            ),
            (
                PolicyKey::InvalidArgs,
                &[Rung::Fix {
                    agent: "json_fixer",
                    retries: 2,
                }],
            ),
            (PolicyKey::Kind(ErrorKind::Auth), &[Rung::Throw]),
            (PolicyKey::Kind(ErrorKind::NotFound), &[Rung::Escalate]),
        ];
        let expected = Policy::new()
            .on(
                PolicyKey::Execution,
                Ladder::new([
                    Action::Retry(RetryAction {
                        max_attempts: NonZeroU32::new(4).unwrap(),
                        initial: Some(Duration::from_millis(250)),
                        max: None,
                        when_safe: false,
                    }),
                    Action::fallback("cached"),
                    Action::Degrade,
                ]),
            )
            .on(
                PolicyKey::InvalidArgs,
                Action::fix("json_fixer", 2).unwrap(),
            )
            .on(PolicyKey::Kind(ErrorKind::Auth), Action::Throw)
            .on(PolicyKey::Kind(ErrorKind::NotFound), Action::Escalate);
        assert_eq!(policy(TABLE), expected);
        assert_eq!(policy(&[]), Policy::new());
    }
}
