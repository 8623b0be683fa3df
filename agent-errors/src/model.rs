//! The [`ChatModel`] trait: anything that answers a [`ChatRequest`], whole or streamed.

use std::sync::Arc;

use crate::chat::{ChatRequest, ChatResponse};
use crate::error::{BoxError, BoxFuture};
use crate::stream::{ChatStream, response_events, stream_of};

/// A chat model: anything that answers a [`ChatRequest`].
///
/// The providers (`openai`) and the testing kit's scripted model implement it; so can you, for
/// a provider this crate does not ship or a model in-process:
///
/// # Examples
///
/// ```
/// use agent_errors::{
///     Agent, BoxError, ChatModel, ChatRequest, ChatResponse, Message, call::BoxFuture,
/// };
///
/// /// Answers every question by repeating the user's last words.
/// struct Echo;
///
/// impl ChatModel for Echo {
///     fn chat<'a>(&'a self, request: &'a ChatRequest) -> BoxFuture<'a, Result<ChatResponse, BoxError>> {
///         Box::pin(async move {
///             let last_user_text = request.messages.iter().rev().find_map(|m| match m {
///                 Message::User { content } => Some(content.clone()),
///                 _ => None,
///             });
///             // An error here goes to `on_llm_error`, unchanged and downcastable.
///             let text = last_user_text.ok_or("no user message")?;
///             Ok(ChatResponse::text(text))
///         })
///     }
///
///     fn name(&self) -> &str {
///         "echo"
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let agent = Agent::builder("parrot").model(Echo).build()?;
/// assert_eq!(agent.run("hello").await?, "hello");
/// # Ok(())
/// # }
/// ```
///
/// Errors are returned as they are, boxed: the agent hands the very same error to
/// `on_llm_error` and, on `Rethrow`, back to the caller, so it can be downcast.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a `ChatModel`",
    note = "a rig model (any of rig's providers) goes in as `agent_errors::rig::RigModel::new(model)` \
            (feature `rig`); an OpenAI or Anthropic model is `agent_errors::openai::OpenAiModel` / \
            `agent_errors::anthropic::AnthropicModel`; a model of your own implements `ChatModel`"
)]
pub trait ChatModel: Send + Sync + 'static {
    /// Answers one request.
    fn chat<'a>(
        &'a self,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChatResponse, BoxError>>;

    /// Answers one request as a stream of events. Models that cannot stream keep this default:
    /// one call to [`chat`](ChatModel::chat), replayed as events.
    ///
    /// An error from the returned future is a call that failed before any output; errors inside
    /// the stream come after output began (see [`crate::stream`]).
    fn chat_stream<'a>(
        &'a self,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChatStream<'a>, BoxError>> {
        Box::pin(async move {
            let response = self.chat(request).await?;
            Ok(stream_of(
                response_events(response).into_iter().map(Ok).collect(),
            ))
        })
    }

    /// A name for logs and events.
    fn name(&self) -> &str {
        "model"
    }

    /// The provider, as OpenTelemetry's `gen_ai.provider.name` spells it (`openai`,
    /// `anthropic`, ...), when known: it goes on the `chat` spans.
    fn provider_name(&self) -> Option<&str> {
        None
    }
}

/// A model behind a pointer is the model: every method forwards to it. One macro for both
/// pointers, so a method added to the trait is forwarded by both or by neither.
macro_rules! forward_to_pointee {
    ($($pointer:ident),+) => {$(
        impl<M: ChatModel + ?Sized> ChatModel for $pointer<M> {
            fn chat<'a>(
                &'a self,
                request: &'a ChatRequest,
            ) -> BoxFuture<'a, Result<ChatResponse, BoxError>> {
                (**self).chat(request)
            }

            fn chat_stream<'a>(
                &'a self,
                request: &'a ChatRequest,
            ) -> BoxFuture<'a, Result<ChatStream<'a>, BoxError>> {
                (**self).chat_stream(request)
            }

            fn name(&self) -> &str {
                (**self).name()
            }

            fn provider_name(&self) -> Option<&str> {
                (**self).provider_name()
            }
        }
    )+};
}

forward_to_pointee!(Arc, Box);
