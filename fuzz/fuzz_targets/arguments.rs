//! Tool arguments on arbitrary text: reading them never panics and every failure is one the
//! `invalid_args` policy answers, keeping the text; the check for keys given twice agrees with
//! an independent reading that keeps every key.
//!
//! Input: the argument text (invalid UTF-8 replaced).

#![no_main]

use std::collections::HashSet;
use std::fmt;

use agent_errors::fuzz::{parse_args, reject_duplicate_keys};
use libfuzzer_sys::fuzz_target;
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// A JSON value that keeps every key of an object, repeated or not.
enum Tree {
    Leaf,
    List(Vec<Tree>),
    Object(Vec<(String, Tree)>),
}

impl Tree {
    fn has_duplicate(&self) -> bool {
        match self {
            Tree::Leaf => false,
            Tree::List(items) => items.iter().any(Tree::has_duplicate),
            Tree::Object(entries) => {
                let mut seen = HashSet::new();
                entries.iter().any(|(key, _)| !seen.insert(key))
                    || entries.iter().any(|(_, value)| value.has_duplicate())
            }
        }
    }
}

impl<'de> Deserialize<'de> for Tree {
    fn deserialize<D: Deserializer<'de>>(reader: D) -> Result<Self, D::Error> {
        reader.deserialize_any(TreeVisitor)
    }
}

struct TreeVisitor;

impl<'de> Visitor<'de> for TreeVisitor {
    type Value = Tree;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JSON")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Tree, E> {
        Ok(Tree::Leaf)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Tree, E> {
        Ok(Tree::Leaf)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Tree, E> {
        Ok(Tree::Leaf)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Tree, E> {
        Ok(Tree::Leaf)
    }

    fn visit_str<E>(self, _: &str) -> Result<Tree, E> {
        Ok(Tree::Leaf)
    }

    fn visit_unit<E>(self) -> Result<Tree, E> {
        Ok(Tree::Leaf)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<Tree, A::Error> {
        let mut list = Vec::new();
        while let Some(item) = items.next_element()? {
            list.push(item);
        }
        Ok(Tree::List(list))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut entries: A) -> Result<Tree, A::Error> {
        let mut object = Vec::new();
        while let Some(entry) = entries.next_entry()? {
            object.push(entry);
        }
        Ok(Tree::Object(object))
    }
}

/// A typed tool's parameters, nested.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct Params {
    count: u32,
    items: Option<Vec<Item>>,
    note: Option<String>,
}

#[derive(serde::Deserialize)]
#[allow(dead_code)]
struct Item {
    id: u64,
    tags: Option<Vec<String>>,
}

fuzz_target!(|data: &[u8]| {
    let raw = String::from_utf8_lossy(data);

    let checked = reject_duplicate_keys(&raw);
    if let Err(error) = &checked {
        assert!(error.is_invalid_args());
        assert!(error.to_string().contains("duplicate key"), "{error}");
    }
    match serde_json::from_str::<Tree>(&raw) {
        Ok(tree) => assert_eq!(
            checked.is_err(),
            tree.has_duplicate(),
            "the check and the full reading disagree on {raw:?}"
        ),
        // Not JSON (or nested past the limit): a duplicate may still come before the fault.
        Err(_) => {}
    }

    for error in [
        parse_args::<serde_json::Value>(&raw).err(),
        parse_args::<Params>(&raw).err(),
    ]
    .into_iter()
    .flatten()
    {
        assert!(error.is_invalid_args(), "{error}");
        assert!(error.raw_args() == Some(raw.as_ref()));
        let _ = error.to_string();
    }
});
