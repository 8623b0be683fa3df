//! The json key counter again, watched from outside: the span tree of the run (after
//! OpenTelemetry's GenAI conventions) and the metrics it recorded.
//!
//! Runs offline on a `ScriptedModel`. A real service would install `tracing-opentelemetry` and a
//! `metrics` exporter instead of the two small printers here.
//!
//! ```text
//! cargo run -p agent-errors-examples --bin observe
//! ```

use std::fmt::Write as _;

use agent_errors::prelude::*;
use agent_errors::testing::ScriptedModel;
use agent_errors::{ChatRequest, ChatResponse, Message, ToolCall};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

#[derive(Debug, thiserror::Error)]
#[error("no quoted keys found: is this really JSON? ({0})")]
struct NotJson(#[from] serde_json::Error);

/// Counts the top-level keys of a JSON object.
#[tool(on_error(execution = fix(agent = "json_fixer")))]
async fn count_keys(json: String) -> Result<usize, NotJson> {
    let object = serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&json)?;
    Ok(object.len())
}

/// Quotes bare words, then escalates with the corrected JSON so the model calls again.
#[fixer]
fn json_fixer(req: FixRequest) -> Result<Fix, FixerError> {
    let json = req
        .args
        .as_ref()
        .and_then(|args| args["json"].as_str())
        .ok_or_else(|| FixerError::throw("the arguments have no `json` text to repair"))?;
    let inner = json.trim().trim_start_matches('{').trim_end_matches('}');
    let pairs: Vec<String> = inner
        .split(',')
        .filter_map(|pair| pair.split_once(':'))
        .map(|(key, value)| {
            let (key, value) = (key.trim(), value.trim());
            match value.parse::<f64>().is_ok() || matches!(value, "true" | "false") {
                true => format!("\"{key}\":{value}"),
                false => format!("\"{key}\":\"{value}\""),
            }
        })
        .collect();
    let corrected = format!("{{{}}}", pairs.join(","));
    Err(FixerError::escalate(
        format!("unquoted keys; corrected: {corrected}"),
        Severity::Medium,
    ))
}

/// The newest tool result the model was sent.
fn last_tool_result(request: &ChatRequest) -> Option<&agent_errors::ToolResult> {
    request.messages.iter().rev().find_map(|m| match m {
        Message::Tool(result) => Some(result),
        _ => None,
    })
}

fn scripted_model() -> ScriptedModel {
    let model = ScriptedModel::named("scripted-analyst");
    let args = serde_json::json!({ "json": "{name: world, age: 30, active: true}" });
    let first = ToolCall::new(model.next_call_id(), "count_keys", args.to_string());
    let second_id = model.next_call_id();
    model
        .computed(move |_| Ok(ChatResponse::tool_calls(vec![first])))
        .computed(move |request| {
            let error = last_tool_result(request).ok_or("no tool result to read")?;
            let surfaced: serde_json::Value = serde_json::from_str(&error.content)?;
            let message = surfaced["message"].as_str().ok_or("no message")?;
            let (_, corrected) = message.split_once("corrected: ").ok_or("no JSON")?;
            let args = serde_json::json!({ "json": corrected }).to_string();
            let call = ToolCall::new(second_id, "count_keys", args);
            Ok(ChatResponse::tool_calls(vec![call]))
        })
        .computed(|request| {
            let result = last_tool_result(request).ok_or("no tool result to read")?;
            Ok(ChatResponse::text(result.content.clone()))
        })
}

/// Prints each span as it opens, indented under its parent, and each recovery event in the span
/// it happened in; fields recorded later (an `error.type`) are printed as they arrive.
struct TreePrinter;

struct Fields(String);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() != "otel.name" && field.name() != "message" {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }
}

fn depth<S: Subscriber + for<'a> LookupSpan<'a>>(ctx: &Context<'_, S>, id: &Id) -> usize {
    ctx.span_scope(id).map_or(0, |scope| scope.count())
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for TreePrinter {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fields(String::new());
        attrs.record(&mut fields);
        let indent = "  ".repeat(depth(&ctx, id) - 1);
        println!("{indent}{}{}", attrs.metadata().name(), fields.0);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let mut fields = Fields(String::new());
        values.record(&mut fields);
        println!("{}  ={}", "  ".repeat(depth(&ctx, id) - 1), fields.0);
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = Fields(String::new());
        event.record(&mut fields);
        let depth = ctx
            .event_span(event)
            .map_or(0, |span| depth(&ctx, &span.id()));
        println!(
            "{}  * {}",
            "  ".repeat(depth.saturating_sub(1)),
            fields.0.trim()
        );
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(TreePrinter))?;
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install()?;

    let agent = Agent::builder("json-analyst")
        .model(scripted_model())
        .tools(tools![count_keys])
        .fixers(fixers![json_fixer])
        .build()?;
    println!("spans:");
    let answer = agent
        .run("How many keys? {name: world, age: 30, active: true}")
        .await?;
    assert_eq!(answer, "3");

    println!("\nmetrics:");
    let mut lines: Vec<String> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let labels: Vec<String> = key
                .key()
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            let value = match value {
                DebugValue::Counter(n) => n.to_string(),
                DebugValue::Gauge(g) => g.to_string(),
                DebugValue::Histogram(samples) => format!("{} sample(s)", samples.len()),
            };
            format!("  {}{{{}}} {value}", key.key().name(), labels.join(", "))
        })
        .collect();
    lines.sort();
    println!("{}", lines.join("\n"));
    Ok(())
}
