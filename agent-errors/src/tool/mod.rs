//! Tools: a name, a description, a JSON Schema for the arguments, a policy, and a handler that
//! parses the model's arguments and runs the function.

use std::any::TypeId;
use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::chat::ToolSpec;
use crate::error::BoxError;
use crate::output_check::OutputCheck;
use crate::policy::Policy;

mod handler;

pub(crate) use handler::{FnHandler, ToolOutput, schema_of, to_output};
pub use handler::{ToolFuture, ToolHandler};

/// A registered tool: what `#[tool]` produces and `tools![...]` collects.
///
/// Build one by hand from a closure over a typed argument struct when a `#[tool]` fn does not
/// fit (a tool made at run time, a closure that owns a client):
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use agent_errors::{HttpError, ToolDef, policy::{Action, Policy, PolicyKey}};
///
/// /// The arguments the model sends; their JSON Schema is offered with the tool.
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Args {
///     /// A city name.
///     city: String,
/// }
///
/// let weather = ToolDef::new("weather", "Today's weather in a city.", |args: Args| async move {
///     if args.city.is_empty() {
///         return Err(HttpError::new(400, "city is empty"));
///     }
///     Ok(format!("sunny in {}", args.city))
/// })
/// .with_policy(Policy::new().on(PolicyKey::Execution, Action::retry(3)?))
/// .with_timeout(Duration::from_secs(10));
///
/// assert_eq!(weather.name(), "weather");
/// assert_eq!(weather.parameters()["required"][0], "city");
/// # Ok::<(), agent_errors::retry::ZeroAttempts>(())
/// ```
#[derive(Clone)]
pub struct ToolDef {
    name: Cow<'static, str>,
    description: Cow<'static, str>,
    parameters: serde_json::Value,
    policy: Policy,
    crate_defaults: Option<Policy>,
    optional: bool,
    idempotent: bool,
    keyed: bool,
    approval_required: bool,
    timeout: Option<Duration>,
    breaker_key: Option<Cow<'static, str>>,
    output_check: Option<OutputCheck>,
    /// Whether `output_check` is the recommended preset's, put there when the registry was
    /// built.
    preset_output_check: bool,
    reconcile: Option<Cow<'static, str>>,
    handler: Arc<dyn ToolHandler>,
    /// Whether the handler's argument type refuses a key given twice at every depth (a struct
    /// of plain fields, as `#[tool]` knows from its parameters' types), so that its own parse
    /// is the duplicate-key check. False unless known: a `serde_json::Value` or a map reads
    /// `{"a": 1, "a": 2}` as the last value, and the gate must check such arguments itself.
    refuses_duplicate_keys: bool,
    /// The context values every call needs (a `Ctx<T>` parameter's type): a run that lacks one
    /// is refused when it starts.
    requires: Vec<(TypeId, &'static str)>,
}

impl ToolDef {
    /// A tool from a typed async function; the schema comes from `A`.
    ///
    /// Do the work inside the returned future (`|args| async move { ... }`), not in the closure
    /// before it: the executor may drop the future unpolled.
    pub fn new<A, F, Fut, T, E>(
        name: impl Into<Cow<'static, str>>,
        description: impl Into<Cow<'static, str>>,
        f: F,
    ) -> Self
    where
        A: DeserializeOwned + JsonSchema + 'static,
        F: Fn(A) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
        T: Serialize,
        E: Into<BoxError>,
    {
        let parameters = schema_of::<A>();
        ToolDef::from_handler(name, description, parameters, FnHandler::new(f))
    }

    /// A tool from any handler and a hand-written schema.
    pub fn from_handler(
        name: impl Into<Cow<'static, str>>,
        description: impl Into<Cow<'static, str>>,
        parameters: serde_json::Value,
        handler: impl ToolHandler,
    ) -> Self {
        ToolDef {
            name: name.into(),
            description: description.into(),
            parameters,
            policy: Policy::new(),
            crate_defaults: None,
            optional: false,
            idempotent: false,
            keyed: false,
            approval_required: false,
            timeout: None,
            breaker_key: None,
            output_check: None,
            preset_output_check: false,
            reconcile: None,
            handler: Arc::new(handler),
            refuses_duplicate_keys: false,
            requires: Vec::new(),
        }
    }

    /// The same tool with another handler: everything else (name, description, schema,
    /// policies, timeout) is kept. For wrappers that add behaviour around a tool's calls.
    #[must_use]
    pub fn with_handler(mut self, handler: impl ToolHandler) -> Self {
        self.handler = Arc::new(handler);
        // The new handler may read the arguments another way.
        self.refuses_duplicate_keys = false;
        self
    }

    /// Sets the tool's own policy (the top layer).
    #[must_use]
    pub fn with_policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// Sets the crate-wide defaults this tool inherits (the third layer).
    #[must_use]
    pub fn with_crate_defaults(mut self, defaults: Option<Policy>) -> Self {
        self.crate_defaults = defaults;
        self
    }

    /// Marks the tool as optional: `degrade` may drop it.
    #[must_use]
    pub fn optional(mut self, optional: bool) -> Self {
        self.optional = optional;
        self
    }

    /// Declares that calling the tool twice with the same arguments does no more than calling it
    /// once (a lookup, a write keyed by the call's [`IdempotencyKey`](crate::call::IdempotencyKey)).
    /// When a durable run resumes after a crash, a call of an idempotent tool that was running is
    /// run again; any other tool's interrupted call gets its `outcome_unknown` policy (by default
    /// an error result telling the model the outcome is unknown).
    ///
    /// ```
    /// use agent_errors::ToolDef;
    ///
    /// async fn price(_: serde_json::Value) -> Result<String, std::io::Error> { Ok("3".into()) }
    /// let tool = ToolDef::new("price", "Today's price.", price).idempotent(true);
    /// assert!(tool.is_idempotent());
    /// ```
    #[must_use]
    pub fn idempotent(mut self, idempotent: bool) -> Self {
        self.idempotent = idempotent;
        self
    }

    /// Whether the tool may run twice for one call (see [`ToolDef::idempotent`]).
    pub fn is_idempotent(&self) -> bool {
        self.idempotent
    }

    /// Declares that the tool hands each call's
    /// [`IdempotencyKey`](crate::call::IdempotencyKey) to the service it calls, and that the
    /// service applies a request once per key (Stripe's `Idempotency-Key` header, a unique
    /// column, an MCP server that deduplicates by the key in `_meta`): a second attempt of the
    /// same call, which carries the same key, cannot apply the effect twice. The recommended
    /// preset retries such a tool's timeouts and dropped connections, which it answers as
    /// unknown outcomes for a tool that is neither keyed nor [idempotent](ToolDef::idempotent);
    /// and a durable run that resumes after a crash makes the call that was running again,
    /// with the same key, as it does for an idempotent tool.
    ///
    /// A `#[tool]` with a `Ctx<IdempotencyKey>` parameter is keyed by itself (so is a tool
    /// built here that [requires](ToolDef::requires_context) the key): reading the key is
    /// taken as handing it on. Say `keyed(false)` after it for a tool that reads the key for
    /// something else.
    ///
    /// ```
    /// use agent_errors::ToolDef;
    /// use agent_errors::call::IdempotencyKey;
    ///
    /// async fn refund(_: serde_json::Value) -> Result<String, std::io::Error> { Ok("done".into()) }
    /// let by_hand = ToolDef::new("refund", "Refunds an order.", refund).keyed(true);
    /// assert!(by_hand.is_keyed() && !by_hand.is_idempotent());
    /// let reads_the_key = ToolDef::new("refund", "Refunds an order.", refund)
    ///     .requires_context::<IdempotencyKey>();
    /// assert!(reads_the_key.is_keyed());
    /// ```
    #[must_use]
    pub fn keyed(mut self, keyed: bool) -> Self {
        self.keyed = keyed;
        self
    }

    /// Whether the tool hands each call's idempotency key to its service (see
    /// [`ToolDef::keyed`]).
    pub fn is_keyed(&self) -> bool {
        self.keyed
    }

    /// Whether a second attempt of one call cannot apply its effect twice: the tool is
    /// idempotent or keyed.
    pub(crate) fn repeats_safely(&self) -> bool {
        self.idempotent || self.keyed
    }

    /// Requires a person's approval before each call of the tool runs (`#[tool(approval =
    /// required)]`): the run asks its [`Approver`](crate::approval::Approver), and a checkpointed
    /// run with nobody to answer now ends waiting for a person (see [`crate::approval`]).
    ///
    /// ```
    /// use agent_errors::ToolDef;
    ///
    /// async fn transfer(_: serde_json::Value) -> Result<String, std::io::Error> { Ok("sent".into()) }
    /// let tool = ToolDef::new("transfer", "Sends money.", transfer).requires_approval(true);
    /// assert!(tool.is_approval_required());
    /// ```
    #[must_use]
    pub fn requires_approval(mut self, required: bool) -> Self {
        self.approval_required = required;
        self
    }

    /// Whether each call of the tool waits for a person's approval (see
    /// [`ToolDef::requires_approval`]).
    pub fn is_approval_required(&self) -> bool {
        self.approval_required
    }

    /// Bounds every call of the tool: a call still running after `timeout` fails with
    /// `tokio::time::error::Elapsed`, classified [`Timeout`](crate::ErrorKind::Timeout), so a tool
    /// that hangs cannot hold its run open.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Names the upstream this tool depends on: tools with the same key share one service
    /// breaker (and one retry budget), so when `weather-api` goes down, every tool calling it
    /// stops calling together. Without it the key is the tool's name.
    ///
    /// ```
    /// use agent_errors::ToolDef;
    ///
    /// async fn forecast(_: serde_json::Value) -> Result<String, std::io::Error> { Ok("sun".into()) }
    /// let tool = ToolDef::new("forecast", "Tomorrow's weather.", forecast)
    ///     .with_breaker_key("weather-api");
    /// assert_eq!(tool.breaker_key(), "weather-api");
    /// ```
    #[must_use]
    pub fn with_breaker_key(mut self, key: impl Into<Cow<'static, str>>) -> Self {
        self.breaker_key = Some(key.into());
        self
    }

    /// The key of the service breaker and retry budget this tool answers to: the upstream it
    /// names, else its own name.
    pub fn breaker_key(&self) -> &str {
        self.breaker_key.as_deref().unwrap_or(&self.name)
    }

    /// Checks every successful output of the tool: one the check rejects is a failure of the
    /// kind it names, and goes down the tool's ladder like the tool's own errors (a
    /// `{"error": "rate limited"}` body retried under `retry(3)`, say). For services that
    /// answer 200 with the failure in the body. `#[tool(output_check = ...)]` sets one too.
    ///
    /// ```
    /// use agent_errors::{ErrorKind, ToolDef};
    /// use agent_errors::call::OutputCheck;
    ///
    /// async fn quote(_: serde_json::Value) -> Result<String, std::io::Error> {
    ///     Ok(r#"{"error": "rate limited, retry later"}"#.into())
    /// }
    /// let tool = ToolDef::new("quote", "A stock quote.", quote)
    ///     .with_output_check(OutputCheck::error_member(ErrorKind::Transient));
    /// let check = tool.output_check().expect("set");
    /// assert!(check.check(r#"{"error": "rate limited, retry later"}"#).is_err());
    /// ```
    #[must_use]
    pub fn with_output_check(mut self, check: OutputCheck) -> Self {
        self.output_check = Some(check);
        self
    }

    /// The check on the tool's successful outputs, if it has one (see
    /// [`ToolDef::with_output_check`]).
    pub fn output_check(&self) -> Option<&OutputCheck> {
        self.output_check.as_ref()
    }

    /// Checks the tool's outputs for error envelopes, as the recommended preset does, unless
    /// it has a check of its own.
    pub(crate) fn with_preset_output_check(mut self) -> Self {
        if self.output_check.is_none() {
            self.output_check = Some(OutputCheck::envelopes());
            self.preset_output_check = true;
        }
        self
    }

    /// Whether the tool's output check is the recommended preset's.
    pub(crate) fn has_preset_output_check(&self) -> bool {
        self.preset_output_check
    }

    /// Names the reconciler (`#[tool(reconcile = "name")]`) that finds out whether a call of
    /// this tool took effect when its outcome is unknown: after a crash mid-call (a resumed
    /// run finds the call running), or after a failure that may have reached the service (a
    /// timeout, a connection dropped mid-answer). It is asked before anything else is done
    /// about the call: [`Happened`](crate::call::Reconciled::Happened) is the call's result,
    /// [`DidNotHappen`](crate::call::Reconciled::DidNotHappen) runs the call (with the same
    /// idempotency key), [`StillUnknown`](crate::call::Reconciled::StillUnknown) leaves the call
    /// to the tool's `outcome_unknown` policy. The reconciler is given to the agent or registry
    /// like a fixer; a name none was given under is refused when it is built.
    ///
    /// ```
    /// use agent_errors::ToolDef;
    ///
    /// async fn refund(_: serde_json::Value) -> Result<String, std::io::Error> { Ok("done".into()) }
    /// let tool = ToolDef::new("refund", "Refunds an order.", refund).with_reconcile("check_refund");
    /// assert_eq!(tool.reconciler(), Some("check_refund"));
    /// ```
    #[must_use]
    pub fn with_reconcile(mut self, reconciler: impl Into<Cow<'static, str>>) -> Self {
        self.reconcile = Some(reconciler.into());
        self
    }

    /// The name of the reconciler the tool names, if any (see [`ToolDef::with_reconcile`]).
    pub fn reconciler(&self) -> Option<&str> {
        self.reconcile.as_deref()
    }

    /// The bound on one call, if any.
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// The tool's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What the tool does, for the model.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// The JSON Schema of the arguments.
    pub fn parameters(&self) -> &serde_json::Value {
        &self.parameters
    }

    /// The tool's own policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The crate defaults it inherits.
    pub fn crate_defaults(&self) -> Option<&Policy> {
        self.crate_defaults.as_ref()
    }

    /// Whether `degrade` may drop it.
    pub fn is_optional(&self) -> bool {
        self.optional
    }

    /// Declares that every call needs the run's value of type `T` (what a `#[tool]` with a
    /// `Ctx<T>` parameter declares by itself): an agent run not given one
    /// ([`RunOptions::context`](crate::RunOptions::context)) is refused when it starts, with
    /// [`RunError::MissingContext`](crate::RunError::MissingContext) naming the tool and the
    /// type, instead of each call failing where only the model sees it.
    ///
    /// ```
    /// use agent_errors::{Agent, RunError, ToolDef};
    /// use agent_errors::testing::ScriptedModel;
    ///
    /// struct Tenant(String);
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let tool = ToolDef::new("whoami", "Names the tenant.", |_: serde_json::Value| async {
    ///     Ok::<_, std::io::Error>("someone")
    /// })
    /// .requires_context::<Tenant>();
    /// let agent = Agent::builder("a").model(ScriptedModel::new().text("hi")).tool(tool).build()?;
    /// let error = agent.run("go").await.unwrap_err();
    /// assert!(matches!(error, RunError::MissingContext { ref tool, .. } if tool == "whoami"));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn requires_context<T: 'static>(mut self) -> Self {
        let id = TypeId::of::<T>();
        if id == TypeId::of::<crate::idempotency::IdempotencyKey>() {
            self.keyed = true;
        }
        if !self.requires.iter().any(|(known, _)| *known == id) {
            self.requires.push((id, std::any::type_name::<T>()));
        }
        self
    }

    /// The context values every call needs, by type.
    pub(crate) fn required_context(&self) -> &[(TypeId, &'static str)] {
        &self.requires
    }

    /// Whether parsing the arguments already refuses a key given twice at every depth.
    pub(crate) fn refuses_duplicate_keys(&self) -> bool {
        self.refuses_duplicate_keys
    }

    /// Marks the handler's argument type as one that refuses a key given twice at every depth.
    pub(crate) fn with_unique_keys(mut self, refuses: bool) -> Self {
        self.refuses_duplicate_keys = refuses;
        self
    }

    /// The handler: the executor starts it only with arguments the gate cleared for this tool
    /// (see [`Cleared`](crate::call::Cleared)), so it is not reachable from outside the crate.
    pub(crate) fn handler(&self) -> &dyn ToolHandler {
        self.handler.as_ref()
    }

    /// The tool as offered to a model.
    pub fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name.to_string(),
            description: self.description.to_string(),
            parameters: self.parameters.clone(),
        }
    }
}

impl fmt::Debug for ToolDef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolDef")
            .field("name", &self.name)
            .field("description", &self.description)
            .field("policy", &self.policy)
            .field("optional", &self.optional)
            .field("idempotent", &self.idempotent)
            .field("keyed", &self.keyed)
            .field("approval_required", &self.approval_required)
            .field("timeout", &self.timeout)
            .field("breaker_key", &self.breaker_key)
            .field("output_check", &self.output_check.is_some())
            .field("reconcile", &self.reconcile)
            .finish_non_exhaustive()
    }
}
