//! Checks on a tool's successful output. Many services answer 200 with the failure in the body
//! (`{"error": "rate limited, retry later"}`, GraphQL's `errors`, `{"ok": false}`); the tool
//! returns that body as its output, and without a check the model builds its answer on it. A
//! check turns such an output into a failure of the kind it names, which then goes down the
//! tool's ladder like any other failure.

use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use crate::classify::ErrorKind;

/// The most of a rejected output's message that is kept: enough to say what went wrong, not a
/// whole error page.
const MAX_MESSAGE_CHARS: usize = 500;

/// An output a tool's [`OutputCheck`] rejected: the failure it reports, and its kind.
///
/// Its message is redacted, sanitized and bounded when it is made, as error text is: the output
/// came from a service and is shown to the model and written to events and logs.
///
/// # Examples
///
/// ```
/// use agent_errors::ErrorKind;
/// use agent_errors::call::OutputRejected;
///
/// let rejected = OutputRejected::new(ErrorKind::Quota, "rate limited\x1b[0m, retry later");
/// assert_eq!(rejected.kind(), ErrorKind::Quota);
/// assert_eq!(rejected.message(), "rate limited, retry later");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the tool's output reports a failure: {message}")]
pub struct OutputRejected {
    kind: ErrorKind,
    message: String,
}

impl OutputRejected {
    /// A rejection of `kind`, saying `message` (redacted, sanitized, cut to 500 characters).
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::ErrorKind;
    /// use agent_errors::call::OutputRejected;
    ///
    /// let rejected = OutputRejected::new(ErrorKind::Validation, "x".repeat(2000));
    /// assert!(rejected.message().chars().count() <= 500);
    /// ```
    pub fn new(kind: ErrorKind, message: impl AsRef<str>) -> Self {
        OutputRejected {
            kind,
            message: crate::sanitize::scrub(message.as_ref(), MAX_MESSAGE_CHARS),
        }
    }

    /// The kind of failure the output reports: what the tool's policy answers.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::ErrorKind;
    /// use agent_errors::call::OutputRejected;
    ///
    /// assert_eq!(OutputRejected::new(ErrorKind::Transient, "busy").kind(), ErrorKind::Transient);
    /// ```
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// What the output said went wrong.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::ErrorKind;
    /// use agent_errors::call::OutputRejected;
    ///
    /// assert_eq!(OutputRejected::new(ErrorKind::Transient, "busy").message(), "busy");
    /// ```
    pub fn message(&self) -> &str {
        &self.message
    }
}

type CheckFn = dyn Fn(&str) -> Result<(), OutputRejected> + Send + Sync;

/// A check on a tool's successful output: `Err` turns the output into a failure of the
/// rejection's kind, which the tool's policy answers (retried, fixed, fallen back from,
/// escalated) as it answers the tool's own errors. Set one with
/// [`ToolDef::with_output_check`](crate::ToolDef::with_output_check) or
/// `#[tool(output_check = ...)]`; a tool without one pays nothing.
///
/// Ready checks read an output that is a JSON object: [`OutputCheck::error_member`] (an
/// `error` or `errors` member) and [`OutputCheck::ok_false`] (`"ok": false`). Any other output
/// (plain text, an array, JSON without the member) passes them.
///
/// # Examples
///
/// A check of your own: an output that says the account is locked is an `auth` failure.
///
/// ```
/// use agent_errors::{ErrorKind, ToolDef};
/// use agent_errors::call::{OutputCheck, OutputRejected};
///
/// let locked = OutputCheck::new(|output: &str| {
///     if output.contains("ACCOUNT_LOCKED") {
///         return Err(OutputRejected::new(ErrorKind::Auth, "the account is locked"));
///     }
///     Ok(())
/// });
/// assert!(locked.check("ACCOUNT_LOCKED since 9:00").is_err());
/// assert!(locked.check("balance: 12").is_ok());
///
/// let balance = ToolDef::new("balance", "The balance.", |_: serde_json::Value| async {
///     Ok::<_, std::io::Error>("balance: 12")
/// })
/// .with_output_check(locked);
/// assert!(balance.output_check().is_some());
/// ```
#[derive(Clone)]
pub struct OutputCheck(Arc<CheckFn>);

impl OutputCheck {
    /// A check from a function of the output's text.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::ErrorKind;
    /// use agent_errors::call::{OutputCheck, OutputRejected};
    ///
    /// let not_empty = OutputCheck::new(|output: &str| match output.trim() {
    ///     "" => Err(OutputRejected::new(ErrorKind::Transient, "the service answered nothing")),
    ///     _ => Ok(()),
    /// });
    /// assert!(not_empty.check(" ").is_err());
    /// ```
    pub fn new(check: impl Fn(&str) -> Result<(), OutputRejected> + Send + Sync + 'static) -> Self {
        OutputCheck(Arc::new(check))
    }

    /// Rejects a JSON object whose `error` member is set (not `null`, `false` or empty) or
    /// whose `errors` member is a non-empty array (GraphQL's errors). The failure's message is
    /// the error's text: a string member as it is, an object's `message`. Its kind is what the
    /// text says, read by the same rules as any failure's text (a status written in it, then
    /// phrases: "rate limited" is `quota`, "temporarily unavailable" `transient`, "not found"
    /// `not_found`), and `kind` when the text says nothing those rules know.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::ErrorKind;
    /// use agent_errors::call::OutputCheck;
    ///
    /// let check = OutputCheck::error_member(ErrorKind::Transient);
    /// let rejected = check.check(r#"{"error": "rate limited, retry later"}"#).unwrap_err();
    /// assert_eq!((rejected.kind(), rejected.message()), (ErrorKind::Quota, "rate limited, retry later"));
    /// let busy = check.check(r#"{"error": "busy"}"#).unwrap_err();
    /// assert_eq!(busy.kind(), ErrorKind::Transient); // nothing known said: the kind given
    /// let gone = check.check(r#"{"error": "Ticket 7 not found"}"#).unwrap_err();
    /// assert_eq!(gone.kind(), ErrorKind::NotFound);
    /// let graphql = check.check(r#"{"data": null, "errors": [{"message": "timeout"}]}"#);
    /// assert_eq!(graphql.unwrap_err().message(), "timeout");
    /// assert!(check.check(r#"{"data": {"n": 1}, "errors": []}"#).is_ok());
    /// assert!(check.check("an error occurred, said nobody").is_ok()); // not JSON: passes
    /// ```
    pub fn error_member(kind: ErrorKind) -> Self {
        OutputCheck::new(move |output| match json_object(output) {
            Some(object) => match reported_error(&object) {
                Some(message) => Err(rejected_by_text(kind, message)),
                None => Ok(()),
            },
            None => Ok(()),
        })
    }

    /// Rejects the common error envelopes a service answers with in place of a result, and
    /// nothing else: an object whose only members are an `error` that is set and the members
    /// an error envelope carries beside it (`code`, `message`, `status`, `details`, ...);
    /// `"ok": false`; GraphQL's `data: null` (or no `data`) with a non-empty `errors`. An
    /// output that holds a result and merely mentions an error (`{"id": 7, "error": "..."}`,
    /// `{"data": {...}, "errors": [...]}`, `{"last_error": "..."}`, text that says "error")
    /// passes. What the envelope says is classified as any failure's text is
    /// ([`OutputCheck::error_member`]); a refusal the rules do not know ("Ticket 1 is already
    /// resolved") is `validation`, for the model to read. The recommended preset checks every
    /// tool's output with it.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::ErrorKind;
    /// use agent_errors::call::OutputCheck;
    ///
    /// let check = OutputCheck::envelopes();
    /// let kind = |output: &str| check.check(output).err().map(|rejected| rejected.kind());
    /// assert_eq!(kind(r#"{"error": "Rate limit exceeded"}"#), Some(ErrorKind::Quota));
    /// assert_eq!(kind(r#"{"error": "Service temporarily unavailable", "code": 503}"#), Some(ErrorKind::Transient));
    /// assert_eq!(kind(r#"{"error": "Ticket with ID 1 is already resolved."}"#), Some(ErrorKind::Validation));
    /// assert_eq!(kind(r#"{"ok": false, "error": "channel_not_found"}"#), Some(ErrorKind::NotFound));
    /// assert_eq!(kind(r#"{"ok": false, "error": "invalid_auth"}"#), Some(ErrorKind::Validation));
    /// assert_eq!(kind(r#"{"data": null, "errors": [{"message": "User not found"}]}"#), Some(ErrorKind::NotFound));
    /// assert_eq!(kind(r#"{"id": 7, "status": "sent", "error": "none so far"}"#), None);
    /// assert_eq!(kind(r#"{"result": "the error rate fell"}"#), None);
    /// ```
    pub fn envelopes() -> Self {
        OutputCheck::new(|output| match json_object(output) {
            Some(object) => match envelope_error(&object) {
                Some(message) => Err(rejected_by_text(ErrorKind::Validation, message)),
                None => Ok(()),
            },
            None => Ok(()),
        })
    }

    /// Rejects a JSON object whose `ok` member is `false` (Slack's and many other APIs' way of
    /// saying a call failed). The failure's message is the object's `error` or `message`
    /// member, when it has one; its kind is what that text says, as for
    /// [`OutputCheck::error_member`], and `kind` when it says nothing known.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::ErrorKind;
    /// use agent_errors::call::OutputCheck;
    ///
    /// let check = OutputCheck::ok_false(ErrorKind::Quota);
    /// let rejected = check.check(r#"{"ok": false, "error": "ratelimited"}"#).unwrap_err();
    /// assert_eq!((rejected.kind(), rejected.message()), (ErrorKind::Quota, "ratelimited"));
    /// assert!(check.check(r#"{"ok": true, "ts": "1"}"#).is_ok());
    /// ```
    pub fn ok_false(kind: ErrorKind) -> Self {
        OutputCheck::new(move |output| {
            let Some(object) = json_object(output) else {
                return Ok(());
            };
            if object.get("ok") != Some(&Value::Bool(false)) {
                return Ok(());
            }
            let said = ["error", "message"]
                .iter()
                .find_map(|key| object.get(*key).and_then(error_text));
            let message = said.unwrap_or_else(|| "the output says `ok: false`".to_owned());
            Err(rejected_by_text(kind, message))
        })
    }

    /// Runs the check on `output`.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::ErrorKind;
    /// use agent_errors::call::OutputCheck;
    ///
    /// assert!(OutputCheck::ok_false(ErrorKind::Transient).check(r#"{"ok": false}"#).is_err());
    /// ```
    pub fn check(&self, output: &str) -> Result<(), OutputRejected> {
        (self.0)(output)
    }
}

impl fmt::Debug for OutputCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OutputCheck")
    }
}

/// The output as a JSON object, when it is one. Text that does not open with `{` is not parsed.
fn json_object(output: &str) -> Option<serde_json::Map<String, Value>> {
    if !output.trim_start().starts_with('{') {
        return None;
    }
    match serde_json::from_str(output) {
        Ok(Value::Object(object)) => Some(object),
        _ => None,
    }
}

/// The members an error envelope carries beside its `error`: an object with any other member
/// holds a result, and its `error` member is part of it.
const ENVELOPE_MEMBERS: &[&str] = &[
    "error",
    "code",
    "status",
    "status_code",
    "statusCode",
    "message",
    "detail",
    "details",
    "type",
    "title",
    "error_code",
    "errorCode",
    "error_description",
    "description",
    "reason",
    "hint",
    "request_id",
    "requestId",
    "trace_id",
    "retry_after",
    "retryAfter",
    "success",
    "ok",
    "documentation_url",
];

/// A failure of the kind the text says, else of `otherwise`. A status the envelope gives as a
/// number (`"code": 429`) is read as a status written in the text.
fn rejected_by_text(otherwise: ErrorKind, message: String) -> OutputRejected {
    let kind = kind_said(&message).unwrap_or(otherwise);
    OutputRejected::new(kind, message)
}

/// The kind `text` names: a machine code (`rate_limited`, `channel_not_found`) read as the
/// words it is made of.
fn kind_said(text: &str) -> Option<ErrorKind> {
    if text.contains(char::is_whitespace) {
        return crate::classify::kind_of_text(text);
    }
    crate::classify::kind_of_text(&text.replace(['_', '-', '.'], " "))
}

/// The error an envelope reports: a lone `error`, `ok: false`, or GraphQL's `errors` with no
/// `data`.
fn envelope_error(object: &serde_json::Map<String, Value>) -> Option<String> {
    if object.get("ok") == Some(&Value::Bool(false)) {
        let said = ["error", "message"]
            .iter()
            .find_map(|key| object.get(*key).and_then(error_text));
        return Some(said.unwrap_or_else(|| "the output says `ok: false`".to_owned()));
    }
    let lone = object
        .keys()
        .all(|key| ENVELOPE_MEMBERS.contains(&key.as_str()));
    if lone {
        if let Some(text) = object.get("error").and_then(error_text) {
            return Some(with_status(object, text));
        }
    }
    let no_data = object.get("data").is_none_or(Value::is_null);
    match object.get("errors") {
        Some(Value::Array(errors)) if no_data && !errors.is_empty() => Some(
            errors
                .first()
                .and_then(error_text)
                .unwrap_or_else(|| "the output reports errors".to_owned()),
        ),
        _ => None,
    }
}

/// The error's text, with the envelope's numeric status written after it when it gives one, so
/// the status is read like one written in the text.
fn with_status(object: &serde_json::Map<String, Value>, text: String) -> String {
    let status = ["status", "code", "status_code", "statusCode"]
        .iter()
        .find_map(|key| object.get(*key).and_then(Value::as_u64))
        .filter(|status| (400..600).contains(status));
    match status {
        Some(status) if kind_said(&text).is_none() => {
            format!("{text} (HTTP {status})")
        }
        _ => text,
    }
}

/// The text of the error an object reports in its `error` or `errors` member.
fn reported_error(object: &serde_json::Map<String, Value>) -> Option<String> {
    if let Some(text) = object.get("error").and_then(error_text) {
        return Some(text);
    }
    match object.get("errors") {
        Some(Value::Array(errors)) => errors.first().map(|first| {
            error_text(first).unwrap_or_else(|| "the output reports errors".to_owned())
        }),
        _ => None,
    }
}

/// What an error member says; `None` when it says nothing went wrong (`null`, `false`, `""`).
fn error_text(value: &Value) -> Option<String> {
    match value {
        Value::Null | Value::Bool(false) => None,
        Value::String(text) if text.trim().is_empty() => None,
        Value::String(text) => Some(text.clone()),
        Value::Object(object) => Some(match object.get("message") {
            Some(Value::String(message)) => message.clone(),
            _ => value.to_string(),
        }),
        other => Some(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_members_that_say_nothing_went_wrong_pass() {
        let check = OutputCheck::error_member(ErrorKind::Transient);
        for fine in [
            r#"{"error": null, "value": 1}"#,
            r#"{"error": false}"#,
            r#"{"error": "  "}"#,
            r#"{"errors": null}"#,
            r#"[{"error": "inside an array"}]"#,
            "{not json",
        ] {
            assert!(check.check(fine).is_ok(), "{fine}");
        }
    }

    #[test]
    fn an_error_object_is_read_by_its_message() {
        let check = OutputCheck::error_member(ErrorKind::Quota);
        let rejected = check
            .check(r#"{"error": {"code": 429, "message": "slow down"}}"#)
            .unwrap_err();
        assert_eq!(rejected.message(), "slow down");
        let rejected = check.check(r#"{"error": {"code": 429}}"#).unwrap_err();
        assert_eq!(rejected.message(), r#"{"code":429}"#);
    }

    #[test]
    fn rejected_text_is_redacted_and_bounded() {
        let check = OutputCheck::error_member(ErrorKind::Transient);
        let body = format!(
            r#"{{"error": "GET https://x.test/?api_key=abc123 failed {}"}}"#,
            "y".repeat(5000)
        );
        let rejected = check.check(&body).unwrap_err();
        assert!(!rejected.message().contains("abc123"));
        assert!(rejected.message().chars().count() <= MAX_MESSAGE_CHARS);
    }
}
