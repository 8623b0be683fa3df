//! The spans of a run, named and attributed after OpenTelemetry's GenAI semantic conventions:
//! `invoke_agent` for the run, `chat` for a model turn, `execute_tool` for a tool call.
//!
//! `otel.name`, `otel.kind` and `otel.status_code` are the fields `tracing-opentelemetry` reads
//! for the exported span's name, kind and status. Every value is `Display`ed lazily: with no
//! subscriber interested the spans are disabled and nothing is formatted or allocated.

use std::fmt;

use tracing::Span;
use tracing::field::Empty;

use crate::chat::{ChatResponse, ToolCall};
use crate::escapes::Visible;
use crate::model::ChatModel;
use crate::sanitize::MAX_TOOL_NAME_CHARS;
use crate::usage::Usage;

/// `"{operation} {target}"`, formatted only when a subscriber records it.
struct Named<'a>(&'static str, &'a str);

impl fmt::Display for Named<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.0, Bounded(self.1))
    }
}

/// Model-written text (a tool name, a call id) cut to a bound and with its controls and
/// invisible characters escaped, so a model can neither blow up a span nor forge log lines.
struct Bounded<'a>(&'a str);

impl fmt::Display for Bounded<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Visible(self.0, MAX_TOOL_NAME_CHARS).fmt(f)
    }
}

/// The span of one run: `run_id` is its `gen_ai.conversation.id` (the one id that joins the
/// request that started it, the run waiting, and the run resumed, in any process), and
/// `agent_errors.run.resumed` says whether this is a resumption of a saved run.
pub(crate) fn invoke_agent(
    agent: &str,
    model: &dyn ChatModel,
    (run_id, resumed): (&str, bool),
) -> Span {
    let span = tracing::info_span!(
        "invoke_agent",
        otel.name = %Named("invoke_agent", agent),
        otel.kind = "internal",
        otel.status_code = Empty,
        gen_ai.operation.name = "invoke_agent",
        gen_ai.agent.name = %agent,
        gen_ai.conversation.id = %Bounded(run_id),
        agent_errors.run.resumed = resumed,
        gen_ai.provider.name = Empty,
        gen_ai.request.model = %Bounded(model.name()),
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        agent_errors.usage.requests = Empty,
        agent_errors.usage.tool_calls = Empty,
        "error.type" = Empty,
    );
    record_provider(&span, model);
    span
}

/// What a run used, summed over its model turns, on its `invoke_agent` span.
pub(crate) fn record_run_usage(span: &Span, (requests, tokens, tool_calls): (u32, Usage, u32)) {
    span.record("gen_ai.usage.input_tokens", tokens.input_tokens);
    span.record("gen_ai.usage.output_tokens", tokens.output_tokens);
    span.record("agent_errors.usage.requests", requests);
    span.record("agent_errors.usage.tool_calls", tool_calls);
}

/// The span of one model turn, `on_llm_error`'s retries included (the conventions' "logical
/// operation"); a wrapper's own retries and fallbacks happen inside it too. It carries its
/// run's id, as every span of a run does.
pub(crate) fn chat(model: &dyn ChatModel, run_id: &str) -> Span {
    let span = tracing::info_span!(
        "chat",
        otel.name = %Named("chat", model.name()),
        otel.kind = "client",
        otel.status_code = Empty,
        gen_ai.operation.name = "chat",
        gen_ai.conversation.id = %Bounded(run_id),
        gen_ai.provider.name = Empty,
        gen_ai.request.model = %Bounded(model.name()),
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        gen_ai.response.finish_reasons = Empty,
        gen_ai.response.model = Empty,
        "error.type" = Empty,
    );
    record_provider(&span, model);
    span
}

/// The span of one tool call: the first attempt, retries, fixes and fallbacks, under its run's
/// id when the run has one.
pub(crate) fn execute_tool(call: &ToolCall, run_id: Option<&str>) -> Span {
    tracing::info_span!(
        "execute_tool",
        otel.name = %Named("execute_tool", &call.name),
        otel.kind = "internal",
        otel.status_code = Empty,
        gen_ai.operation.name = "execute_tool",
        gen_ai.conversation.id = run_id.map(Bounded).map(tracing::field::display),
        gen_ai.tool.name = %Bounded(&call.name),
        gen_ai.tool.call.id = %Bounded(&call.id),
        gen_ai.tool.type = "function",
        "error.type" = Empty,
    )
}

fn record_provider(span: &Span, model: &dyn ChatModel) {
    if let Some(provider) = model.provider_name() {
        span.record("gen_ai.provider.name", provider);
    }
}

/// Marks `span` (or, with `None`, the current span) as failed with this `error.type`. A span
/// without the field, such as a user's own, ignores it.
pub(crate) fn record_error(span: Option<&Span>, kind: &str) {
    match span {
        Some(span) => crate::events::mark_failed(span, kind),
        None => crate::events::mark_failed(&Span::current(), kind),
    }
}

/// What a response says about itself, on its `chat` span and in the token metrics.
///
/// THE one place to record a response's usage and finish reason: once [`ChatResponse`] carries
/// them, call [`record_usage`] and [`record_finish_reasons`] from here.
pub(crate) fn record_response(span: &Span, model: &dyn ChatModel, response: &ChatResponse) {
    if let Some(usage) = response.usage {
        record_usage(span, model, usage.input_tokens, usage.output_tokens);
    }
    if let Some(reason) = &response.finish_reason {
        record_finish_reasons(span, &[finish_reason_name(reason)]);
    }
    // Which model answered: behind a fallback, not always the one requested.
    if let Some(answered) = &response.model {
        span.record(
            "gen_ai.response.model",
            tracing::field::display(Bounded(answered)),
        );
    }
}

/// The convention's name for a finish reason.
fn finish_reason_name(reason: &crate::chat::FinishReason) -> &str {
    use crate::chat::FinishReason;
    match reason {
        FinishReason::Stop => "stop",
        FinishReason::Length => "length",
        FinishReason::ToolCalls => "tool_calls",
        FinishReason::ContentFilter => "content_filter",
        FinishReason::Refusal => "refusal",
        FinishReason::Other(other) => other,
    }
}

/// Token usage on the `chat` span and in `gen_ai.client.token.usage`.
pub(crate) fn record_usage(span: &Span, model: &dyn ChatModel, input: u64, output: u64) {
    span.record("gen_ai.usage.input_tokens", input);
    span.record("gen_ai.usage.output_tokens", output);
    super::metrics::tokens(model.name(), input, output);
}

/// Why the model stopped (`stop`, `tool_calls`, `length`, ...), on the `chat` span.
pub(crate) fn record_finish_reasons(span: &Span, reasons: &[&str]) {
    span.record(
        "gen_ai.response.finish_reasons",
        tracing::field::debug(reasons),
    );
}
