//! What the proxy did, one JSON line per attempt and per call on stderr: the stdio channel
//! the protocol uses is never written to.
//!
//! ```text
//! {"session":"proxy-…","call":"r3","tool":"search","event":"attempt_failed","attempt":1,"kind":"transient","retry_in_ms":500}
//! {"session":"proxy-…","call":"r3","tool":"search","event":"call","outcome":"ok","ms":812}
//! ```
//!
//! Every text in a line came through the library's sanitizer (event messages) or is a name
//! the proxy chose; JSON encoding escapes what is left, so a line can never be forged.

use std::io::Write as _;
use std::time::Duration;

use agent_errors::call::CallOutcome;
use agent_errors::{Event, ToolCall};
use serde_json::{Map, Value, json};

/// Where the lines go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AttemptLog {
    /// One line per attempt and per call, on stderr.
    Stderr,
    /// Nothing.
    Off,
}

impl AttemptLog {
    /// The lines for one finished call: each recovery event it caused, then its outcome.
    pub(crate) fn call(
        self,
        session: &str,
        call: &ToolCall,
        events: Vec<Event>,
        outcome: &CallOutcome,
        took: Duration,
    ) {
        if self == AttemptLog::Off {
            return;
        }
        let mut out = String::new();
        for event in &events {
            out.push_str(&line(session, call, event_fields(event)));
        }
        out.push_str(&line(session, call, outcome_fields(outcome, took)));
        // One write per call keeps one call's lines together; a closed stderr loses them.
        let _ = std::io::stderr().lock().write_all(out.as_bytes());
    }
}

fn line(session: &str, call: &ToolCall, fields: Map<String, Value>) -> String {
    let mut object = Map::new();
    object.insert("session".into(), session.into());
    object.insert("call".into(), call.id.to_string().into());
    object.insert("tool".into(), call.name.to_string().into());
    object.extend(fields);
    format!("{}\n", Value::Object(object))
}

fn fields(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

fn event_fields(event: &Event) -> Map<String, Value> {
    fields(match event {
        Event::ToolRetry {
            tool,
            attempt,
            kind,
            delay,
        } => json!({
            "event": "attempt_failed", "of": tool, "attempt": attempt, "kind": kind.as_str(),
            "retry_in_ms": delay.as_millis() as u64,
        }),
        Event::ToolFailed {
            tool,
            kind,
            message,
        } => json!({
            "event": "tool_failed", "of": tool, "kind": kind.as_str(), "message": message,
        }),
        Event::FellBack {
            tool,
            to,
            attempt,
            kind,
        } => json!({
            "event": "fell_back", "of": tool, "to": to, "attempt": attempt, "kind": kind.as_str(),
        }),
        Event::BreakerTripped { tool, failures } => json!({
            "event": "breaker_tripped", "of": tool, "failures": failures,
        }),
        Event::Degraded { tool } => json!({ "event": "tool_removed", "of": tool }),
        other => json!({ "event": other.name(), "of": other.tool() }),
    })
}

fn outcome_fields(outcome: &CallOutcome, took: Duration) -> Map<String, Value> {
    let ms = took.as_millis() as u64;
    fields(match outcome {
        CallOutcome::Result(result) if result.is_error => {
            json!({ "event": "call", "outcome": "error_shown", "ms": ms })
        }
        CallOutcome::Result(_) => json!({ "event": "call", "outcome": "ok", "ms": ms }),
        CallOutcome::Stop(stop) => json!({
            "event": "call", "outcome": "stopped", "kind": stop.kind.as_str(),
            "message": stop.user_message, "ms": ms,
        }),
    })
}
