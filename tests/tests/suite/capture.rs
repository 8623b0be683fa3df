//! What the observability tests share: a `tracing` layer that captures spans and the events
//! inside them, a lock that runs those tests one at a time, and a metrics snapshot by key.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use tracing::span::{Attributes, Id, Record};
use tracing::{Subscriber, field};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

/// A span as the capturing layer saw it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Captured {
    pub(crate) name: String,
    pub(crate) parent: Option<usize>,
    pub(crate) fields: BTreeMap<String, String>,
    /// The `event` field of each tracing event emitted inside the span.
    pub(crate) events: Vec<String>,
    /// Every field of each tracing event emitted inside the span, in order.
    pub(crate) event_fields: Vec<BTreeMap<String, String>>,
}

/// Records every span (name, fields, parent) and the events emitted inside each.
#[derive(Clone, Default)]
pub(crate) struct Capture(Arc<Mutex<Vec<Captured>>>);

/// The index of a span in the capture, kept in its extensions.
struct Index(usize);

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl field::Visit for Fields<'_> {
    fn record_str(&mut self, field: &field::Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }

    fn record_u64(&mut self, field: &field::Field, value: u64) {
        self.0.insert(field.name().to_owned(), value.to_string());
    }

    fn record_debug(&mut self, field: &field::Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let parent = span
            .parent()
            .and_then(|p| p.extensions().get::<Index>().map(|i| i.0));
        let mut captured = Captured {
            name: span.name().to_owned(),
            parent,
            ..Captured::default()
        };
        attrs.record(&mut Fields(&mut captured.fields));
        let mut spans = self.0.lock().unwrap();
        span.extensions_mut().insert(Index(spans.len()));
        spans.push(captured);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let Some(&Index(i)) = span.extensions().get::<Index>() else {
            return;
        };
        values.record(&mut Fields(&mut self.0.lock().unwrap()[i].fields));
    }

    fn on_event(&self, event: &tracing::Event<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.event_span(event) else {
            return;
        };
        let Some(&Index(i)) = span.extensions().get::<Index>() else {
            return;
        };
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        let mut spans = self.0.lock().unwrap();
        if let Some(name) = fields.get("event") {
            spans[i].events.push(name.clone());
        }
        spans[i].event_fields.push(fields);
    }
}

impl Capture {
    pub(crate) fn spans(&self) -> Vec<Captured> {
        self.0.lock().unwrap().clone()
    }
}

/// The tests of this file run one at a time: tracing caches each callsite's interest
/// process-wide, and a test without a subscriber racing one with a capturing subscriber can leave
/// a span callsite marked "never" while the capture is installed.
pub(crate) async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    LOCK.lock().await
}

/// The value of each metric, keyed by its name and labels.
pub(crate) fn metrics_of(recorder: &DebuggingRecorder) -> BTreeMap<String, DebugValue> {
    recorder
        .snapshotter()
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let key = key.key();
            let mut labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            labels.sort();
            (format!("{}{{{}}}", key.name(), labels.join(",")), value)
        })
        .collect()
}
