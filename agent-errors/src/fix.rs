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
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct FixRequest {
    /// The tool whose call failed.
    pub tool: String,
    /// The arguments exactly as the model sent them (or as the last repair left them).
    pub raw_args: String,
    /// The arguments parsed as JSON, when they parse.
    pub args: Option<serde_json::Value>,
    /// The failure's message, sanitized.
    pub failure: String,
    /// The failure's kind.
    pub kind: ErrorKind,
    /// The policy key that sent the failure here.
    pub key: PolicyKey,
    /// Which try this is for this fixer and failure (1-based).
    pub attempt: u32,
    /// The values the run was given: `request.context.get::<T>()`.
    pub context: crate::call::Extensions,
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
