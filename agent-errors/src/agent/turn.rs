//! What one model turn's answer means before the loop acts on it: a cut-off answer is a failed
//! call, a refusal ends the run, and every answer's usage counts.

use super::RunError;
use crate::chat::{ChatResponse, FinishReason, Truncated};
use crate::error::BoxError;
use crate::usage::Usage;

/// Counts the answer's usage, and turns an answer cut off at its token budget into the call's
/// error, so `on_llm_error` decides about it and it is never taken for a finished answer.
pub(super) fn judge(response: ChatResponse, usage: &mut Usage) -> Result<ChatResponse, BoxError> {
    if let Some(used) = response.usage {
        *usage += used;
    }
    if response.finish_reason == Some(FinishReason::Length) {
        return Err(Box::new(Truncated { partial: response }));
    }
    Ok(response)
}

/// The run's end when the model declined to answer or the provider withheld the answer.
pub(super) fn refusal(response: &ChatResponse) -> Option<RunError> {
    match &response.finish_reason {
        Some(reason @ (FinishReason::Refusal | FinishReason::ContentFilter)) => {
            Some(RunError::Refused {
                text: crate::redact::redact(response.text.as_deref().unwrap_or_default())
                    .into_owned(),
                reason: reason.clone(),
            })
        }
        _ => None,
    }
}
