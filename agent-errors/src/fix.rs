//! Fixers: plain functions (or agents) that repair a failed call.

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde::Serialize;

use crate::classify::ErrorKind;
use crate::error::{BoxError, Severity};
use crate::policy::PolicyKey;

/// What a fixer is told about the failure it should repair.
///
/// # Examples
///
/// Testing a fixer without running an agent:
///
/// ```
/// use agent_errors::prelude::*;
///
/// #[fixer]
/// fn trim_commas(req: FixRequest) -> Result<Fix, FixerError> {
///     Ok(Fix::args(req.raw_args.replace(",}", "}")))
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let request = FixRequest::new("count_keys", r#"{"a": 1,}"#, "trailing comma");
/// assert!(request.args.is_none()); // not JSON yet
/// let fixed = fixers![trim_commas][0].fix(request).await;
/// assert_eq!(fixed.unwrap(), Fix::args(r#"{"a": 1}"#));
/// # }
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct FixRequest {
    /// The tool whose call failed.
    pub tool: String,
    /// The arguments exactly as the model sent them (or as the last repair left them).
    pub raw_args: String,
    /// The arguments parsed as JSON, when they parse.
    pub args: Option<serde_json::Value>,
    /// The failure's message as the model reads it, sanitized (a rig tool's model feedback,
    /// not its operator message).
    pub failure: String,
    /// The failure's kind.
    pub kind: ErrorKind,
    /// The policy key that sent the failure here.
    pub key: PolicyKey,
    /// Which try this is for this fixer and failure (1-based).
    pub attempt: u32,
    /// The values the run was given: `request.context.get::<T>()`.
    pub context: crate::call::Extensions,
    /// The meter of the run whose call failed: a fixer that is an agent runs on it, so the
    /// requests and tool calls it makes count against that run's caps.
    pub(crate) meter: crate::usage::RunMeter,
}

impl FixRequest {
    /// A request; mostly for tests of fixers.
    pub fn new(
        tool: impl Into<String>,
        raw_args: impl Into<String>,
        failure: impl Into<String>,
    ) -> Self {
        let raw_args = raw_args.into();
        FixRequest {
            tool: tool.into(),
            args: serde_json::from_str(&raw_args).ok(),
            raw_args,
            failure: failure.into(),
            kind: ErrorKind::Validation,
            key: PolicyKey::InvalidArgs,
            attempt: 1,
            context: crate::call::Extensions::new(),
            meter: crate::usage::RunMeter::default(),
        }
    }

    /// Sets the run's values the fixer sees.
    #[must_use]
    pub fn with_context(mut self, context: crate::call::Extensions) -> Self {
        self.context = context;
        self
    }

    /// Sets the kind and key.
    #[must_use]
    pub fn with_kind(mut self, key: PolicyKey, kind: ErrorKind) -> Self {
        self.key = key;
        self.kind = kind;
        self
    }

    /// Sets the attempt number.
    #[must_use]
    pub fn with_attempt(mut self, attempt: u32) -> Self {
        self.attempt = attempt;
        self
    }
}

/// A fixer's answer.
///
/// # Examples
///
/// ```
/// use agent_errors::Fix;
///
/// let fix = Fix::result(serde_json::json!({"rows": []}))?; // answer in the tool's place
/// let shown = match &fix {
///     Fix::Args(raw) => format!("retry with {raw}"),
///     Fix::Result(value) => format!("use {value}"),
///     _ => unreachable!("the enum is non-exhaustive"),
/// };
/// assert_eq!(shown, r#"use {"rows":[]}"#);
/// # Ok::<(), agent_errors::FixerError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Fix {
    /// Repaired argument text: parsed again and the tool runs with it in the same call.
    Args(String),
    /// A value to use as the tool's result, as JSON.
    Result(serde_json::Value),
}

impl Fix {
    /// Repaired argument text.
    pub fn args(raw: impl Into<String>) -> Self {
        Fix::Args(raw.into())
    }

    /// Repaired arguments as a JSON value.
    pub fn args_value(value: &serde_json::Value) -> Self {
        Fix::Args(value.to_string())
    }

    /// A value to return as the tool's result.
    pub fn result(value: impl Serialize) -> Result<Self, FixerError> {
        serde_json::to_value(value)
            .map(Fix::Result)
            .map_err(|e| FixerError::Other(Box::new(e)))
    }
}

/// A fixer could not repair the call.
///
/// # Examples
///
/// A fixer picks the failure that fits; a test matches on it:
///
/// ```
/// use agent_errors::{FixerError, Severity};
///
/// fn refuse(raw: &str) -> FixerError {
///     if raw.contains("DROP TABLE") {
///         FixerError::throw("the model tried to drop a table") // ends the run
///     } else {
///         FixerError::escalate("send `query` as a string", Severity::Medium) // the model retries
///     }
/// }
/// let ends_run = match refuse("DROP TABLE users") {
///     FixerError::Throw(_) => true,
///     FixerError::Escalate { .. } | FixerError::Other(_) => false,
///     _ => false, // the enum is non-exhaustive
/// };
/// assert!(ends_run);
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FixerError {
    /// Soft: the reason goes back to the model as an error tool result.
    #[error("escalated ({severity}): {reason}")]
    Escalate {
        /// Why, in words the model can act on (a corrected call, say).
        reason: String,
        /// How serious.
        severity: Severity,
    },
    /// Hard: the run ends with this reason.
    #[error("thrown: {0}")]
    Throw(String),
    /// The fixer itself failed; uses up one of its `retries`.
    #[error(transparent)]
    Other(BoxError),
}

impl FixerError {
    /// A soft failure with this reason and severity.
    pub fn escalate(reason: impl Into<String>, severity: Severity) -> Self {
        FixerError::Escalate {
            reason: reason.into(),
            severity,
        }
    }

    /// A hard failure that ends the run.
    pub fn throw(reason: impl Into<String>) -> Self {
        FixerError::Throw(reason.into())
    }

    /// The fixer failed in an ordinary way.
    pub fn other(error: impl Into<BoxError>) -> Self {
        FixerError::Other(error.into())
    }
}

/// Something that repairs failed calls. Implemented for closures through [`FixerDef`]'s
/// constructors; implement it by hand for fixers with state.
///
/// # Examples
///
/// A fixer with state, implemented by hand:
///
/// ```
/// use std::collections::HashMap;
/// use agent_errors::call::BoxFuture;
/// use agent_errors::build::{Fixer, FixerDef};
/// use agent_errors::{Fix, FixRequest, FixerError};
///
/// /// Replaces city names the model misspells.
/// struct CityNames(HashMap<&'static str, &'static str>);
///
/// impl Fixer for CityNames {
///     fn fix(&self, request: FixRequest) -> BoxFuture<'_, Result<Fix, FixerError>> {
///         let mut raw = request.raw_args;
///         for (wrong, right) in &self.0 {
///             raw = raw.replace(wrong, right);
///         }
///         Box::pin(async move { Ok(Fix::args(raw)) })
///     }
/// }
///
/// let fixer = FixerDef::new("city_names", CityNames(HashMap::from([("Olso", "Oslo")])));
/// assert_eq!(fixer.name(), "city_names");
/// ```
pub trait Fixer: Send + Sync + 'static {
    /// Repairs one failure.
    fn fix(&self, request: FixRequest) -> BoxFuture<'_, Result<Fix, FixerError>>;
}

struct SyncFn<F>(F);

impl<F> Fixer for SyncFn<F>
where
    F: Fn(FixRequest) -> Result<Fix, FixerError> + Send + Sync + 'static,
{
    fn fix(&self, request: FixRequest) -> BoxFuture<'_, Result<Fix, FixerError>> {
        let out = (self.0)(request);
        Box::pin(std::future::ready(out))
    }
}

struct AsyncFn<F>(F);

impl<F, Fut> Fixer for AsyncFn<F>
where
    F: Fn(FixRequest) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Fix, FixerError>> + Send + 'static,
{
    fn fix(&self, request: FixRequest) -> BoxFuture<'_, Result<Fix, FixerError>> {
        Box::pin((self.0)(request))
    }
}

/// A fixer registered under a name: what `#[fixer]` and `fixers![...]` produce.
///
/// # Examples
///
/// What `#[fixer]` generates, written out: a name and a function, given to an agent.
///
/// ```
/// use agent_errors::{Agent, Fix};
/// use agent_errors::build::FixerDef;
/// use agent_errors::testing::ScriptedModel;
///
/// let unquote = FixerDef::from_fn("unquote", |req| Ok(Fix::args(req.raw_args.trim_matches('"'))));
/// let agent = Agent::builder("a").model(ScriptedModel::new()).fixer(unquote).build();
/// assert!(agent.is_ok());
/// ```
#[derive(Clone)]
pub struct FixerDef {
    name: Cow<'static, str>,
    fixer: Arc<dyn Fixer>,
}

impl FixerDef {
    /// A fixer from any [`Fixer`].
    pub fn new(name: impl Into<Cow<'static, str>>, fixer: impl Fixer) -> Self {
        FixerDef {
            name: name.into(),
            fixer: Arc::new(fixer),
        }
    }

    /// A fixer from a plain function.
    pub fn from_fn<F>(name: impl Into<Cow<'static, str>>, f: F) -> Self
    where
        F: Fn(FixRequest) -> Result<Fix, FixerError> + Send + Sync + 'static,
    {
        FixerDef::new(name, SyncFn(f))
    }

    /// A fixer from an async function.
    pub fn from_async_fn<F, Fut>(name: impl Into<Cow<'static, str>>, f: F) -> Self
    where
        F: Fn(FixRequest) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Fix, FixerError>> + Send + 'static,
    {
        FixerDef::new(name, AsyncFn(f))
    }

    /// The registered name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Asks the fixer.
    pub fn fix(&self, request: FixRequest) -> BoxFuture<'_, Result<Fix, FixerError>> {
        self.fixer.fix(request)
    }
}

impl fmt::Debug for FixerDef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FixerDef")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}
