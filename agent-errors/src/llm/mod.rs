//! When a model call fails: what to do about it ([`LlmErrorDecision`]), and model wrappers that
//! retry, fall back and persist around any [`ChatModel`].

use std::time::Duration;

// The model wrappers below speak the chat types; they live in `chat` and `model`.
pub(crate) use crate::chat::{ChatRequest, ChatResponse};

// What a model call carries besides its messages, and what comes back besides the answer.
pub use crate::chat::{
    CallSource, FinishReason, RequestOptions, ResponseFormat, ToolChoice, ToolSpec, Truncated,
};
pub(crate) use crate::model::ChatModel;
pub use crate::usage::Usage;

pub(crate) mod circuit;
pub(crate) mod decision;
mod fallback;
mod persistent;
#[cfg(feature = "_provider")]
pub(crate) mod retryability;
pub(crate) mod trigger;

// `LlmErrorDecision` is named at the crate root.
pub(crate) use decision::LlmErrorDecision;
pub use fallback::FallbackModel;
pub use persistent::{Heartbeat, PersistentRetry};
pub use trigger::FallbackOn;

/// The longest `Retry-After` a model-call retry waits before calling again; longer requests are
/// cut to this. (`PersistentRetry` waits as long as asked, bounded by its own time cap.)
pub(crate) const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// Whether the classification says a failed model call cannot succeed on retry: a conclusive
/// kind that is not retryable, or a server that said not to. `Unknown` is not conclusive.
pub(crate) fn cannot_succeed_on_retry(error: &(dyn std::error::Error + 'static)) -> bool {
    let class = crate::classify::classify(error);
    class.kind != crate::ErrorKind::Unknown && !class.is_retryable()
}
