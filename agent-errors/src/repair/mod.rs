//! The built-in argument repair: the ready fixer behind `fix(builtin)`, which needs no model.
//!
//! Models send arguments that are almost right: the object inside a Markdown fence or a
//! sentence, a trailing comma, single quotes, unquoted keys, Python's `True` and `None`, the
//! whole object encoded as a JSON string, a number or boolean in quotes where the schema wants
//! the number (`"x": "42"`), a key that differs from its parameter only in case, `_` or `-`
//! (`maxResults` for `max_results`). [`repair_arguments`] repairs exactly these, in
//! one pass over at most [`MAX_REPAIR_INPUT`] bytes, and answers only with arguments that fit
//! the tool's schema. It never touches arguments that fit already, and it refuses rather than
//! guesses: a missing value is not invented, a key given twice is not resolved, and of two
//! objects in a text neither is picked.
//!
//! In a policy it is the rung `fix(builtin)`: its arguments go through the gate (permission
//! hook, approvals) like any fixer's before the tool runs with them.

mod change;
mod scan;
mod schema;

use serde_json::Value;

pub use change::Change;

use scan::{Forgiven, Scan, Stop};

/// The longest argument text [`repair_arguments`] reads, in bytes: longer text is refused.
///
/// # Examples
///
/// ```
/// use agent_errors::repair::{MAX_REPAIR_INPUT, NotRepaired, repair_arguments};
///
/// let long = format!("{{'text': '{}'}}", "a".repeat(MAX_REPAIR_INPUT));
/// let schema = serde_json::json!({"type": "object"});
/// assert!(matches!(repair_arguments(&long, &schema), Err(NotRepaired::TooLong { .. })));
/// ```
pub const MAX_REPAIR_INPUT: usize = 64 * 1024;

/// Arguments [`repair_arguments`] repaired: they fit the schema it was given.
///
/// # Examples
///
/// ```
/// use agent_errors::repair::repair_arguments;
/// use serde_json::json;
///
/// let schema = json!({"type": "object", "properties": {"city": {"type": "string"}},
///                     "required": ["city"]});
/// let sent = "Sure! ```json\n{'city': 'Oslo'}\n```";
/// let repaired = repair_arguments(sent, &schema)?;
/// assert_eq!(repaired.arguments(), r#"{"city":"Oslo"}"#);
/// assert_eq!(repaired.value(), &json!({"city": "Oslo"}));
/// assert_eq!(repaired.changes().len(), 2); // taken out of the text, single quotes read
/// # Ok::<(), agent_errors::repair::NotRepaired>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Repaired {
    arguments: String,
    value: Value,
    changes: Vec<Change>,
}

impl Repaired {
    /// The repaired arguments as JSON text, what the tool is called with.
    pub fn arguments(&self) -> &str {
        &self.arguments
    }

    /// The repaired arguments as a JSON value.
    pub fn value(&self) -> &Value {
        &self.value
    }

    /// What was changed, in the order the repair found it.
    pub fn changes(&self) -> &[Change] {
        &self.changes
    }

    /// The repaired arguments as JSON text, taken.
    pub fn into_arguments(self) -> String {
        self.arguments
    }
}

/// Why [`repair_arguments`] gave back no arguments.
///
/// # Examples
///
/// ```
/// use agent_errors::repair::{NotRepaired, repair_arguments};
/// use serde_json::json;
///
/// let schema = json!({"type": "object", "properties": {"id": {"type": "integer"}},
///                     "required": ["id"]});
/// let refused = |raw| repair_arguments(raw, &schema).unwrap_err();
/// assert_eq!(refused(r#"{"id": 7}"#), NotRepaired::AlreadyValid);
/// assert!(matches!(refused("{id: 'seven'}"), NotRepaired::StillInvalid { .. }));
/// assert_eq!(refused("{id: 1, id: 2}"), NotRepaired::DuplicateKey);
/// assert_eq!(refused("no object here"), NotRepaired::NoObject);
///
/// // In a loop of your own: valid arguments go to the tool as sent, the rest to the model.
/// let next_step = |raw: &str| match repair_arguments(raw, &schema) {
///     Ok(repaired) => format!("call with {}", repaired.arguments()),
///     Err(NotRepaired::AlreadyValid) => format!("call with {raw}"),
///     Err(refused) => format!("tell the model: {refused}"),
/// };
/// assert_eq!(next_step("{id: 7}"), r#"call with {"id":7}"#);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NotRepaired {
    /// The arguments fit the schema as sent: nothing to repair, and nothing is changed.
    #[error("the arguments fit the schema already")]
    AlreadyValid,
    /// The text is longer than [`MAX_REPAIR_INPUT`].
    #[error("the arguments are {len} bytes, more than the {limit} the repair reads")]
    TooLong {
        /// The text's length in bytes.
        len: usize,
        /// [`MAX_REPAIR_INPUT`].
        limit: usize,
    },
    /// No JSON object (or almost-JSON object) is in the text, or more than one is.
    #[error("no single JSON object is in the arguments")]
    NoObject,
    /// An object gives a key twice: which value counts would be a guess.
    #[error("a key is given twice")]
    DuplicateKey,
    /// The repaired arguments still do not fit the schema.
    #[error("the repaired arguments still do not fit the schema (at {})", .paths.join(", "))]
    StillInvalid {
        /// Where they do not fit, as JSON pointers (`""` for the object itself), at most 8.
        paths: Vec<String>,
    },
    /// The schema does not compile, so nothing could be checked against it.
    #[error("the tool's schema is not a JSON Schema the repair can check against")]
    BadSchema,
}

/// Repairs a tool call's argument text against the tool's parameter schema.
///
/// Reads at most [`MAX_REPAIR_INPUT`] bytes in one pass (the work is linear in the text),
/// never panics, and answers with arguments only when they fit `schema`. Arguments that fit as
/// sent are [`NotRepaired::AlreadyValid`]: they are never rewritten.
///
/// # Examples
///
/// In a loop of your own, before giving up on a call:
///
/// ```
/// use agent_errors::repair::repair_arguments;
/// use serde_json::json;
///
/// let schema = json!({
///     "type": "object",
///     "properties": {"query": {"type": "string"}, "exact": {"type": "boolean"}},
///     "required": ["query", "exact"],
/// });
/// let repaired = repair_arguments("{query: 'rust', Exact: True}", &schema)?;
/// assert_eq!(repaired.value(), &json!({"query": "rust", "exact": true}));
/// # Ok::<(), agent_errors::repair::NotRepaired>(())
/// ```
pub fn repair_arguments(raw: &str, schema: &Value) -> Result<Repaired, NotRepaired> {
    repair_counted(raw, schema).0
}

/// [`repair_arguments`], and the bytes its reader looked at.
fn repair_counted(raw: &str, schema: &Value) -> (Result<Repaired, NotRepaired>, usize) {
    if raw.len() > MAX_REPAIR_INPUT {
        let limit = MAX_REPAIR_INPUT;
        return (
            Err(NotRepaired::TooLong {
                len: raw.len(),
                limit,
            }),
            0,
        );
    }
    let Ok(validator) = jsonschema::validator_for(schema) else {
        return (Err(NotRepaired::BadSchema), 0);
    };
    let mut steps = 0;
    let read = read(raw, &mut steps);
    let result = read.and_then(|(value, mut changes)| {
        if changes.is_empty() && validator.is_valid(&value) {
            return Err(NotRepaired::AlreadyValid);
        }
        let value = schema::conform(value, schema, &mut changes, &mut steps);
        let paths: Vec<String> = validator
            .iter_errors(&value)
            .take(8)
            .map(|error| error.instance_path().as_str().to_owned())
            .collect();
        if !paths.is_empty() {
            return Err(NotRepaired::StillInvalid { paths });
        }
        let arguments = value.to_string();
        Ok(Repaired {
            arguments,
            value,
            changes,
        })
    });
    (result, steps)
}

/// The text as a JSON object, with what reading it took: as JSON when it is JSON, else by the
/// forgiving reader, taking the one object among other text; a JSON string holding an object
/// is read once more.
fn read(raw: &str, steps: &mut usize) -> Result<(Value, Vec<Change>), NotRepaired> {
    // Models send nothing at all for tools without parameters.
    if raw.trim().is_empty() {
        return Ok((Value::Object(serde_json::Map::new()), Vec::new()));
    }
    *steps += raw.len();
    if crate::arguments::reject_duplicate_keys(raw).is_err() {
        return Err(NotRepaired::DuplicateKey);
    }
    let (value, mut changes) = match serde_json::from_str::<Value>(raw) {
        Ok(value) => (value, Vec::new()),
        Err(_) => forgiving(raw, steps)?,
    };
    match value {
        Value::Object(_) => Ok((value, changes)),
        Value::String(inner) => {
            let mut scan = Scan::new(&inner);
            let decoded = scan.whole();
            *steps += scan.steps;
            match decoded.map_err(stopped)? {
                object @ Value::Object(_) => {
                    changes.push(Change::Decoded { at: String::new() });
                    changes.extend(forgiven(scan.forgiven));
                    Ok((object, changes))
                }
                _ => Err(NotRepaired::NoObject),
            }
        }
        _ => Err(NotRepaired::NoObject),
    }
}

/// The one object in `raw`, read by the forgiving reader.
fn forgiving(raw: &str, steps: &mut usize) -> Result<(Value, Vec<Change>), NotRepaired> {
    let mut scan = Scan::new(raw);
    let found = scan.first_object();
    let another = found.is_ok() && scan.another_object_after();
    *steps += scan.steps;
    let (value, start, end) = found.map_err(stopped)?;
    if another {
        return Err(NotRepaired::NoObject);
    }
    let mut changes = Vec::new();
    if !raw[..start].trim().is_empty() || !raw[end..].trim().is_empty() {
        changes.push(Change::Extracted);
    }
    changes.extend(forgiven(scan.forgiven));
    Ok((value, changes))
}

fn stopped(stop: Stop) -> NotRepaired {
    match stop {
        Stop::DuplicateKey => NotRepaired::DuplicateKey,
        Stop::Invalid => NotRepaired::NoObject,
    }
}

/// The changes the forgiving reader made, in a fixed order.
fn forgiven(forgiven: Forgiven) -> impl Iterator<Item = Change> {
    [
        (forgiven.trailing_comma, Change::TrailingComma),
        (forgiven.single_quotes, Change::SingleQuotes),
        (forgiven.unquoted_key, Change::UnquotedKey),
        (forgiven.python_literal, Change::PythonLiteral),
    ]
    .into_iter()
    .filter_map(|(made, change)| made.then_some(change))
}

#[cfg(test)]
mod tests;
