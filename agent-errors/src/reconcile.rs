//! Reconcilers: how to find out whether a call whose outcome is unknown took effect, asked
//! before anything else is done about that call.
//!
//! A call's outcome is unknown when the process running it stopped before its result was
//! recorded (a resumed durable run finds it running), or when it failed after its request may
//! have reached the service (a timeout, a connection dropped mid-answer). Calling the tool again
//! may do the work twice; telling the model "it failed" invites it to ask again, which does the
//! same. A tool that can look its own effects up (a refund by its idempotency key, an email in
//! the sent folder) names a reconciler, and the executor asks it first.

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::{BoxError, BoxFuture};
use crate::extensions::Extensions;
use crate::idempotency::IdempotencyKey;

/// What a reconciler is asked: which call, with which key and arguments, and what left its
/// outcome unknown.
///
/// # Examples
///
/// Testing a reconciler without running an agent:
///
/// ```
/// use agent_errors::call::{IdempotencyKey, ReconcileRequest, Reconciled};
///
/// fn check(request: &ReconcileRequest) -> Reconciled {
///     match request.args.as_ref().and_then(|args| args["order"].as_str()) {
///         Some("A-7") => Reconciled::happened("refund re_1 for A-7"),
///         _ => Reconciled::DidNotHappen,
///     }
/// }
///
/// let key = IdempotencyKey::new("run-7", "call_1");
/// let request = ReconcileRequest::new("refund", key, r#"{"order": "A-7"}"#);
/// assert_eq!(check(&request), Reconciled::happened("refund re_1 for A-7"));
/// assert_eq!(request.key.to_string(), "run-7:call_1");
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ReconcileRequest {
    /// The tool whose call's outcome is unknown.
    pub tool: String,
    /// The call's idempotency key: the one every attempt of the call sent (and the one a call
    /// run again after [`Reconciled::DidNotHappen`] sends).
    pub key: IdempotencyKey,
    /// The arguments the call sent, as text.
    pub raw_args: String,
    /// The same arguments parsed as JSON, when they parse.
    pub args: Option<serde_json::Value>,
    /// What left the outcome unknown, sanitized ("the call was interrupted ...", "deadline has
    /// elapsed").
    pub reason: String,
    /// The values the run was given: `request.context.get::<T>()` (a client, a tenant).
    pub context: Extensions,
}

impl ReconcileRequest {
    /// A request about the call `key` of `tool` with `raw_args`; mostly for tests of
    /// reconcilers.
    pub fn new(tool: impl Into<String>, key: IdempotencyKey, raw_args: impl Into<String>) -> Self {
        let raw_args = raw_args.into();
        ReconcileRequest {
            tool: tool.into(),
            key,
            args: serde_json::from_str(&raw_args).ok(),
            raw_args,
            reason: String::new(),
            context: Extensions::new(),
        }
    }

    /// Sets what left the outcome unknown.
    #[must_use]
    pub fn with_reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = reason.into();
        self
    }

    /// Sets the run's values the reconciler sees.
    #[must_use]
    pub fn with_context(mut self, context: Extensions) -> Self {
        self.context = context;
        self
    }
}

/// A reconciler's answer: whether the call took effect.
///
/// # Examples
///
/// ```
/// use agent_errors::call::Reconciled;
///
/// let answer = Reconciled::happened_json(&serde_json::json!({"refund": "re_1"}))?;
/// let next = match &answer {
///     Reconciled::Happened(output) => format!("the call's result is {output}"),
///     Reconciled::DidNotHappen => "the call runs (with the same key)".to_owned(),
///     Reconciled::StillUnknown => "the tool's `outcome_unknown` policy answers".to_owned(),
///     _ => unreachable!("the enum is non-exhaustive"),
/// };
/// assert_eq!(next, r#"the call's result is {"refund":"re_1"}"#);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Reconciled {
    /// The call took effect: this is its result, as the tool would have answered (the text the
    /// model reads).
    Happened(String),
    /// The call did not take effect: it is safe to run, and runs with the same idempotency key.
    DidNotHappen,
    /// The reconciler cannot tell: the tool's `outcome_unknown` policy answers the call.
    StillUnknown,
}

impl Reconciled {
    /// The call took effect, and `output` is its result as the model reads it.
    pub fn happened(output: impl Into<String>) -> Self {
        Reconciled::Happened(output.into())
    }

    /// The call took effect, and `output`, written as JSON (a string as its text), is its
    /// result.
    ///
    /// # Errors
    ///
    /// When `output` does not serialize to JSON.
    pub fn happened_json<T: Serialize + ?Sized>(output: &T) -> Result<Self, serde_json::Error> {
        Ok(Reconciled::Happened(match serde_json::to_value(output)? {
            serde_json::Value::String(text) => text,
            value => value.to_string(),
        }))
    }
}

/// Something that finds out whether a call took effect. Implemented for functions through
/// [`ReconcilerDef`]'s constructors; implement it by hand for a reconciler with state (a
/// client of the payment API).
///
/// An error is taken as [`Reconciled::StillUnknown`] (and logged): a reconciler that cannot
/// reach the service cannot tell.
///
/// # Examples
///
/// ```
/// use std::collections::HashMap;
/// use std::sync::Mutex;
/// use agent_errors::build::{Reconciler, ReconcilerDef};
/// use agent_errors::call::{BoxFuture, ReconcileRequest, Reconciled};
/// use agent_errors::BoxError;
///
/// /// The refunds the payment service made, by idempotency key.
/// struct Ledger(Mutex<HashMap<String, String>>);
///
/// impl Reconciler for Ledger {
///     fn reconcile(&self, request: ReconcileRequest) -> BoxFuture<'_, Result<Reconciled, BoxError>> {
///         let found = self.0.lock().unwrap().get(&request.key.to_string()).cloned();
///         Box::pin(async move {
///             Ok(found.map_or(Reconciled::DidNotHappen, Reconciled::Happened))
///         })
///     }
/// }
///
/// let ledger = ReconcilerDef::new("ledger", Ledger(Mutex::new(HashMap::new())));
/// assert_eq!(ledger.name(), "ledger");
/// ```
pub trait Reconciler: Send + Sync + 'static {
    /// Finds out whether the call `request` names took effect.
    fn reconcile(&self, request: ReconcileRequest) -> BoxFuture<'_, Result<Reconciled, BoxError>>;
}

struct SyncFn<F>(F);

impl<F, E> Reconciler for SyncFn<F>
where
    F: Fn(ReconcileRequest) -> Result<Reconciled, E> + Send + Sync + 'static,
    E: Into<BoxError>,
{
    fn reconcile(&self, request: ReconcileRequest) -> BoxFuture<'_, Result<Reconciled, BoxError>> {
        let answer = (self.0)(request).map_err(Into::into);
        Box::pin(std::future::ready(answer))
    }
}

struct AsyncFn<F>(F);

impl<F, Fut, E> Reconciler for AsyncFn<F>
where
    F: Fn(ReconcileRequest) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Reconciled, E>> + Send + 'static,
    E: Into<BoxError>,
{
    fn reconcile(&self, request: ReconcileRequest) -> BoxFuture<'_, Result<Reconciled, BoxError>> {
        let answer = (self.0)(request);
        Box::pin(async move { answer.await.map_err(Into::into) })
    }
}

/// A reconciler registered under a name, which a tool names (`#[tool(reconcile = "name")]`,
/// [`ToolDef::with_reconcile`](crate::ToolDef::with_reconcile)); given to an agent or a
/// registry like a fixer.
///
/// # Examples
///
/// ```
/// use agent_errors::{Agent, ToolDef};
/// use agent_errors::build::ReconcilerDef;
/// use agent_errors::call::Reconciled;
/// use agent_errors::testing::ScriptedModel;
///
/// let refund = ToolDef::new("refund", "Refunds an order.", |_: serde_json::Value| async {
///     Ok::<_, std::io::Error>("refunded")
/// })
/// .with_reconcile("check_refund");
/// // Asks the payment service whether a refund with this key exists.
/// let check = ReconcilerDef::from_fn("check_refund", |request| {
///     let _ = request.key.to_string();
///     Ok::<_, std::io::Error>(Reconciled::DidNotHappen)
/// });
/// let agent = Agent::builder("desk")
///     .model(ScriptedModel::new())
///     .tool(refund)
///     .reconciler(check)
///     .build();
/// assert!(agent.is_ok());
/// ```
#[derive(Clone)]
pub struct ReconcilerDef {
    name: Cow<'static, str>,
    reconciler: Arc<dyn Reconciler>,
}

impl ReconcilerDef {
    /// A reconciler from any [`Reconciler`].
    pub fn new(name: impl Into<Cow<'static, str>>, reconciler: impl Reconciler) -> Self {
        ReconcilerDef {
            name: name.into(),
            reconciler: Arc::new(reconciler),
        }
    }

    /// A reconciler from a plain function.
    pub fn from_fn<F, E>(name: impl Into<Cow<'static, str>>, f: F) -> Self
    where
        F: Fn(ReconcileRequest) -> Result<Reconciled, E> + Send + Sync + 'static,
        E: Into<BoxError> + 'static,
    {
        ReconcilerDef::new(name, SyncFn(f))
    }

    /// A reconciler from an async function.
    pub fn from_async_fn<F, Fut, E>(name: impl Into<Cow<'static, str>>, f: F) -> Self
    where
        F: Fn(ReconcileRequest) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Reconciled, E>> + Send + 'static,
        E: Into<BoxError> + 'static,
    {
        ReconcilerDef::new(name, AsyncFn(f))
    }

    /// The registered name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Asks the reconciler.
    pub fn reconcile(
        &self,
        request: ReconcileRequest,
    ) -> BoxFuture<'_, Result<Reconciled, BoxError>> {
        self.reconciler.reconcile(request)
    }
}

impl fmt::Debug for ReconcilerDef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReconcilerDef")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}
