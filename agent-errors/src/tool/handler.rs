//! How a tool runs from the model's argument text: the handler trait, the handler a typed
//! async function becomes, its output as the text the model sees, and the schema the model is
//! offered for its arguments.

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;

use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::arguments::parse_args;
use crate::error::BoxFuture;
use crate::error::{BoxError, ToolError};

/// A tool's successful output, as the text the model sees.
pub(crate) type ToolOutput = String;

/// The future a handler returns once its arguments parsed: the tool's output as the text the
/// model sees, or its error.
pub type ToolFuture = BoxFuture<'static, Result<String, BoxError>>;

/// Runs a tool from the model's raw argument text.
///
/// Parsing happens before the future exists, so bad arguments are told apart from a tool that ran
/// and failed. `call` must only parse and build the future: the tool's work belongs in the future,
/// which the executor may drop unpolled (an open circuit, a tripped breaker, a cancelled run).
///
/// # Examples
///
/// A tool whose schema is written by hand and whose arguments are read as plain JSON:
///
/// ```
/// use agent_errors::{ToolDef, ToolError};
/// use agent_errors::call::{ToolFuture, ToolHandler};
///
/// struct Upper;
///
/// impl ToolHandler for Upper {
///     fn call(&self, raw_args: &str) -> Result<ToolFuture, ToolError> {
///         let args: serde_json::Value =
///             serde_json::from_str(raw_args).map_err(|e| ToolError::invalid_args(raw_args, e))?;
///         let text = args["text"].as_str().unwrap_or_default().to_uppercase();
///         Ok(Box::pin(async move { Ok(text) })) // the work happens here, when polled
///     }
/// }
///
/// let schema = serde_json::json!({"type": "object", "properties": {"text": {"type": "string"}}});
/// let tool = ToolDef::from_handler("upper", "Upper-cases a text.", schema, Upper);
/// assert!(Upper.call("{not json").is_err());
/// assert_eq!(tool.name(), "upper");
/// ```
pub trait ToolHandler: Send + Sync + 'static {
    /// Parses `raw_args`; on success returns the running call.
    fn call(&self, raw_args: &str) -> Result<ToolFuture, ToolError>;

    /// Like [`call`](ToolHandler::call), with the values the run was given: what the executor
    /// calls. A handler that needs a [`Ctx`](crate::Ctx) reads it here; the default ignores them.
    fn call_with(
        &self,
        raw_args: &str,
        extensions: &crate::call::Extensions,
    ) -> Result<ToolFuture, ToolError> {
        let _ = extensions;
        self.call(raw_args)
    }
}

/// Serializes a tool's output for the model: strings as they are, anything else as JSON.
pub(crate) fn to_output<T: Serialize + ?Sized>(value: &T) -> Result<ToolOutput, BoxError> {
    let json = serde_json::to_string(value)?;
    if json.starts_with('"') {
        Ok(serde_json::from_str::<String>(&json)?)
    } else {
        Ok(json)
    }
}

/// A handler from a typed async function: `A` is read from the arguments.
pub(crate) struct FnHandler<A, F> {
    f: F,
    _args: PhantomData<fn(A)>,
}

impl<A, F> fmt::Debug for FnHandler<A, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FnHandler")
            .field("args", &std::any::type_name::<A>())
            .finish_non_exhaustive()
    }
}

impl<A, F> FnHandler<A, F> {
    /// Wraps `f`.
    pub(crate) fn new(f: F) -> Self {
        FnHandler {
            f,
            _args: PhantomData,
        }
    }
}

impl<A, F, Fut, T, E> ToolHandler for FnHandler<A, F>
where
    A: DeserializeOwned + 'static,
    F: Fn(A) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<T, E>> + Send + 'static,
    T: Serialize,
    E: Into<BoxError>,
{
    fn call(&self, raw_args: &str) -> Result<ToolFuture, ToolError> {
        let args = parse_args::<A>(raw_args)?;
        let fut = (self.f)(args);
        Ok(Box::pin(async move {
            match fut.await {
                Ok(value) => to_output(&value),
                Err(e) => Err(e.into()),
            }
        }))
    }
}

/// The JSON Schema of `A`, as offered to a model.
///
/// An object schema always has `properties`, even when empty: strict providers require it.
pub(crate) fn schema_of<A: JsonSchema>() -> serde_json::Value {
    let mut schema =
        serde_json::to_value(schemars::schema_for!(A)).unwrap_or(serde_json::Value::Null);
    if let Some(object) = schema.as_object_mut() {
        if object.get("type").and_then(|t| t.as_str()) == Some("object") {
            object
                .entry("properties")
                .or_insert_with(|| serde_json::Value::Object(Default::default()));
        }
    }
    schema
}
