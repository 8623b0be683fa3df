//! The built-in tools every agent has: `escalate` (soft failure) and `throw_exception` (hard
//! failure). They are offered to the model only when enabled on the builder.

use std::str::FromStr;

use schemars::JsonSchema;
use serde::Deserialize;

use crate::chat::ToolSpec;
use crate::error::Severity;
use crate::tool::schema_of;

/// The name of the built-in soft-failure tool.
pub const ESCALATE: &str = "escalate";
/// The name of the built-in hard-failure tool.
pub const THROW_EXCEPTION: &str = "throw_exception";

/// Which built-in tools are offered to the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Builtins {
    pub(crate) escalate: bool,
    pub(crate) throw_exception: bool,
}

impl Builtins {
    pub(crate) fn is_builtin(name: &str) -> bool {
        name == ESCALATE || name == THROW_EXCEPTION
    }

    pub(crate) fn enabled(&self, name: &str) -> bool {
        match name {
            ESCALATE => self.escalate,
            THROW_EXCEPTION => self.throw_exception,
            _ => false,
        }
    }

    pub(crate) fn specs(&self) -> Vec<ToolSpec> {
        let mut specs = Vec::new();
        if self.escalate {
            specs.push(ToolSpec {
                name: ESCALATE.to_owned(),
                description: "Report a failure you cannot resolve but the caller can act on. \
                    The reason goes back to the caller; include what you know (corrected data, \
                    what was missing). severity: low, medium, high (default) or critical."
                    .to_owned(),
                parameters: schema_of::<EscalateArgs>(),
            });
        }
        if self.throw_exception {
            specs.push(ToolSpec {
                name: THROW_EXCEPTION.to_owned(),
                description: "Stop everything: the task cannot and must not be retried. \
                    Use only when continuing would be wrong."
                    .to_owned(),
                parameters: schema_of::<ThrowArgs>(),
            });
        }
        specs
    }
}

/// Arguments of `escalate`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct EscalateArgs {
    /// Why, in words the caller can act on.
    #[serde(default = "no_reason_given")]
    pub(crate) reason: String,
    /// low, medium, high or critical (any case); high when left out.
    #[serde(default)]
    pub(crate) severity: Option<String>,
}

/// An escalation without a reason is still an escalation: losing it to a validation error would
/// hide the one signal the model meant to send.
fn no_reason_given() -> String {
    "(the model escalated without giving a reason)".to_owned()
}

impl EscalateArgs {
    /// The severity: a word the model misspelled falls back to the default rather than losing the
    /// escalation.
    pub(crate) fn severity(&self) -> Severity {
        self.severity
            .as_deref()
            .and_then(|s| Severity::from_str(s).ok())
            .unwrap_or_default()
    }
}

/// Arguments of `throw_exception`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct ThrowArgs {
    /// Why the task must stop.
    pub(crate) reason: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn severity_is_case_insensitive_and_defaults_to_high() {
        let parse = |s: &str| serde_json::from_str::<EscalateArgs>(s).unwrap().severity();
        assert_eq!(
            parse(r#"{"reason": "r", "severity": "LOW"}"#),
            Severity::Low
        );
        assert_eq!(
            parse(r#"{"reason": "r", "severity": "Critical"}"#),
            Severity::Critical
        );
        assert_eq!(parse(r#"{"reason": "r"}"#), Severity::High);
        assert_eq!(
            parse(r#"{"reason": "r", "severity": "urgent"}"#),
            Severity::High
        );
    }

    #[test]
    fn only_enabled_builtins_are_offered() {
        let none = Builtins::default();
        assert!(none.specs().is_empty());
        let both = Builtins {
            escalate: true,
            throw_exception: true,
        };
        let names: Vec<_> = both.specs().into_iter().map(|s| s.name).collect();
        assert_eq!(names, [ESCALATE, THROW_EXCEPTION]);
        assert!(Builtins::is_builtin("escalate") && !both.enabled("other"));
    }
}
