//! Structured answers checked against the format they were asked in: JSON for a
//! [`ResponseFormat::JsonObject`], and every rule of the schema (nested types, required members
//! at any depth, enums, bounds) for a [`ResponseFormat::JsonSchema`], each problem with the path
//! of the part of the answer it is about, so the model can be told exactly what to fix. What an
//! agent's output and [`FallbackOn::BadAnswer`](crate::llm::FallbackOn::BadAnswer) both use.

use std::fmt;

use serde_json::Value;

use crate::chat::ResponseFormat;

/// The most problems of one answer that are kept: the first ones say what to fix.
pub(crate) const MAX_PROBLEMS: usize = 8;
/// The most characters of one problem's message (it may quote the model's answer).
const MAX_PROBLEM_CHARS: usize = 200;

/// One way a structured answer does not fit what was asked for.
///
/// # Examples
///
/// ```
/// use agent_errors::run::{AnswerProblem, InvalidAnswer};
///
/// let problem = AnswerProblem::new("/address/zip", "12 is not of type \"string\"");
/// assert_eq!(problem.to_string(), "at `/address/zip`: 12 is not of type \"string\"");
/// let whole = AnswerProblem::new("", "the answer is not JSON");
/// assert_eq!(whole.to_string(), "the answer is not JSON");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnswerProblem {
    path: String,
    message: String,
}

impl AnswerProblem {
    /// A problem at `path` (a JSON Pointer into the answer, `""` for the whole answer), saying
    /// `message` (redacted, sanitized and cut to 200 characters: it may quote the answer).
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::run::AnswerProblem;
    ///
    /// let problem = AnswerProblem::new("/total", "x".repeat(1000));
    /// assert!(problem.message().chars().count() <= 200);
    /// ```
    pub fn new(path: impl Into<String>, message: impl AsRef<str>) -> Self {
        let path = crate::sanitize::sanitize(&path.into(), MAX_PROBLEM_CHARS);
        AnswerProblem {
            path,
            message: crate::sanitize::scrub(message.as_ref(), MAX_PROBLEM_CHARS),
        }
    }

    /// Where in the answer, as a JSON Pointer (`/items/0/price`); empty for the whole answer.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::run::AnswerProblem;
    ///
    /// assert_eq!(AnswerProblem::new("/items/0", "bad").path(), "/items/0");
    /// ```
    pub fn path(&self) -> &str {
        &self.path
    }

    /// What is wrong there.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::run::AnswerProblem;
    ///
    /// assert_eq!(AnswerProblem::new("", "bad").message(), "bad");
    /// ```
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for AnswerProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "at `{}`: {}", self.path, self.message)
        }
    }
}

/// A structured answer's schema, compiled once to check many answers.
pub(crate) struct AnswerSchema {
    validator: Option<jsonschema::Validator>,
}

impl AnswerSchema {
    /// The check for answers asked in `format`. A schema the validator cannot compile checks
    /// only that the answer is JSON (and says so in the log): the provider was sent it anyway.
    pub(crate) fn of(format: &ResponseFormat) -> AnswerSchema {
        let validator = match format {
            ResponseFormat::JsonObject => None,
            ResponseFormat::JsonSchema { schema, name, .. } => {
                match jsonschema::validator_for(schema) {
                    Ok(validator) => Some(validator),
                    Err(error) => {
                        let error = crate::sanitize::scrub(&error.to_string(), 300);
                        tracing::warn!(schema = %name, %error, "the output schema does not compile: answers are checked as JSON only");
                        None
                    }
                }
            }
        };
        AnswerSchema { validator }
    }

    /// What is wrong with `text` (a Markdown code fence around it is tolerated); empty when it
    /// fits.
    pub(crate) fn problems(&self, text: &str) -> Vec<AnswerProblem> {
        let value = match serde_json::from_str::<Value>(strip_code_fence(text)) {
            Ok(value) => value,
            Err(error) => return vec![not_json(&error)],
        };
        let Some(validator) = &self.validator else {
            return Vec::new();
        };
        validator
            .iter_errors(&value)
            .take(MAX_PROBLEMS)
            .map(|error| AnswerProblem::new(error.instance_path().as_str(), error.to_string()))
            .collect()
    }
}

/// The problem of an answer that is not JSON at all.
fn not_json(error: &serde_json::Error) -> AnswerProblem {
    AnswerProblem::new(
        "",
        format!(
            "the answer is not JSON ({error}): answer with the JSON value alone, no text around it"
        ),
    )
}

/// The text inside a Markdown code fence (```` ```json ... ``` ````), or the trimmed text.
pub(crate) fn strip_code_fence(text: &str) -> &str {
    let trimmed = text.trim();
    let Some(rest) = trimmed.strip_prefix("```") else {
        return trimmed;
    };
    let Some(body) = rest.strip_suffix("```") else {
        return trimmed;
    };
    // The info string (`json`) runs to the first newline.
    match body.split_once('\n') {
        Some((info, inner)) if !info.trim().contains(char::is_whitespace) => inner.trim(),
        _ => body.trim(),
    }
}

/// Every problem of an answer that was refused, as the run's error says and the model is told.
///
/// The source of [`RunError::InvalidOutput`](crate::RunError::InvalidOutput) when the answer
/// did not fit its schema or a validator refused it.
///
/// # Examples
///
/// ```
/// use agent_errors::run::{AnswerProblem, InvalidAnswer};
///
/// let refused = InvalidAnswer::new(vec![AnswerProblem::new("/age", "-1 is less than the minimum of 0")]);
/// assert_eq!(refused.problems().len(), 1);
/// assert!(refused.to_string().contains("at `/age`"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", list(.problems))]
pub struct InvalidAnswer {
    problems: Vec<AnswerProblem>,
}

impl InvalidAnswer {
    /// An answer refused for `problems`.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::run::{AnswerProblem, InvalidAnswer};
    ///
    /// assert!(InvalidAnswer::new(vec![AnswerProblem::new("", "empty")]).to_string().contains("empty"));
    /// ```
    pub fn new(problems: Vec<AnswerProblem>) -> Self {
        InvalidAnswer { problems }
    }

    /// What was wrong with the answer.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::run::{AnswerProblem, InvalidAnswer};
    ///
    /// let refused = InvalidAnswer::new(vec![AnswerProblem::new("/a", "bad")]);
    /// assert_eq!(refused.problems()[0].path(), "/a");
    /// ```
    pub fn problems(&self) -> &[AnswerProblem] {
        &self.problems
    }
}

/// The problems, one a line.
fn list(problems: &[AnswerProblem]) -> String {
    let lines: Vec<String> = problems.iter().map(|p| format!("- {p}")).collect();
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema(schema: Value) -> AnswerSchema {
        AnswerSchema::of(&ResponseFormat::JsonSchema {
            name: "t".into(),
            schema,
            strict: false,
        })
    }

    #[test]
    fn a_wrong_type_deep_in_the_answer_is_found_with_its_path() {
        let check = schema(serde_json::json!({
            "type": "object",
            "properties": {"order": {"type": "object", "properties": {
                "lines": {"type": "array", "items": {"type": "object", "properties": {
                    "qty": {"type": "integer"}}}}}}}
        }));
        let problems = check.problems(r#"{"order": {"lines": [{"qty": 1}, {"qty": "two"}]}}"#);
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].path(), "/order/lines/1/qty");
        assert!(
            check
                .problems("```json\n{\"order\": {\"lines\": []}}\n```")
                .is_empty()
        );
    }

    #[test]
    fn prose_is_not_json_and_is_told_so() {
        let problems = schema(serde_json::json!({"type": "object"})).problems("Sure! {\"a\": 1}");
        assert_eq!(problems.len(), 1);
        assert!(problems[0].message().starts_with("the answer is not JSON"));
    }

    #[test]
    fn plain_and_fenced_answers_are_read() {
        assert_eq!(strip_code_fence(" [1, 2] "), "[1, 2]");
        assert_eq!(strip_code_fence("```json\n[3]\n```"), "[3]");
        assert_eq!(strip_code_fence("```\n[4]\n```"), "[4]");
    }

    #[test]
    fn problems_are_bounded_in_number_and_length() {
        let check = schema(serde_json::json!({"type": "array", "items": {"type": "string"}}));
        let many = format!("[{}]", vec!["1"; 50].join(","));
        assert_eq!(check.problems(&many).len(), MAX_PROBLEMS);
        let long = format!("[{}]", "9".repeat(1000));
        assert!(check.problems(&long)[0].message().chars().count() <= MAX_PROBLEM_CHARS);
    }
}
