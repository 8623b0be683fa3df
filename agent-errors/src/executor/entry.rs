//! The executor's entry points on [`Registry`]: one call, or the calls of one model turn. They
//! are defined here, beside the pipeline they run, so the registry (the data) knows nothing of
//! the executor.

use super::{CallOutcome, RunContext};
use crate::chat::ToolCall;
use crate::registry::Registry;

impl Registry {
    /// Runs one tool call through its resolved policy. Whatever happens, the call gets exactly
    /// one outcome: a result for the model, or a stop of the run. Cancelling `ctx`'s
    /// [`Cancellation`](crate::Cancellation) answers "operation cancelled".
    pub async fn execute(&self, ctx: &RunContext, call: &ToolCall) -> CallOutcome {
        super::execute(self, ctx, call, super::CallStart::Fresh).await
    }

    /// [`execute`](Registry::execute) inside `span`, the `execute_tool` span another agent
    /// loop opened for the call, instead of a span of its own.
    #[cfg(feature = "rig")]
    pub(crate) async fn execute_in_span(
        &self,
        ctx: &RunContext,
        call: &ToolCall,
        span: tracing::Span,
    ) -> CallOutcome {
        super::execute_in_span(self, ctx, call, span).await
    }

    /// Runs the tool calls of one model turn concurrently and returns their outcomes in the
    /// order of `calls`. Parallel failures of one tool in a turn count once for the per-run
    /// breaker (three lookups that miss together are one stumble), and a call that stops the
    /// run makes the calls still running answer "operation cancelled".
    pub async fn execute_turn(&self, ctx: &RunContext, calls: &[ToolCall]) -> Vec<CallOutcome> {
        let answer = |call| self.execute(ctx, call);
        super::execute_turn(ctx, calls, answer, |o: &CallOutcome| o.stop().is_some()).await
    }
}
