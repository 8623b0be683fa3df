//! What a run returns: the model's final text turned into the agent's output type.

use std::fmt;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;

use crate::chat::ResponseFormat;
use crate::error::BoxError;
use crate::structured::strip_code_fence;

/// Turns the model's final text answer into an agent's output.
///
/// `String` takes the text as it is; [`Json<T>`] deserializes it. Implement it for your own types
/// to give an agent a typed output: `on_llm_error`'s `RespondWith` is then checked against that
/// type at compile time.
///
/// # Examples
///
/// An agent whose runs return a number:
///
/// ```
/// use agent_errors::{AgentBuilder, BoxError, run::AgentOutput};
/// use agent_errors::testing::ScriptedModel;
///
/// struct Score(u8);
///
/// impl AgentOutput for Score {
///     fn from_final_text(text: String) -> Result<Self, BoxError> {
///         Ok(Score(text.trim().parse()?))
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let judge = AgentBuilder::<Score>::new("judge").model(ScriptedModel::new().text(" 7 ")).build()?;
/// assert_eq!(judge.run("Rate this essay from 0 to 10.").await?.0, 7);
/// # Ok(())
/// # }
/// ```
pub trait AgentOutput: Send + Sized + 'static {
    /// Reads the final answer.
    fn from_final_text(text: String) -> Result<Self, BoxError>;

    /// The format the agent asks the provider for, unless its
    /// [`request_options`](crate::AgentBuilder::request_options) set one: `None` (free text)
    /// by default; [`Json<T>`] asks for `T`'s JSON Schema.
    fn response_format() -> Option<ResponseFormat> {
        None
    }
}

impl AgentOutput for String {
    fn from_final_text(text: String) -> Result<Self, BoxError> {
        Ok(text)
    }
}

/// An output read from the model's final answer as JSON (a surrounding Markdown code fence is
/// tolerated, since models add one).
///
/// An agent with this output asks for structured output: every request carries `T`'s JSON
/// Schema (from schemars) as [`ResponseFormat::JsonSchema`], named after the type, with
/// `strict: false`. Strict mode (OpenAI's `strict: true`) only accepts schemas where every
/// property is listed as required and every object has `additionalProperties: false`, and
/// refuses the whole request otherwise; schemars leaves `Option` fields out of `required` and
/// does not close objects, so most real types would turn every request into an error. Without
/// `strict` the provider follows the schema as closely as it can (OpenAI as guidance, local
/// servers such as vLLM and Ollama by constraining decoding), and the answer is still checked
/// here: one that does not deserialize into `T` ends the run with
/// [`RunError::InvalidOutput`](crate::RunError::InvalidOutput). For a schema you know is
/// strict-compatible, set your own format with
/// [`AgentBuilder::request_options`](crate::AgentBuilder::request_options); it replaces this one.
///
/// # Examples
///
/// ```
/// use agent_errors::{AgentBuilder, llm::ResponseFormat, run::Json};
/// use agent_errors::testing::ScriptedModel;
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Verdict {
///     ok: bool,
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let model = ScriptedModel::new().text(r#"{"ok": true}"#);
/// let agent = AgentBuilder::<Json<Verdict>>::new("judge").model(model.clone()).build()?;
/// assert!(agent.run("Is it fine?").await?.0.ok);
///
/// let asked = model.last_request().expect("one request");
/// let Some(ResponseFormat::JsonSchema { name, strict, .. }) = asked.options.response_format
/// else { panic!("no schema sent") };
/// assert_eq!((name.as_str(), strict), ("Verdict", false));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Json<T>(pub T);

impl<T> Json<T> {
    /// The value.
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T: DeserializeOwned + JsonSchema + Send + 'static> AgentOutput for Json<T> {
    fn from_final_text(text: String) -> Result<Self, BoxError> {
        Ok(Json(serde_json::from_str(strip_code_fence(&text))?))
    }

    fn response_format() -> Option<ResponseFormat> {
        let schema = crate::tool::schema_of::<T>();
        let title = schema.get("title").and_then(serde_json::Value::as_str);
        Some(ResponseFormat::JsonSchema {
            name: format_name(title.unwrap_or_default()),
            schema,
            strict: false,
        })
    }
}

/// A schema name as providers accept one: at most 64 of letters, digits, `_` and `-`.
fn format_name(title: &str) -> String {
    let name: String = title
        .chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '_' | '-' => c,
            _ => '_',
        })
        .take(64)
        .collect();
    if name.is_empty() {
        "output".to_owned()
    } else {
        name
    }
}

impl<T: fmt::Display> fmt::Display for Json<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_output_reads_plain_and_fenced_answers() {
        let plain: Json<Vec<u32>> = AgentOutput::from_final_text(" [1, 2] ".into()).unwrap();
        assert_eq!(plain.0, vec![1, 2]);
        let fenced: Json<Vec<u32>> =
            AgentOutput::from_final_text("```json\n[3]\n```".into()).unwrap();
        assert_eq!(fenced.0, vec![3]);
        let bare_fence: Json<Vec<u32>> =
            AgentOutput::from_final_text("```\n[4]\n```".into()).unwrap();
        assert_eq!(bare_fence.0, vec![4]);
    }

    #[test]
    fn schema_names_keep_only_what_providers_accept() {
        assert_eq!(format_name("Array_of_uint32"), "Array_of_uint32");
        assert_eq!(format_name("Map<String, u8>"), "Map_String__u8_");
        assert_eq!(format_name(""), "output");
        assert_eq!(format_name(&"x".repeat(100)).len(), 64);
    }

    #[test]
    fn json_output_refuses_prose() {
        let err = <Json<u32> as AgentOutput>::from_final_text("three".into()).unwrap_err();
        assert!(err.downcast_ref::<serde_json::Error>().is_some());
    }
}
