//! A tool call's argument text: read into the tool's parameter type, naming the parameter a
//! value did not fit (`count`, `items[2].id`), and checked for keys given twice.
//!
//! `{"amount": 1, "amount": 1000}` reads as 1000 to serde_json's `Value` (the last key wins),
//! while a reader that keeps the first would see 1: a permission hook and the tool must never
//! disagree on what was asked, so the executor refuses such arguments before either sees them
//! (a tool whose own argument struct refuses them is left to say so when it parses).

use std::borrow::Cow;
use std::cell::Cell;
use std::collections::HashSet;
use std::fmt;

use serde::de::{self, DeserializeOwned, DeserializeSeed, MapAccess, SeqAccess, Visitor};

use crate::error::ToolError;

/// What [`ToolError::Deserialization`] names as the target of arguments checked before any
/// tool's own type reads them.
const ANY_TOOL: &str = "the tool's arguments";

/// Parses argument text into `A`, telling invalid JSON apart from JSON of the wrong shape, and
/// naming where in the arguments a value did not fit (or the key given twice).
///
/// Empty or blank text reads as `{}`: models often send that for tools without parameters.
///
/// Arguments that fit are read once, by plain serde_json. Only text that does not fit is read
/// again, to say why as precisely as possible: a key given twice first, then the path of the
/// value that did not fit.
pub(crate) fn parse_args<A: DeserializeOwned>(raw: &str) -> Result<A, ToolError> {
    // Text that opens an object at once (as models write them) needs no trimming, which would
    // decode and test each leading character.
    let body = if raw.starts_with('{') {
        raw
    } else {
        raw.trim_start()
    };
    // No arguments at all (empty, or only whitespace) are an empty object.
    let text = if body.is_empty() { "{}" } else { raw };
    // Arguments are an object. serde would also fill a struct from an array, by position,
    // which the schema offered to the model does not allow.
    if body.is_empty() || body.starts_with('{') {
        if let Ok(args) = serde_json::from_str(text) {
            return Ok(args);
        }
        reject_duplicate_keys(raw)?;
    }
    explain_parse_failure(raw, text)
}

/// Reads `text` again with path tracking, to report where it does not fit `A` (or `A`, when it
/// does fit after all).
#[cold]
fn explain_parse_failure<A: DeserializeOwned>(raw: &str, text: &str) -> Result<A, ToolError> {
    let failed = |error: serde_json::Error, path: String| {
        if error.is_data() {
            ToolError::Deserialization {
                raw: raw.to_owned(),
                target: std::any::type_name::<A>(),
                path,
                error,
            }
        } else {
            ToolError::InvalidArgs {
                raw: raw.to_owned(),
                error,
            }
        }
    };
    if !text.trim_start().starts_with('{') {
        if let Err(error) = serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(text)
        {
            return Err(failed(error, String::new()));
        }
    }
    let mut reader = serde_json::Deserializer::from_str(text);
    let args = serde_path_to_error::deserialize(&mut reader).map_err(|error| {
        let path = error.path().to_string();
        // The path of the object itself (a missing or unknown field) is written ".".
        let path = if path == "." { String::new() } else { path };
        failed(error.into_inner(), path)
    })?;
    reader.end().map_err(|error| failed(error, String::new()))?;
    Ok(args)
}

/// Refuses argument text in which some object gives a key twice, at any depth, naming the key
/// and the object it is in.
///
/// Text that stops being JSON before any key repeats passes: the tool's own parser reports it
/// in its words. The check takes time linear in the text, and nesting deeper than serde_json's
/// limit (128) ends it the same way, so hostile input cannot overflow the stack.
pub(crate) fn reject_duplicate_keys(raw: &str) -> Result<(), ToolError> {
    let mut reader = serde_json::Deserializer::from_str(raw);
    let duplicate = Cell::new(None);
    let walk = UniqueKeys {
        parent: None,
        duplicate: &duplicate,
    };
    match (walk.deserialize(&mut reader), duplicate.take()) {
        (Err(error), Some(path)) => Err(ToolError::Deserialization {
            raw: raw.to_owned(),
            target: ANY_TOOL,
            path,
            error,
        }),
        _ => Ok(()),
    }
}

/// Where a value sits, as a chain up to the top-level object; written out only when a
/// duplicate is found, so the walk itself allocates nothing for paths.
#[derive(Clone, Copy)]
enum Segment<'a> {
    Key(&'a str),
    Index(usize),
}

#[derive(Clone, Copy)]
struct Parent<'a> {
    segment: Segment<'a>,
    up: Option<&'a Parent<'a>>,
}

/// `items[2].id`: the path of the chain ending at `at`, as serde_path_to_error writes one.
fn path_of(at: Option<&Parent<'_>>) -> String {
    let mut segments = Vec::new();
    let mut next = at;
    while let Some(parent) = next {
        segments.push(parent.segment);
        next = parent.up;
    }
    let mut path = String::new();
    for segment in segments.into_iter().rev() {
        match segment {
            Segment::Key(key) => {
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
            }
            Segment::Index(index) => {
                use std::fmt::Write;
                let _ = write!(path, "[{index}]");
            }
        }
    }
    path
}

/// Walks one JSON value, checking every object in it. serde_json's error can carry only text,
/// so the path of the object holding a duplicate is left in `duplicate`.
#[derive(Clone, Copy)]
struct UniqueKeys<'p> {
    parent: Option<&'p Parent<'p>>,
    duplicate: &'p Cell<Option<String>>,
}

impl<'p> UniqueKeys<'p> {
    fn below<'q>(self, here: &'q Parent<'q>) -> UniqueKeys<'q>
    where
        'p: 'q,
    {
        UniqueKeys {
            parent: Some(here),
            duplicate: self.duplicate,
        }
    }
}

impl<'de> DeserializeSeed<'de> for UniqueKeys<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, reader: D) -> Result<(), D::Error> {
        reader.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for UniqueKeys<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<(), A::Error> {
        for index in 0.. {
            let here = Parent {
                segment: Segment::Index(index),
                up: self.parent,
            };
            if items.next_element_seed(self.below(&here))?.is_none() {
                break;
            }
        }
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut entries: A) -> Result<(), A::Error> {
        let mut seen = KeySet::default();
        while let Some(Key(key)) = entries.next_key()? {
            if !seen.insert(key.clone()) {
                self.duplicate.set(Some(path_of(self.parent)));
                // serde_json adds the line and column on the way out.
                return Err(de::Error::custom(format_args!("duplicate key `{key}`")));
            }
            let here = Parent {
                segment: Segment::Key(&key),
                up: self.parent,
            };
            entries.next_value_seed(self.below(&here))?;
        }
        Ok(())
    }
}

/// Keys seen in one object: the common few in place (no allocation), a hash set past that, so
/// each key costs the same whatever the object's size.
enum KeySet<'de> {
    Few {
        keys: [Cow<'de, str>; KeySet::FEW],
        len: usize,
    },
    Many(HashSet<Cow<'de, str>>),
}

impl Default for KeySet<'_> {
    fn default() -> Self {
        KeySet::Few {
            keys: std::array::from_fn(|_| Cow::Borrowed("")),
            len: 0,
        }
    }
}

impl<'de> KeySet<'de> {
    const FEW: usize = 8;

    /// False when `key` was there already.
    fn insert(&mut self, key: Cow<'de, str>) -> bool {
        match self {
            KeySet::Few { keys, len } if keys[..*len].contains(&key) => false,
            KeySet::Few { keys, len } if *len < Self::FEW => {
                keys[*len] = key;
                *len += 1;
                true
            }
            KeySet::Few { keys, .. } => {
                let mut many: HashSet<_> = keys.iter_mut().map(std::mem::take).collect();
                many.insert(key);
                *self = KeySet::Many(many);
                true
            }
            KeySet::Many(keys) => keys.insert(key),
        }
    }
}

/// An object key, borrowed from the text when it has no escapes.
struct Key<'de>(Cow<'de, str>);

impl<'de> de::Deserialize<'de> for Key<'de> {
    fn deserialize<D: de::Deserializer<'de>>(reader: D) -> Result<Self, D::Error> {
        reader.deserialize_str(KeyVisitor)
    }
}

struct KeyVisitor;

impl<'de> Visitor<'de> for KeyVisitor {
    type Value = Key<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_borrowed_str<E>(self, key: &'de str) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Borrowed(key)))
    }

    fn visit_str<E>(self, key: &str) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Owned(key.to_owned())))
    }

    fn visit_string<E>(self, key: String) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Owned(key)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Order {
        count: u32,
        items: Vec<Item>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Item {
        id: u64,
    }

    fn parse_error(raw: &str) -> ToolError {
        parse_args::<Order>(raw).expect_err("arguments that do not fit")
    }

    fn path(error: &ToolError) -> &str {
        match error {
            ToolError::Deserialization { path, .. } => path,
            other => panic!("expected Deserialization, got {other:?}"),
        }
    }

    #[test]
    fn a_value_of_the_wrong_type_names_its_parameter() {
        let error = parse_error(r#"{"count": "abc", "items": []}"#);
        assert_eq!(path(&error), "count");
        assert_eq!(
            error.to_string(),
            "arguments do not fit the tool's parameters: `count`: invalid type: string \"abc\", \
             expected u32 at line 1 column 15"
        );
    }

    #[test]
    fn a_nested_value_names_its_path() {
        let error = parse_error(r#"{"count": 1, "items": [{"id": 1}, {"id": 2}, {"id": "x"}]}"#);
        assert_eq!(path(&error), "items[2].id");
        assert!(
            error.to_string().contains("`items[2].id`: invalid type"),
            "{error}"
        );
    }

    #[test]
    fn a_missing_or_unknown_field_names_no_path() {
        let missing = parse_error(r#"{"items": []}"#);
        assert_eq!(path(&missing), "");
        assert!(
            missing.to_string().contains("missing field `count`"),
            "{missing}"
        );
        let unknown = parse_error(r#"{"count": 1, "items": [], "cuont": 2}"#);
        assert!(
            unknown.to_string().contains("unknown field `cuont`"),
            "{unknown}"
        );
    }

    #[test]
    fn text_that_is_not_json_is_told_apart_from_the_wrong_shape() {
        assert!(matches!(
            parse_error(r#"{"count": 1,"#),
            ToolError::InvalidArgs { .. }
        ));
        assert!(matches!(
            parse_error(r#"{"count": 1, "items": []} trailing"#),
            ToolError::InvalidArgs { .. }
        ));
        assert!(matches!(
            parse_error("[1, []]"),
            ToolError::Deserialization { .. }
        ));
        assert!(parse_args::<Order>(r#" {"count": 1, "items": [{"id": 7}]} "#).is_ok());
    }

    #[test]
    fn no_arguments_are_an_empty_object_and_only_an_object_is_read() {
        #[derive(Debug, serde::Deserialize, PartialEq)]
        struct Optional {
            limit: Option<u32>,
        }
        for none in ["", "  ", "\n\t", "\u{a0}"] {
            assert_eq!(
                parse_args::<Optional>(none).ok(),
                Some(Optional { limit: None })
            );
        }
        assert_eq!(
            parse_args::<Optional>(" \n {\"limit\": 3}").ok(),
            Some(Optional { limit: Some(3) })
        );
        assert!(parse_args::<Optional>(" [3]").is_err());
        assert!(parse_args::<Optional>("null").is_err());
    }

    fn duplicate(raw: &str) -> (String, String) {
        match reject_duplicate_keys(raw) {
            Err(ToolError::Deserialization {
                path,
                error,
                target,
                ..
            }) => {
                assert_eq!(target, ANY_TOOL);
                (path, error.to_string())
            }
            other => panic!("expected a duplicate in {raw}, got {other:?}"),
        }
    }

    #[test]
    fn a_key_given_twice_is_refused_at_any_depth() {
        let (path, message) = duplicate(r#"{"amount": 1, "amount": 1000}"#);
        assert_eq!(path, "");
        assert!(
            message.starts_with("duplicate key `amount` at line 1"),
            "{message}"
        );

        let (path, message) =
            duplicate(r#"{"items": [{"id": 1}, {"id": 2, "tag": {"a": 1, "a": 2}}]}"#);
        assert_eq!(path, "items[1].tag");
        assert!(message.starts_with("duplicate key `a`"), "{message}");

        let error = reject_duplicate_keys(r#"{"x": {"k": 1, "k": 2}}"#).unwrap_err();
        assert!(error.is_invalid_args());
        assert!(
            error.to_string().contains("`x`: duplicate key `k`"),
            "{error}"
        );
    }

    #[test]
    fn keys_are_compared_as_decoded() {
        let (_, message) = duplicate(r#"{"role": "user", "r\u006fle": "admin"}"#);
        assert!(message.starts_with("duplicate key `role`"), "{message}");
    }

    #[test]
    fn the_same_key_in_different_objects_is_fine() {
        for raw in [
            r#"{"a": {"a": {"a": 1}}, "b": [{"a": 1}, {"a": 2}]}"#,
            r#"{"a": "a", "b": ["a", "a"]}"#,
            "{}",
            "",
            "[1, 1]",
            "\"just a string\"",
        ] {
            assert!(reject_duplicate_keys(raw).is_ok(), "{raw}");
        }
    }

    #[test]
    fn text_that_is_not_json_is_left_to_the_tool_parser() {
        for raw in [
            "{name: world}",
            r#"{"a": 1,}"#,
            r#"{"a": 1} {"a": 1, "a": 2}"#,
            "\u{0}",
        ] {
            assert!(reject_duplicate_keys(raw).is_ok(), "{raw}");
        }
    }

    #[test]
    fn many_keys_are_checked_by_set_past_the_first_few() {
        let keys: Vec<String> = (0..5000).map(|i| format!("\"k{i}\": {i}")).collect();
        let distinct = format!("{{{}}}", keys.join(", "));
        assert!(reject_duplicate_keys(&distinct).is_ok());
        let repeated = format!("{{{}, \"k4321\": 0}}", keys.join(", "));
        assert!(duplicate(&repeated).1.starts_with("duplicate key `k4321`"));
        // The duplicate among the first few, before the switch to a set, and on either side
        // of the switch.
        assert!(
            duplicate(r#"{"a":1,"b":2,"a":3}"#)
                .1
                .starts_with("duplicate key `a`")
        );
        for count in [KeySet::FEW, KeySet::FEW + 1, KeySet::FEW + 2] {
            let object = format!("{{{}, \"k0\": 0}}", keys[..count].join(", "));
            assert!(
                duplicate(&object).1.starts_with("duplicate key `k0`"),
                "{count}"
            );
        }
    }

    /// Nesting far past serde_json's limit ends the walk with that limit's error instead of
    /// overflowing the stack, on a thread with a small stack.
    #[test]
    fn deep_nesting_stops_at_the_parser_limit() {
        let deep_arrays = "[".repeat(1_000_000);
        let deep_objects = r#"{"a":"#.repeat(100_000);
        let at_limit = format!("{}1{}", "[".repeat(127), "]".repeat(127));
        let walked = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(move || {
                [deep_arrays, deep_objects, at_limit]
                    .iter()
                    .map(|raw| reject_duplicate_keys(raw).is_ok())
                    .collect::<Vec<_>>()
            })
            .expect("a thread")
            .join()
            .expect("no stack overflow");
        assert_eq!(walked, [true, true, true]);
        let nested_duplicate = format!(
            r#"{}{{"k": 1, "k": 2}}{}"#,
            "[".repeat(100),
            "]".repeat(100)
        );
        let (path, _) = duplicate(&nested_duplicate);
        assert_eq!(path, format!("{}", "[0]".repeat(100)));
    }
}
