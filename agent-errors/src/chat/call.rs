//! One tool call the model asked for and the result that answers it: their id and name are
//! shared (`Arc<str>`), so the transcript, the result and a checkpoint hold one copy.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// A tool call the model asked for.
///
/// Its id and name are shared (`Arc<str>`): the result that answers it, the transcript and the
/// checkpoint hold the same text instead of a copy each.
///
/// # Examples
///
/// ```
/// use agent_errors::{ToolCall, ToolResult};
///
/// let call = ToolCall::new("call_1", "get_weather", r#"{"city": "Oslo"}"#);
/// let args: serde_json::Value = serde_json::from_str(&call.arguments)?; // untrusted text
/// assert_eq!(args["city"], "Oslo");
/// assert_eq!(&*ToolResult::ok(&call, "4°C").call_id, "call_1");
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The id the result must answer.
    #[serde(with = "shared_str")]
    pub id: Arc<str>,
    /// The tool's name, as the model spelled it.
    #[serde(with = "shared_str")]
    pub name: Arc<str>,
    /// The arguments as raw JSON text, untrusted.
    pub arguments: String,
}

impl ToolCall {
    /// A call.
    pub fn new(
        id: impl Into<Arc<str>>,
        name: impl Into<Arc<str>>,
        arguments: impl Into<String>,
    ) -> Self {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        }
    }
}

/// The answer to one tool call: its id and name are the call's own, shared, not copied.
///
/// # Examples
///
/// ```
/// use agent_errors::{Message, ToolCall, ToolResult};
///
/// let call = ToolCall::new("call_1", "get_weather", r#"{"city": "Atlantis"}"#);
/// let result = ToolResult::error(&call, "no such city: check the spelling");
/// assert!(result.is_error);
/// let reply = Message::Tool(result); // what goes back into the conversation
/// # let _ = reply;
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The id of the call it answers.
    #[serde(with = "shared_str")]
    pub call_id: Arc<str>,
    /// The tool's name.
    #[serde(with = "shared_str")]
    pub name: Arc<str>,
    /// The output, or the surfaced error.
    pub content: String,
    /// Whether this reports a failure.
    pub is_error: bool,
}

impl ToolResult {
    /// A successful result.
    pub fn ok(call: &ToolCall, content: impl Into<String>) -> Self {
        ToolResult {
            call_id: call.id.clone(),
            name: call.name.clone(),
            content: content.into(),
            is_error: false,
        }
    }

    /// An error result.
    pub fn error(call: &ToolCall, content: impl Into<String>) -> Self {
        ToolResult {
            call_id: call.id.clone(),
            name: call.name.clone(),
            content: content.into(),
            is_error: true,
        }
    }
}

/// A shared string as JSON: a plain string either way (serde's own `Arc` support is behind a
/// feature this crate does not ask for).
mod shared_str {
    use std::sync::Arc;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(text: &Arc<str>, to: S) -> Result<S::Ok, S::Error> {
        to.serialize_str(text)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(from: D) -> Result<Arc<str>, D::Error> {
        String::deserialize(from).map(Arc::from)
    }
}
