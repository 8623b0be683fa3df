//! The repairs the schema directs: a key given the parameter's name it matched but for case,
//! `_` or `-`, a string holding JSON read as the object or array the schema asks for, and a
//! quoted number or boolean (`"42"`, `"true"`) read as the number or boolean the schema asks
//! for where it allows no string.
//!
//! The walk follows the value and the schema together, visiting each value once; a string is
//! decoded at most once on any path (never inside a value that was itself decoded), so the
//! work stays linear in the text.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::change::Change;
use super::scan::Scan;

/// Schemas nest at most this deep before the walk stops repairing (the value is left as it is).
const MAX_DEPTH: u32 = 64;

/// `$ref`s followed in a row at most: a schema that refers to itself in a loop stops here.
const MAX_REFS: u32 = 8;

/// `value` with the repairs `root` directs made, each one recorded in `changes`.
pub(super) fn conform(
    value: Value,
    root: &Value,
    changes: &mut Vec<Change>,
    steps: &mut usize,
) -> Value {
    let mut walk = Walk {
        root,
        changes,
        steps,
        folded: HashMap::new(),
    };
    walk.value(value, root, &mut String::new(), (0, false))
}

struct Walk<'a> {
    root: &'a Value,
    changes: &'a mut Vec<Change>,
    steps: &'a mut usize,
    /// Each object schema's parameters by folded name (`None` when two fold alike), built once
    /// per schema: a key then costs its own length to match, however many parameters there are
    /// and however many objects of that schema the arguments hold.
    folded: HashMap<*const Map<String, Value>, Folded<'a>>,
}

type Folded<'a> = HashMap<String, Option<&'a str>>;

impl<'a> Walk<'a> {
    /// One value at `path` against `schema`; `decoded` says it came out of a decoded string.
    fn value(
        &mut self,
        value: Value,
        schema: &'a Value,
        path: &mut String,
        (depth, decoded): (u32, bool),
    ) -> Value {
        if depth > MAX_DEPTH {
            return value;
        }
        let schema = resolve(self.root, schema);
        match value {
            Value::String(text) if !decoded && wants_structure(schema) => {
                match self.decode(&text, schema) {
                    Some(inner) => {
                        self.changes.push(Change::Decoded { at: path.clone() });
                        self.value(inner, schema, path, (depth, true))
                    }
                    None => Value::String(text),
                }
            }
            Value::String(text) if wants_scalar(schema) => {
                *self.steps += text.len();
                match scalar(&text, schema) {
                    Some(unquoted) => {
                        self.changes.push(Change::Unquoted { at: path.clone() });
                        unquoted
                    }
                    None => Value::String(text),
                }
            }
            Value::Object(map) => {
                let map = self.rename(map, schema);
                let map = map
                    .into_iter()
                    .map(|(key, item)| {
                        let below = property(schema, &key);
                        let item = at(path, &key, |path| {
                            self.value(item, below, path, (depth + 1, decoded))
                        });
                        (key, item)
                    })
                    .collect();
                Value::Object(map)
            }
            Value::Array(items) => {
                let below = schema.get("items").unwrap_or(&Value::Bool(true));
                let items = items
                    .into_iter()
                    .enumerate()
                    .map(|(index, item)| {
                        at(path, &index.to_string(), |path| {
                            self.value(item, below, path, (depth + 1, decoded))
                        })
                    })
                    .collect();
                Value::Array(items)
            }
            other => other,
        }
    }

    /// The JSON in `text`, when it is of a type `schema` allows.
    fn decode(&mut self, text: &str, schema: &Value) -> Option<Value> {
        let mut scan = Scan::new(text);
        let inner = scan.whole();
        *self.steps += scan.steps;
        let inner = inner.ok()?;
        let fits = match &inner {
            Value::Object(_) => allows(schema, "object"),
            Value::Array(_) => allows(schema, "array"),
            _ => false,
        };
        fits.then_some(inner)
    }

    /// `map` with each key that names no parameter, but matches exactly one but for case, `_`
    /// or `-`, given that parameter's name; unless the parameter is given as well, or another
    /// key matches it too (which one counts would be a guess).
    fn rename(&mut self, map: Map<String, Value>, schema: &'a Value) -> Map<String, Value> {
        let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
            return map;
        };
        let folded = self
            .folded
            .entry(std::ptr::from_ref(properties))
            .or_insert_with(|| fold_all(properties));
        let mut steps = 0;
        let targets: Vec<Option<&str>> = map
            .keys()
            .map(|key| {
                steps += key.len();
                matching(properties, folded, key).filter(|name| !map.contains_key(*name))
            })
            .collect();
        *self.steps += steps;
        let mut claims: HashMap<&str, usize> = HashMap::new();
        for name in targets.iter().flatten() {
            *claims.entry(name).or_default() += 1;
        }
        let once = |name: &str| claims.get(name) == Some(&1);
        let mut renamed = Map::new();
        for ((key, item), target) in map.into_iter().zip(&targets) {
            let key = match target {
                Some(name) if once(name) => {
                    self.changes.push(Change::RenamedKey {
                        from: key,
                        to: (*name).to_owned(),
                    });
                    (*name).to_owned()
                }
                _ => key,
            };
            renamed.insert(key, item);
        }
        renamed
    }
}

/// The parameters by folded name; a folded name two parameters share names neither.
fn fold_all(properties: &Map<String, Value>) -> Folded<'_> {
    let mut folded: Folded<'_> = HashMap::with_capacity(properties.len());
    for name in properties.keys() {
        folded
            .entry(fold(name))
            .and_modify(|found| *found = None)
            .or_insert(Some(name.as_str()));
    }
    folded
}

/// The one parameter `key` names but for case, `_` or `-`, when `key` is not a parameter.
fn matching<'p>(
    properties: &Map<String, Value>,
    folded: &Folded<'p>,
    key: &str,
) -> Option<&'p str> {
    if properties.contains_key(key) {
        return None;
    }
    folded.get(&fold(key)).copied().flatten()
}

/// A name without case, `_` or `-`: `maxResults`, `max_results` and `Max-Results` fold alike.
fn fold(name: &str) -> String {
    name.chars()
        .filter(|c| !matches!(c, '_' | '-'))
        .flat_map(char::to_lowercase)
        .collect()
}

/// Runs `f` with `path` extended by one JSON pointer segment.
fn at<T>(path: &mut String, segment: &str, f: impl FnOnce(&mut String) -> T) -> T {
    let len = path.len();
    path.push('/');
    path.push_str(&segment.replace('~', "~0").replace('/', "~1"));
    let out = f(path);
    path.truncate(len);
    out
}

/// The schema of `key`'s value in an object of `schema`: its property's, or
/// `additionalProperties`' when that is a schema.
fn property<'s>(schema: &'s Value, key: &str) -> &'s Value {
    schema
        .get("properties")
        .and_then(|properties| properties.get(key))
        .or_else(|| schema.get("additionalProperties").filter(|s| s.is_object()))
        .unwrap_or(&Value::Bool(true))
}

/// The schema `schema` stands for: a local `$ref` followed, and of an `anyOf` or `oneOf`
/// whose branches are one schema and `null` (an `Option`), that one schema.
fn resolve<'s>(root: &'s Value, mut schema: &'s Value) -> &'s Value {
    for _ in 0..MAX_REFS {
        if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
            match reference.strip_prefix('#').and_then(|p| root.pointer(p)) {
                Some(target) => schema = target,
                None => return schema,
            }
            continue;
        }
        let branches = schema
            .get("anyOf")
            .or_else(|| schema.get("oneOf"))
            .and_then(Value::as_array);
        let Some(branches) = branches else {
            return schema;
        };
        let mut not_null = branches.iter().filter(|b| !is_null_schema(b));
        match (not_null.next(), not_null.next()) {
            (Some(one), None) => schema = one,
            _ => return schema,
        }
    }
    schema
}

fn is_null_schema(schema: &Value) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("null")
        || schema.get("const").is_some_and(Value::is_null)
}

/// The types `schema` names, when it names any.
fn types(schema: &Value) -> Option<Vec<&str>> {
    match schema.get("type")? {
        Value::String(one) => Some(vec![one.as_str()]),
        Value::Array(many) => Some(many.iter().filter_map(Value::as_str).collect()),
        _ => None,
    }
}

fn allows(schema: &Value, kind: &str) -> bool {
    types(schema).is_some_and(|types| types.contains(&kind))
}

/// The longest quoted number read as a number: longer digits are no model's slip.
const MAX_QUOTED_NUMBER: usize = 40;

/// A schema that asks for a number, an integer or a boolean and does not allow a string: a
/// string there that spells one is the model's quoting slip.
fn wants_scalar(schema: &Value) -> bool {
    types(schema).is_some_and(|types| {
        !types.contains(&"string")
            && types
                .iter()
                .any(|t| matches!(*t, "integer" | "number" | "boolean"))
    })
}

/// The number or boolean `text` spells exactly (no spaces, no sign of a guess), when `schema`
/// allows its type: `"42"` for an integer, `"2.5"` for a number, `"true"` for a boolean.
fn scalar(text: &str, schema: &Value) -> Option<Value> {
    if allows(schema, "boolean") {
        match text {
            "true" => return Some(Value::Bool(true)),
            "false" => return Some(Value::Bool(false)),
            _ => {}
        }
    }
    if text.len() > MAX_QUOTED_NUMBER || text.trim() != text {
        return None;
    }
    let number: serde_json::Number = text.parse().ok()?;
    let whole = number.is_i64() || number.is_u64();
    (allows(schema, "number") || (whole && allows(schema, "integer")))
        .then_some(Value::Number(number))
}

/// A schema that asks for an object or array and does not allow a string: a string there is
/// worth decoding. One that names no type allows a string as it is.
fn wants_structure(schema: &Value) -> bool {
    types(schema).is_some_and(|types| {
        !types.contains(&"string") && (types.contains(&"object") || types.contains(&"array"))
    })
}
