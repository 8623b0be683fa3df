//! The key that names one tool call across retries, repairs and a resumed run, so a tool with
//! side effects can hand it downstream and the service can do the work once; or, derived from
//! it, the key that names one effect however often the model asks for it.

mod digest;

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A stable name for one tool call: the run's id and the call's id. Every attempt of the call
/// (its retries, a run again after a fixer repaired it, a run again after the durable run it
/// belongs to resumed in another process) sees the same key, so a tool that passes it on (an
/// `Idempotency-Key` header, a unique column) lets the service do the work once. A call the
/// ladder retries after a timeout or a 504 keeps its key on every attempt, and so does the
/// fallback it hands the call to.
///
/// The key names a call, not an effect: when the model, shown an error, asks for the same thing
/// again, that is a new call with a new id and so a new key. A tool whose effect must happen once
/// whatever the model does sends [`for_effect`](IdempotencyKey::for_effect) instead: a key made
/// of the run's id and the tool's name and arguments, the same for every identical call of the
/// run.
///
/// A tool asks for it like any per-run value, with a `Ctx<IdempotencyKey>` parameter; the
/// agent loop gives every call its key (a [`RunContext`](crate::RunContext) of your own gives
/// one once it has a [run id](crate::RunContext::with_run_id)). A rig tool reads it from the
/// rig `ToolContext` it is called with, `context.require::<IdempotencyKey>()` (feature `rig`:
/// see [`ToolDef::from_rig`](crate::ToolDef::from_rig)).
///
/// It serializes as `{"run_id": "...", "call_id": "..."}`. Its text (`to_string()`, what a tool
/// sends downstream) is the run id, `:`, and the call id, with every `%` in the run id written
/// `%25` and every `:` in it `%3A`: the first `:` always ends the run id, so two keys with
/// different parts never print alike (`tenant:a` + `call_1` is `tenant%3Aa:call_1`, `tenant` +
/// `a:call_1` is `tenant:a:call_1`). A run id with neither character prints as it is. This
/// form is stable across releases: a service may store it.
///
/// # Examples
///
/// ```
/// use agent_errors::prelude::*;
/// use agent_errors::{Ctx, RunOptions, call::IdempotencyKey};
/// use agent_errors::testing::ScriptedModel;
///
/// /// Charges the card once, however often it is called for one call.
/// #[tool]
/// async fn charge(key: Ctx<IdempotencyKey>, cents: u64) -> String {
///     // A real tool sends `key.to_string()` as the payment API's idempotency key.
///     format!("charged {cents} with key {}", *key)
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let model = ScriptedModel::new().tool_call("charge", r#"{"cents": 250}"#).text("done");
/// let agent = Agent::builder("till").model(model).tools(tools![charge]).build()?;
/// let outcome = agent.run_with("charge 2.50", RunOptions::new().run_id("run-7")).await;
/// let result = &outcome.transcript[2];
/// assert!(format!("{result:?}").contains("charged 250 with key run-7:call_1"));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey {
    run_id: Arc<str>,
    call_id: Arc<str>,
}

impl IdempotencyKey {
    /// The key of call `call_id` of run `run_id`.
    pub fn new(run_id: impl Into<Arc<str>>, call_id: impl Into<Arc<str>>) -> Self {
        IdempotencyKey {
            run_id: run_id.into(),
            call_id: call_id.into(),
        }
    }

    /// The run's id.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The call's id, as the model gave it; for a key from
    /// [`for_effect`](IdempotencyKey::for_effect), `effect-` and the effect's hash.
    pub fn call_id(&self) -> &str {
        &self.call_id
    }

    /// The key of an effect rather than of a call: this key's run id and a hash of `tool` and
    /// `args`, so every call of the run that asks for the same thing gets the same key.
    ///
    /// Which to send downstream:
    /// - **the call's key** (`self`) when a retry of *this call* must not repeat the work: the
    ///   ladder's retries, a fixer's repaired run, a resumed run. A second call the model makes,
    ///   even with the same arguments, is a second piece of work.
    /// - **the effect's key** when the effect must happen once *whatever the model re-asks
    ///   within the run*: shown that opening a ticket failed (the ticket was opened, its answer
    ///   lost), the model asks again as a new call, and the service recognises the repeat.
    ///   The trade-off: two identical effects the model means to cause in one run (two equal
    ///   payments, two equal emails) become one. Put what tells them apart (an order number,
    ///   a line id) in the arguments, or send the call's key. Another run, another tool or
    ///   other arguments give another key.
    ///
    /// The hash is FNV-1a/128 of `["<tool>", <args>]` as compact JSON with every object's keys
    /// sorted by their UTF-8 bytes (whatever `serde_json` features the build unifies), strings
    /// as `serde_json` writes them (escapes the model used read as the text they stand for),
    /// numbers by their value: `1`, `1.0` and `1e0` are one number, `-0` is `0`, a float with
    /// no fraction within +-2^53 is written as that integer. The same in every process, build
    /// and Rust release, so a service can remember it across deploys; one caveat: a decimal
    /// too long for an `f64` is keyed by the `f64` it was parsed to, and `serde_json` without
    /// its `float_roundtrip` feature may parse it to a neighbouring one, so keep such numbers
    /// out of an effect's arguments (or round them) when builds that differ there share a
    /// service. Arrays keep their order, so a set must serialize in a fixed one: a `BTreeSet`
    /// or a sorted `Vec`, never a `HashSet`, whose order changes with every set made (the same
    /// recipients would name two effects). The work is linear in the arguments' size, plus
    /// sorting each object's keys, and recurses as deep as they nest (at most 128 levels for
    /// arguments parsed from the model's text). It names; it is not a
    /// cryptographic hash: it neither hides the arguments nor resists collisions crafted on
    /// purpose (a model that wants an effect not to happen can as well not ask). The key's [`call_id`](Self::call_id) is
    /// `effect-` and the hash in 32 lowercase hex digits.
    ///
    /// # Errors
    ///
    /// [`EffectKeyError::NotJson`] when `args` does not serialize to JSON (a map whose keys are
    /// not strings, a `Serialize` impl that fails).
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::prelude::*;
    /// use agent_errors::{Ctx, RunOptions, call::IdempotencyKey};
    /// use agent_errors::testing::ScriptedModel;
    /// use serde::Serialize;
    ///
    /// #[derive(Serialize)]
    /// struct Ticket<'a> {
    ///     customer_id: u64,
    ///     summary: &'a str,
    /// }
    ///
    /// /// Opens a support ticket once per run, however often the model asks for it.
    /// #[tool]
    /// async fn create_ticket(
    ///     key: Ctx<IdempotencyKey>,
    ///     customer_id: u64,
    ///     summary: String,
    /// ) -> Result<String, BoxError> {
    ///     let ticket = Ticket { customer_id, summary: &summary };
    ///     let key = key.for_effect("create_ticket", &ticket)?;
    ///     // A real tool sends `key.to_string()` as the ticket API's idempotency key.
    ///     Ok(format!("ticket {key}"))
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // The model asks twice, as two calls: both send the same key.
    /// let args = r#"{"customer_id": 42, "summary": "refund"}"#;
    /// let model = ScriptedModel::new()
    ///     .tool_call("create_ticket", args)
    ///     .tool_call("create_ticket", args)
    ///     .text("done");
    /// let agent = Agent::builder("desk").model(model).tools(tools![create_ticket]).build()?;
    /// let outcome = agent.run_with("open a ticket", RunOptions::new().run_id("run-7")).await;
    /// let sent = |i: usize| format!("{:?}", outcome.transcript[i]);
    /// let key = IdempotencyKey::new("run-7", "any call")
    ///     .for_effect("create_ticket", &Ticket { customer_id: 42, summary: "refund" })?;
    /// assert!(sent(2).contains(&format!("ticket {key}")));
    /// assert!(sent(4).contains(&format!("ticket {key}")));
    /// assert!(key.to_string().starts_with("run-7:effect-"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn for_effect<A: Serialize + ?Sized>(
        &self,
        tool: &str,
        args: &A,
    ) -> Result<IdempotencyKey, EffectKeyError> {
        let effect = serde_json::to_value((tool, args)).map_err(EffectKeyError::NotJson)?;
        let digest = digest::canonical_digest(&effect).map_err(EffectKeyError::NotJson)?;
        Ok(IdempotencyKey {
            run_id: Arc::clone(&self.run_id),
            call_id: format!("effect-{digest:032x}").into(),
        })
    }
}

/// The hash that names the effect of calling `tool` with `args`, in 32 lowercase hex digits: the
/// same as the hash in [`IdempotencyKey::for_effect`]'s key, so arguments that differ only in key
/// order, whitespace or number spelling name one effect. `None` when the arguments are not JSON.
pub(crate) fn effect_hash(tool: &str, raw_args: &str) -> Option<String> {
    let args: serde_json::Value = serde_json::from_str(raw_args).ok()?;
    let effect = serde_json::Value::Array(vec![serde_json::Value::from(tool), args]);
    let digest = digest::canonical_digest(&effect).ok()?;
    Some(format!("{digest:032x}"))
}

/// Why [`IdempotencyKey::for_effect`] could not name an effect.
///
/// # Examples
///
/// ```
/// use std::collections::BTreeMap;
/// use agent_errors::call::{EffectKeyError, IdempotencyKey};
///
/// // JSON object keys are strings: a map keyed by pairs has no JSON form.
/// let args = BTreeMap::from([((1, 2), "a")]);
/// let key = IdempotencyKey::new("run-7", "call_1");
/// match key.for_effect("plot", &args) {
///     Ok(effect) => println!("send {effect}"),
///     Err(EffectKeyError::NotJson(error)) => println!("send the call's key instead: {error}"),
///     Err(other) => println!("{other}"),
/// }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EffectKeyError {
    /// The arguments do not serialize to JSON.
    #[error("the arguments do not serialize to JSON: {0}")]
    NotJson(#[source] serde_json::Error),
}

/// The key's two parts, as serde sees them.
#[derive(Serialize, Deserialize)]
struct KeyParts<S> {
    run_id: S,
    call_id: S,
}

impl Serialize for IdempotencyKey {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        KeyParts {
            run_id: &*self.run_id,
            call_id: &*self.call_id,
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for IdempotencyKey {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let parts = KeyParts::<String>::deserialize(deserializer)?;
        Ok(IdempotencyKey::new(parts.run_id, parts.call_id))
    }
}

/// `run_id:call_id`, the run id's `%` and `:` escaped (`%25`, `%3A`) so that the first `:`
/// is the one between the parts.
impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rest = &*self.run_id;
        while let Some(at) = rest.find([':', '%']) {
            f.write_str(&rest[..at])?;
            f.write_str(if rest.as_bytes()[at] == b':' {
                "%3A"
            } else {
                "%25"
            })?;
            rest = &rest[at + 1..];
        }
        write!(f, "{rest}:{}", self.call_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Fields declared out of order: the key must not depend on declaration order either.
    #[derive(Serialize)]
    struct Ticket {
        summary: &'static str,
        customer_id: u64,
    }

    fn call_key(run_id: &str) -> IdempotencyKey {
        IdempotencyKey::new(run_id, "call_1")
    }

    fn effect(run_id: &str, tool: &str, args: &serde_json::Value) -> String {
        call_key(run_id).for_effect(tool, args).unwrap().to_string()
    }

    #[test]
    fn an_effect_key_is_the_same_in_every_build() {
        // FNV-1a/128 of `["create_ticket",{"customer_id":42,"summary":"refund order 7"}]`,
        // computed outside Rust: a change here breaks every key a service has stored.
        let ticket = Ticket {
            summary: "refund order 7",
            customer_id: 42,
        };
        let key = call_key("run-7")
            .for_effect("create_ticket", &ticket)
            .unwrap();
        assert_eq!(
            key.to_string(),
            "run-7:effect-70beb8375e4dd8f19d6641018474aeb5"
        );
        assert_eq!(key.run_id(), "run-7");
        assert_eq!(key.call_id(), "effect-70beb8375e4dd8f19d6641018474aeb5");
    }

    #[test]
    fn an_effect_key_ignores_the_order_of_object_keys() {
        let ticket = Ticket {
            summary: "refund order 7",
            customer_id: 42,
        };
        let typed = call_key("run-7")
            .for_effect("create_ticket", &ticket)
            .unwrap();
        let reordered: serde_json::Value =
            serde_json::from_str(r#"{"summary": "refund order 7", "customer_id": 42}"#).unwrap();
        let nested_a = json!({"to": {"b": 1, "a": [{"y": 2, "x": 1}]}});
        let nested_b: serde_json::Value =
            serde_json::from_str(r#"{"to": {"a": [{"x": 1, "y": 2}], "b": 1}}"#).unwrap();
        assert_eq!(
            typed,
            call_key("run-7")
                .for_effect("create_ticket", &reordered)
                .unwrap()
        );
        assert_eq!(
            effect("run-7", "send_email", &nested_a),
            effect("run-7", "send_email", &nested_b)
        );
    }

    #[test]
    fn the_same_effect_gets_the_same_key_from_any_call_of_the_run() {
        let args = json!({"customer_id": 42, "summary": "refund"});
        let first = IdempotencyKey::new("run-7", "call_1").for_effect("create_ticket", &args);
        let again = IdempotencyKey::new("run-7", "call_9").for_effect("create_ticket", &args);
        assert_eq!(first.unwrap(), again.unwrap());
    }

    #[test]
    fn another_run_tool_or_argument_gets_another_key() {
        let args = json!({"customer_id": 42, "summary": "refund"});
        let base = effect("run-7", "create_ticket", &args);
        let others = [
            effect("run-8", "create_ticket", &args),
            effect("run-7", "send_email", &args),
            effect(
                "run-7",
                "create_ticket",
                &json!({"customer_id": 43, "summary": "refund"}),
            ),
            effect(
                "run-7",
                "create_ticket",
                &json!({"customer_id": "42", "summary": "refund"}),
            ),
            effect("run-7", "create_ticket", &json!({"customer_id": 42})),
        ];
        for other in &others {
            assert_ne!(&base, other);
        }
    }

    #[test]
    fn a_key_serializes_as_its_two_parts_and_back() {
        let key = IdempotencyKey::new("run:7", "call_1");
        let json = serde_json::to_value(&key).unwrap();
        assert_eq!(json, json!({"run_id": "run:7", "call_id": "call_1"}));
        assert_eq!(serde_json::from_value::<IdempotencyKey>(json).unwrap(), key);
        assert!(serde_json::from_value::<IdempotencyKey>(json!("run:7:call_1")).is_err());
    }

    #[test]
    fn the_text_of_a_key_tells_its_parts_apart() {
        let a = IdempotencyKey::new("tenant:a", "call_1");
        let b = IdempotencyKey::new("tenant", "a:call_1");
        assert_ne!(a.to_string(), b.to_string());
        assert_eq!(a.to_string(), "tenant%3Aa:call_1");
        assert_eq!(b.to_string(), "tenant:a:call_1");
        let percent = IdempotencyKey::new("50%3A", "x");
        assert_eq!(percent.to_string(), "50%253A:x");
        assert_ne!(
            percent.to_string(),
            IdempotencyKey::new("50:", "x").to_string()
        );
        assert_eq!(call_key("run-7").to_string(), "run-7:call_1");
    }

    #[test]
    fn arguments_nested_as_deep_as_the_parser_allows_get_a_key() {
        let depth = 127;
        let text = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let args: serde_json::Value = serde_json::from_str(&text).unwrap();
        let key = call_key("run-7").for_effect("t", &args).unwrap();
        assert!(key.call_id().starts_with("effect-"));
    }

    #[test]
    fn the_effect_hash_of_argument_text_is_the_effect_keys() {
        let args = r#"{ "summary": "refund",
            "customer_id": 42.0 }"#;
        let key = call_key("run-7")
            .for_effect(
                "create_ticket",
                &json!({"customer_id": 42, "summary": "refund"}),
            )
            .unwrap();
        let hash = effect_hash("create_ticket", args).unwrap();
        assert_eq!(key.call_id(), format!("effect-{hash}"));
        assert_ne!(effect_hash("send_email", args), Some(hash));
        assert_eq!(effect_hash("create_ticket", "{not json"), None);
    }

    #[test]
    fn arguments_without_a_json_form_are_an_error_not_a_panic() {
        let args = std::collections::BTreeMap::from([((1, 2), "a")]);
        let error = call_key("run-7").for_effect("plot", &args).unwrap_err();
        assert!(matches!(error, EffectKeyError::NotJson(_)));
        assert!(error.to_string().contains("do not serialize to JSON"));
    }
}
