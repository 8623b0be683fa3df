//! Any rig provider as a [`ChatModel`]: [`RigModel`].

use rig_core::DynModel;
use rig_core::operation::Completion;

use futures_util::StreamExt;

use super::convert::{Settings, from_rig, to_rig};
use crate::chat::{ChatRequest, ChatResponse};
use crate::error::{BoxError, BoxFuture};
use crate::model::ChatModel;
use crate::stream::ChatStream;

/// A rig model (any of rig's providers, erased as `DynModel<Completion>`) as a [`ChatModel`]:
/// our agent loop, `on_llm_error`, [`FallbackModel`](crate::llm::FallbackModel) and
/// [`PersistentRetry`](crate::llm::PersistentRetry) work over it as over our own providers.
///
/// Each request is written as rig's `CompletionRequest` (messages, tool calls and results,
/// tools, sampling options, tool choice, structured output) with this model's own id and
/// settings, and rig's answer is read back (text, tool calls, finish reason, usage, and the
/// model that answered on [`ChatResponse::model`]).
///
/// A failed call returns rig's `ProviderError` unchanged, boxed, so it can be downcast;
/// [`classify`](crate::classify::classify()) reads it by its variant, status, retry headers
/// (`Retry-After`, `retry-after-ms`, `x-should-retry`) and machine code, never by its body:
/// 429 is `quota` and waits as the server said, 503 and 529 are passing, 401 and 403 are `auth`
/// and 400 `validation`, neither ever retried. Its `Display` carries the provider's body: log
/// it through [`redact`](crate::redact::redact).
///
/// Streamed (`Agent::run_stream`), text goes out as rig delivers it and each tool call whole at
/// its end (rig names a call's id only then); a failure before any output is a failed call, one
/// after is the stream's last item, which the agent turns into an interrupted answer for
/// `on_llm_error`.
///
/// rig itself does not retry a failed call: wrap the model (or set `on_llm_error`) for that.
///
/// # Examples
///
/// ```
/// use agent_errors::Agent;
/// use agent_errors::rig::RigModel;
/// use rig_core::test_utils::{MockCompletionModel, MockTurn};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // Any rig model: `openai::Client::from_env()?.completion_model("gpt-4o")` and the like.
/// let rig_model = MockCompletionModel::from_turns([MockTurn::text("hello")]);
/// let model = RigModel::new(rig_model).with_model_id("gpt-4o-mini").with_temperature(0.2);
/// let agent = Agent::builder("greeter").model(model).build()?;
/// assert_eq!(agent.run("say hello").await?, "hello");
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct RigModel {
    model: DynModel<Completion>,
    name: String,
    settings: Settings,
}

impl RigModel {
    /// Wraps any rig completion model; its name is the model id it addresses (else its
    /// provider's name).
    pub fn new(model: impl Into<DynModel<Completion>>) -> Self {
        let model = model.into();
        let name = model.id().unwrap_or_else(|| model.name()).to_owned();
        RigModel {
            model,
            name,
            settings: Settings::default(),
        }
    }

    /// Sends `model_id` as the model of every request (rig's per-request model override), and
    /// names this model after it.
    #[must_use]
    pub fn with_model_id(mut self, model_id: impl Into<String>) -> Self {
        let model_id = model_id.into();
        self.name.clone_from(&model_id);
        self.settings.model_id = Some(model_id);
        self
    }

    /// The temperature sent when a request sets none.
    #[must_use]
    pub fn with_temperature(mut self, temperature: f64) -> Self {
        self.settings.temperature = Some(temperature);
        self
    }

    /// The answer's token cap when a request sets none.
    #[must_use]
    pub fn with_max_tokens(mut self, max_tokens: u64) -> Self {
        self.settings.max_tokens = Some(max_tokens);
        self
    }

    /// Provider-specific parameters sent with every request (rig's `additional_params`).
    #[must_use]
    pub fn with_additional_params(mut self, params: serde_json::Value) -> Self {
        self.settings.additional_params = Some(params);
        self
    }

    /// The rig model underneath.
    pub fn inner(&self) -> &DynModel<Completion> {
        &self.model
    }

    async fn answer(&self, request: &ChatRequest) -> Result<ChatResponse, BoxError> {
        let rig_request = to_rig(request, &self.settings)?;
        let response = self.model.call(rig_request).await?;
        let mut answer = from_rig(&response);
        if answer.model.is_none() {
            answer.model = Some(self.name.clone());
        }
        Ok(answer)
    }
}

impl ChatModel for RigModel {
    fn chat<'a>(
        &'a self,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChatResponse, BoxError>> {
        Box::pin(self.answer(request))
    }

    fn chat_stream<'a>(
        &'a self,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChatStream<'a>, BoxError>> {
        Box::pin(async move {
            let reply = self.model.stream(to_rig(request, &self.settings)?)?;
            let mut events = super::stream::events(reply);
            // A reply that fails before its first event is a failed call, not an interrupted
            // answer.
            match events.next().await {
                Some(Err(error)) => Err(error),
                Some(Ok(first)) => {
                    let first = futures_util::stream::iter([Ok(first)]);
                    Ok(Box::pin(first.chain(events)) as ChatStream<'a>)
                }
                None => Ok(events),
            }
        })
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn provider_name(&self) -> Option<&str> {
        Some(self.model.name())
    }
}
