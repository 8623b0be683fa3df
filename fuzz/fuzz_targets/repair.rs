//! The built-in argument repair on arbitrary text: it never panics, what it answers fits the
//! schema and is left alone when repaired again, and arguments that fit as sent are never
//! rewritten.
//!
//! Input: the argument text (invalid UTF-8 replaced).

#![no_main]

use std::sync::LazyLock;

use agent_errors::repair::{NotRepaired, repair_arguments};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

/// A tool's parameters, nested, with a parameter that holds an object.
static SCHEMA: LazyLock<Value> = LazyLock::new(|| {
    json!({
        "type": "object",
        "properties": {
            "query": {"type": "string"},
            "max_results": {"type": "integer"},
            "exact": {"type": ["boolean", "null"]},
            "filter": {
                "type": "object",
                "properties": {"min_stars": {"type": "integer"}},
                "required": ["min_stars"],
            },
        },
        "required": ["query"],
    })
});

fuzz_target!(|data: &[u8]| {
    let raw = String::from_utf8_lossy(data);
    let fits_as_sent = serde_json::from_str::<Value>(&raw).is_ok_and(|value| {
        value.is_object() && jsonschema::is_valid(&SCHEMA, &value)
    });
    match repair_arguments(&raw, &SCHEMA) {
        Ok(repaired) => {
            assert!(!fits_as_sent, "valid arguments were rewritten: {raw:?}");
            assert!(!repaired.changes().is_empty());
            let again: Value = serde_json::from_str(repaired.arguments()).expect("JSON");
            assert_eq!(&again, repaired.value());
            assert_eq!(
                repair_arguments(repaired.arguments(), &SCHEMA),
                Err(NotRepaired::AlreadyValid)
            );
        }
        Err(NotRepaired::AlreadyValid) => {}
        Err(refused) => {
            assert!(!fits_as_sent || matches!(refused, NotRepaired::DuplicateKey), "{raw:?}");
            let _ = refused.to_string();
        }
    }
});
