//! The keys of the per-tool recovery counters (`agent_errors.tool.retries` and the rest), kept
//! per thread once made: counting a tool's retry then allocates and hashes nothing. A key names
//! the tool and one more label, so building it each time costs two allocations and the key's
//! hash, with or without a recorder installed (the `metrics` facade cannot say whether one is).
//!
//! The cache is small and bounded: tool names can be made up by a model (an unknown tool's
//! failures are counted under the name it was called by), so past [`MAX_KEPT`] keys the oldest
//! is replaced.

use std::cell::RefCell;

use metrics::{Key, Label, Level, Metadata, with_recorder};

use super::label::TOOL;

/// How many keys a thread keeps: more than the tools, kinds and labels one agent counts.
const MAX_KEPT: usize = 64;

/// The per-tool counters' metadata: the target `metrics::counter!` gave them when they were
/// counted from the trace module, kept so a recorder's filters see no change.
static TOOL_METADATA: Metadata<'static> = Metadata::new(
    "agent_errors::events::trace",
    Level::INFO,
    Some("agent_errors::events::trace"),
);

/// One kept key and what it was made of.
struct Kept {
    name: &'static str,
    tool: Box<str>,
    label: Option<(&'static str, Box<str>)>,
    key: Key,
}

impl Kept {
    fn is(&self, name: &str, tool: &str, label: Option<(&str, &str)>) -> bool {
        self.name == name
            && *self.tool == *tool
            && self.label.as_ref().map(|(k, v)| (*k, &**v)) == label
    }
}

struct Keys {
    kept: Vec<Kept>,
    /// The slot the next key replaces once `kept` is full.
    next: usize,
}

thread_local! {
    static KEYS: RefCell<Keys> = const {
        RefCell::new(Keys {
            kept: Vec::new(),
            next: 0,
        })
    };
}

fn make(name: &'static str, tool: &str, label: Option<(&'static str, &str)>) -> Key {
    let mut labels = vec![Label::new(TOOL, tool.to_owned())];
    labels.extend(label.map(|(key, value)| Label::new(key, value.to_owned())));
    Key::from_parts(name, labels)
}

fn increment(key: &Key) {
    with_recorder(|recorder| recorder.register_counter(key, &TOOL_METADATA).increment(1));
}

/// Adds one to the counter `name` of `tool`, with one more `label` when given.
pub(super) fn count(name: &'static str, tool: &str, label: Option<(&'static str, &str)>) {
    KEYS.with(|keys| {
        // A recorder that counts one of this library's events while it is handed a key (it
        // never should) finds the cache borrowed: the key is then made for that count alone.
        let Ok(mut keys) = keys.try_borrow_mut() else {
            return increment(&make(name, tool, label));
        };
        if let Some(kept) = keys.kept.iter().find(|k| k.is(name, tool, label)) {
            return increment(&kept.key);
        }
        let kept = Kept {
            name,
            tool: tool.into(),
            label: label.map(|(k, v)| (k, v.into())),
            key: make(name, tool, label),
        };
        increment(&kept.key);
        if keys.kept.len() < MAX_KEPT {
            keys.kept.push(kept);
        } else {
            let slot = keys.next;
            keys.kept[slot] = kept;
            keys.next = (slot + 1) % MAX_KEPT;
        }
    });
}
