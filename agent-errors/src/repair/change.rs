//! What a repair changed, one item per kind of change.

use std::fmt;

/// One thing [`repair_arguments`](crate::repair::repair_arguments) changed.
///
/// # Examples
///
/// ```
/// use agent_errors::repair::{Change, repair_arguments};
/// use serde_json::json;
///
/// let schema = json!({"type": "object", "properties": {"max_results": {"type": "integer"}},
///                     "required": ["max_results"]});
/// let repaired = repair_arguments(r#"{"maxResults": 5,}"#, &schema)?;
/// assert_eq!(repaired.changes(), &[
///     Change::TrailingComma,
///     Change::RenamedKey { from: "maxResults".into(), to: "max_results".into() },
/// ]);
/// assert_eq!(repaired.changes()[1].to_string(), "renamed `maxResults` to `max_results`");
/// // Tell the model which names it got wrong, so its next call is right:
/// let hints: Vec<String> = repaired.changes().iter().filter_map(|change| match change {
///     Change::RenamedKey { from, to } => Some(format!("`{to}`, not `{from}`")),
///     _ => None, // the enum is non-exhaustive
/// }).collect();
/// assert_eq!(hints, ["`max_results`, not `maxResults`"]);
/// # Ok::<(), agent_errors::repair::NotRepaired>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Change {
    /// The object was taken out of the text around it (a Markdown fence, a sentence).
    Extracted,
    /// A comma before `}` or `]` was dropped.
    TrailingComma,
    /// Strings in single quotes were read as strings.
    SingleQuotes,
    /// Keys without quotes were read as strings.
    UnquotedKey,
    /// Python's `True`, `False` or `None` were read as `true`, `false` or `null`.
    PythonLiteral,
    /// A string holding JSON was read as the object or array the schema asks for there.
    Decoded {
        /// Where, as a JSON pointer (`""` for the whole arguments, `/filter` for a parameter).
        at: String,
    },
    /// A number or boolean sent in quotes (`"42"`, `"true"`) was read as the number or boolean
    /// the schema asks for there.
    Unquoted {
        /// Where, as a JSON pointer (`/count`).
        at: String,
    },
    /// A key that matched a parameter but for case, `_` or `-` was given the parameter's name.
    RenamedKey {
        /// The key as sent.
        from: String,
        /// The parameter's name.
        to: String,
    },
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Change::Extracted => f.write_str("took the object out of the text around it"),
            Change::TrailingComma => f.write_str("dropped a trailing comma"),
            Change::SingleQuotes => f.write_str("read single-quoted strings"),
            Change::UnquotedKey => f.write_str("quoted bare keys"),
            Change::PythonLiteral => f.write_str("read Python literals as JSON"),
            Change::Decoded { at } if at.is_empty() => f.write_str("decoded a JSON string"),
            Change::Decoded { at } => write!(f, "decoded the JSON string at `{at}`"),
            Change::Unquoted { at } => write!(f, "read the quoted value at `{at}` unquoted"),
            Change::RenamedKey { from, to } => write!(f, "renamed `{from}` to `{to}`"),
        }
    }
}
