//! A rig model that survives transient provider failures, for rig's own agent loop:
//! [`recovering`]. rig's loop ends the run at the first failed model call and no hook sees it,
//! so recovery has to sit below the agent, in the model it is given.
//!
//! rig's transports cannot be wrapped from outside (an exchange's observation and a reply's
//! frames are private to rig), so the recovering model is a small wire of its own: its payload
//! is the request as rig prepared it, its transport calls the wrapped model (retrying under our
//! classification) and hands back the whole answer as one frame, which its decoder writes into
//! rig's reply as rig's own scripted wire does.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use rig_core::completion::AssistantContent;
use rig_core::completion::{
    Accepts, CompletionRequest, CompletionResponse, ReplayTarget,
    options::{Mapping, OptionFields, OptionMap},
};
use rig_core::driver::{Exchange, Model, Opened, Opening, Transport};
use rig_core::error::{EncodeError, ProviderError};
use rig_core::message::Api;
use rig_core::operation::{Block, Completion, Finish};
use rig_core::wire::document::{Reassemble, Serves};
use rig_core::wire::{Descriptor, Flow, Mode, Out, Wire, WireEvent};
use rig_core::{DynModel, wire::Decoder};

use crate::classify::{ErrorKind, classify};
use crate::events::{Event, ModelLayer, count_outcome, emit_to};
use crate::executor::RunContext;
use crate::llm::trigger::Triggers;
use crate::retry::{RetrySchedule, retry_after_failure};

/// The wire format the recovering wire names in rig's history.
const API: Api = Api::from_static("agent_errors.recovering");

/// `model`, retrying what can succeed on retry, as a rig `DynModel<Completion>` for
/// `rig_agent::AgentBuilder::new`: the way to make a rig agent's model calls survive transient
/// provider failures, which rig's own loop does not retry.
///
/// A failed call is classified as [`RigModel`](super::RigModel)'s failures are (status,
/// `Retry-After`, machine code, never the body) and called again while it is retryable and
/// `schedule` has a delay left: 408, 429 (waiting as the server asked, up to 5 minutes), 5xx
/// but 501, 529, a broken connection or a reply cut short. 400, 401, 403, 404 and a used-up
/// quota come back at once, and so does the last failure once the schedule is spent, ending
/// rig's run as before. Each call is whole: a streamed rig run receives the answer in one piece.
///
/// What is not kept: provider items that only the wrapped provider understands (reasoning
/// signatures, server-side item ids) are dropped from the history rig sends, since the history
/// is adapted for this wire before the wrapped model adapts it again.
///
/// [`RecoveringModel`] adds fallback models and spends a run's retry allowance.
///
/// # Examples
///
/// ```
/// use agent_errors::retry::RetrySchedule;
/// use agent_errors::rig::recovering;
/// use rig_core::test_utils::{MockCompletionModel, MockTurn};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let provider = MockCompletionModel::from_turns([MockTurn::text("hello")]);
/// let model = recovering(provider, RetrySchedule::attempts(4)?);
/// let agent = rig_agent::AgentBuilder::new(model).build();
/// assert_eq!(agent.prompt("hi").await?.output(), "hello");
/// # Ok(())
/// # }
/// ```
pub fn recovering(
    model: impl Into<DynModel<Completion>>,
    schedule: RetrySchedule,
) -> DynModel<Completion> {
    RecoveringModel::new(model, schedule).into()
}

/// A rig model that survives provider failures inside rig's own loop: [`recovering`]'s retries,
/// then a chain of fallback models, each tried with the same retries when the one before it
/// failed for good, and, in a run, every retry spending the run's retry allowance and every
/// retry and switch an event of the run. It is a rig `DynModel<Completion>` (`.into()`, or
/// straight into [`RigGuard::agent`](super::RigGuard::agent) and `AgentBuilder::new`).
///
/// The next model is asked when a model's last failure is anything but an invalid request (a
/// 400, which no other model could serve either): an outage that outlasted the retries, a
/// used-up quota, refused credentials, an unknown model. Which model answered is on rig's
/// response; each switch is an `llm_fallback` event naming both models.
///
/// In a run ([`in_run`](RecoveringModel::in_run), which
/// [`RigGuard::recovering`](super::RigGuard::recovering) sets), each retry spends one of the
/// run's retries ([`Limits::max_retries`](crate::Limits), the allowance the guarded tools'
/// retries spend too) and with none left the failure is final; each retry is an `llm_retry`
/// event of the run and each switch an `llm_fallback` event, on the run's report
/// ([`RunContext::events`](crate::RunContext::events)).
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use agent_errors::RunContext;
/// use agent_errors::retry::RetrySchedule;
/// use agent_errors::rig::RecoveringModel;
/// use rig_core::test_utils::{MockCompletionModel, MockTurn};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let primary = MockCompletionModel::from_turns([]); // has nothing to say: fails
/// let backup = MockCompletionModel::from_turns([MockTurn::text("hello from the backup")]);
/// let model = RecoveringModel::new(primary, RetrySchedule::attempts(2)?)
///     .fallback(backup)
///     .in_run(Arc::new(RunContext::new()));
/// let agent = rig_agent::AgentBuilder::new(model).build();
/// assert_eq!(agent.prompt("hi").await?.output(), "hello from the backup");
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RecoveringModel {
    models: Vec<DynModel<Completion>>,
    schedule: RetrySchedule,
    run: Option<Arc<RunContext>>,
}

impl fmt::Debug for RecoveringModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let models: Vec<&str> = self.models.iter().map(model_name).collect();
        f.debug_struct("RecoveringModel")
            .field("models", &models)
            .field("schedule", &self.schedule)
            .field("in_run", &self.run.is_some())
            .finish()
    }
}

impl RecoveringModel {
    /// `model`, retried under `schedule`.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::retry::RetrySchedule;
    /// use agent_errors::rig::RecoveringModel;
    /// use rig_core::test_utils::MockCompletionModel;
    ///
    /// let model: rig_core::DynModel<_> =
    ///     RecoveringModel::new(MockCompletionModel::from_turns([]), RetrySchedule::attempts(3).unwrap()).into();
    /// # let _ = model;
    /// ```
    pub fn new(model: impl Into<DynModel<Completion>>, schedule: RetrySchedule) -> Self {
        RecoveringModel {
            models: vec![model.into()],
            schedule,
            run: None,
        }
    }

    /// Asks `model` (with the same retries) once the models before it failed for good.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::retry::RetrySchedule;
    /// use agent_errors::rig::RecoveringModel;
    /// use rig_core::test_utils::MockCompletionModel;
    ///
    /// let chain = RecoveringModel::new(MockCompletionModel::from_turns([]), RetrySchedule::attempts(3).unwrap())
    ///     .fallback(MockCompletionModel::from_turns([]))
    ///     .fallback(MockCompletionModel::from_turns([]));
    /// # let _ = chain;
    /// ```
    #[must_use]
    pub fn fallback(mut self, model: impl Into<DynModel<Completion>>) -> Self {
        self.models.push(model.into());
        self
    }

    /// Spends `run`'s retry allowance and records each retry and switch on its events.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use agent_errors::{Limits, RunContext};
    /// use agent_errors::retry::RetrySchedule;
    /// use agent_errors::rig::RecoveringModel;
    /// use rig_core::test_utils::MockCompletionModel;
    ///
    /// let run = Arc::new(RunContext::new().with_limits(Limits::default().with_max_retries(2)));
    /// let model = RecoveringModel::new(MockCompletionModel::from_turns([]), RetrySchedule::attempts(5).unwrap())
    ///     .in_run(run);
    /// # let _ = model;
    /// ```
    #[must_use]
    pub fn in_run(mut self, run: Arc<RunContext>) -> Self {
        self.run = Some(run);
        self
    }
}

impl From<RecoveringModel> for DynModel<Completion> {
    fn from(recovering: RecoveringModel) -> Self {
        let primary = &recovering.models[0];
        let wire = RecoveringWire {
            name: primary.name().to_owned(),
            id: primary.id().map(str::to_owned),
            capabilities: primary.capabilities(),
        };
        let transport = RecoveringTransport {
            models: recovering.models.into(),
            schedule: recovering.schedule,
            run: recovering.run,
        };
        Model::new(wire, transport).erase()
    }
}

/// How a model is named in events: the model it addresses, else its provider.
fn model_name(model: &DynModel<Completion>) -> &str {
    model.id().unwrap_or_else(|| model.name())
}

/// The recovering wire: the wrapped model's name, id and capabilities; requests pass as they
/// are.
#[derive(Debug, Clone)]
struct RecoveringWire {
    name: String,
    id: Option<String>,
    capabilities: rig_core::wire::Capabilities,
}

impl ReplayTarget for RecoveringWire {
    fn api(&self) -> Api {
        API
    }

    fn provider(&self) -> &str {
        &self.name
    }

    fn model(&self) -> &str {
        self.id.as_deref().unwrap_or_default()
    }

    fn accepts(&self, _model: &str) -> Accepts {
        Accepts::ALL
    }

    /// Every option passes through untouched: the wrapped model maps (or refuses) it.
    fn map_options(&self, _request: &CompletionRequest, fields: OptionFields<'_>) -> OptionMap {
        let OptionFields {
            reasoning,
            cache,
            service_tier,
            verbosity,
            parallel_tool_calls,
            top_p,
            seed,
            stop,
        } = fields;
        let passed = |set: bool| match set {
            true => Mapping::Omit("the wrapped model maps it"),
            false => Mapping::Nothing,
        };
        OptionMap {
            reasoning: passed(reasoning.is_some()),
            cache: passed(cache.is_some()),
            service_tier: passed(service_tier.is_some()),
            verbosity: passed(verbosity.is_some()),
            parallel_tool_calls: passed(parallel_tool_calls.is_some()),
            top_p: passed(top_p.is_some()),
            seed: passed(seed.is_some()),
            stop: passed(!stop.is_empty()),
        }
    }

    // The wrapped model's answer states its own finish reason when it has one.
    fn states_finish_reason(&self) -> bool {
        false
    }
}

impl Wire for RecoveringWire {
    type Op = Completion;
    type Payload = CompletionRequest;
    type Frame = Answer;
    type Decoder<'id> = AnswerDecoder<'id>;
    type Reassembler = AnswerDocument;

    fn describe(&self) -> Descriptor<'_> {
        Descriptor::new(&self.name)
            .model(self.id.as_deref())
            .capabilities(self.capabilities)
            .replay(self)
    }

    fn encode(
        &self,
        request: CompletionRequest,
        _mode: Mode,
    ) -> Result<CompletionRequest, EncodeError> {
        Ok(request)
    }

    fn decoder<'id>(&self) -> AnswerDecoder<'id> {
        AnswerDecoder(PhantomData)
    }
}

/// The wrapped model's whole answer: the one frame of a recovering reply.
struct Answer(Box<CompletionResponse>);

/// Rebuilds the reply's document: the wrapped model's own.
#[derive(Debug, Default)]
struct AnswerDocument(Option<serde_json::Value>);

impl Serves<Completion> for AnswerDocument {}

impl Reassemble<Answer> for AnswerDocument {
    fn absorb(&mut self, frame: &Answer) {
        self.0.get_or_insert_with(|| frame.0.raw.clone());
    }

    fn finish(self) -> serde_json::Value {
        self.0.unwrap_or(serde_json::Value::Null)
    }
}

/// Writes the wrapped model's answer into rig's reply, block by block.
struct AnswerDecoder<'id>(PhantomData<fn(&'id ()) -> &'id ()>);

impl<'id> Decoder<'id, Completion, Answer> for AnswerDecoder<'id> {
    type Event = Answer;

    fn classify(&self, frame: Answer) -> WireEvent<Answer> {
        WireEvent::Known(frame)
    }

    fn decode(
        &mut self,
        answer: Answer,
        mut out: Out<'id, Completion>,
    ) -> Result<Flow, ProviderError> {
        let response = *answer.0;
        for block in &response.choice {
            write_block(block, &mut out)?;
        }
        Ok(out.end(Finish {
            usage: response.usage,
            reason: response.finish_reason(),
            response_id: response.response_id().map(str::to_owned),
            model: response.model().map(str::to_owned),
            error: response.error.clone(),
        }))
    }
}

/// Writes one block of the answer as a whole item. Text and tool calls are the answer; reasoning,
/// images and provider-only items are not carried over (see [`recovering`]).
// The error type is rig's, as every decoder's is.
#[allow(clippy::result_large_err)]
fn write_block(
    block: &AssistantContent,
    out: &mut Out<'_, Completion>,
) -> Result<(), ProviderError> {
    let (block, text) = match block {
        AssistantContent::Text(text) => (Block::Text, text.text.clone()),
        AssistantContent::ToolCall(call) => (
            Block::Call {
                id: call.id.clone(),
                name: call.function.name.clone(),
            },
            call.function.invalid_arguments.clone().unwrap_or_else(|| {
                serde_json::Value::Object(call.function.arguments.clone()).to_string()
            }),
        ),
        _ => return Ok(()),
    };
    let index = out.fresh_index();
    out.whole(index, block, serde_json::Value::Null, &text)
}

/// Why a chain of rig models moves on, as [`FallbackModel`](crate::llm::FallbackModel)'s
/// triggers name it: the chain moves on after any failure but an invalid request.
const ANY_FAILURE: Triggers = Triggers {
    overload: true,
    rate_limit: Some(std::time::Duration::MAX),
    outage: true,
    auth_or_config: true,
    bad_answer: false,
};

/// Calls the wrapped models in turn, each retried under our classification.
#[derive(Clone)]
struct RecoveringTransport {
    models: Arc<[DynModel<Completion>]>,
    schedule: RetrySchedule,
    run: Option<Arc<RunContext>>,
}

impl RecoveringTransport {
    /// The answer of the first model that gives one; the last failure when none does, or when a
    /// failure is one no other model could serve (an invalid request).
    async fn answer(
        &self,
        request: CompletionRequest,
    ) -> Result<CompletionResponse, ProviderError> {
        let mut models = self.models.iter().peekable();
        loop {
            let model = models.next().ok_or_else(no_model)?;
            let (error, attempts) = match self.retried(model, &request).await {
                Ok(response) => return Ok(response),
                Err(failed) => failed,
            };
            let next = models
                .peek()
                .filter(|_| classify(&error).kind != ErrorKind::Validation);
            let Some(next) = next else {
                return Err(error);
            };
            let (from, to) = (model_name(model).to_owned(), model_name(next).to_owned());
            self.emit(Event::LlmFallback {
                from,
                to,
                trigger: ANY_FAILURE.on_failure(&error).unwrap_or("failure"),
                attempts,
                kind: classify(&error).kind,
            });
        }
    }

    /// One model's answer, its retryable failures called again while the schedule (and the
    /// run's allowance, in a run) has a retry left; else its last failure and the calls made.
    async fn retried(
        &self,
        model: &DynModel<Completion>,
        request: &CompletionRequest,
    ) -> Result<CompletionResponse, (ProviderError, u32)> {
        let first = match model.call(request.clone()).await {
            Ok(response) => return Ok(response),
            Err(first) => first,
        };
        let mut last = None;
        let allowance = self.run.as_ref().map(|run| Arc::clone(run.retries()));
        let delays = self.schedule.delays().map_while(move |delay| {
            let allowed = allowance.as_ref().is_none_or(|left| left.try_spend());
            allowed.then_some(delay)
        });
        let retried = retry_after_failure(
            delays,
            first,
            || model.call(request.clone()),
            |error| classify(error),
            |_, notice| {
                last = Some(notice.classification.kind);
                self.emit(Event::LlmRetry {
                    layer: ModelLayer::Rig,
                    attempt: notice.attempt,
                    delay: notice.delay,
                    kind: notice.classification.kind,
                });
            },
        )
        .await;
        match retried {
            Ok(response) => {
                if let Some(kind) = last {
                    count_outcome(ModelLayer::Rig, true, kind);
                }
                Ok(response)
            }
            Err(failure) => {
                count_outcome(ModelLayer::Rig, false, failure.classification.kind);
                Err((failure.error, failure.attempts))
            }
        }
    }

    /// Records `event` on the run's report, or, outside a run, traces and counts it.
    fn emit(&self, event: Event) {
        match &self.run {
            Some(run) => run.events().emit(event),
            None => emit_to(event, [None, None]),
        }
    }
}

/// The failure of a chain with no model: impossible, since a chain starts with one.
fn no_model() -> ProviderError {
    ProviderError::Provider("a recovering model with no model to call".to_owned())
}

impl Transport<RecoveringWire> for RecoveringTransport {
    fn send(&self, request: CompletionRequest, _exchange: Exchange) -> Opening<Answer> {
        let transport = self.clone();
        Opening::new(async move {
            let response = transport.answer(request).await?;
            let request_id = response.provider_request_id.clone();
            Ok(
                Opened::new(futures_util::stream::iter([Ok(Answer(Box::new(response)))]))
                    .with_request_id(request_id),
            )
        })
    }
}
