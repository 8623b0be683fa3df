//! A rig model that survives transient provider failures, for rig's own agent loop:
//! [`recovering`]. rig's loop ends the run at the first failed model call and no hook sees it,
//! so recovery has to sit below the agent, in the model it is given.
//!
//! rig's transports cannot be wrapped from outside (an exchange's observation and a reply's
//! frames are private to rig), so the recovering model is a small wire of its own: its payload
//! is the request as rig prepared it, its transport calls the wrapped model (retrying under our
//! classification) and hands back the whole answer as one frame, which its decoder writes into
//! rig's reply as rig's own scripted wire does.

use std::marker::PhantomData;

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

use crate::classify::classify;
use crate::events::{Event, EventSink, ModelLayer, count_outcome, emit_to};
use crate::executor::RunContext;
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
    recovering_with(model, schedule, EventSink::default())
}

/// [`recovering`] for the run `run`: each retry is an `llm_retry` event (layer `rig`) on the
/// run's report ([`RunContext::events`]) as well as a `tracing` event and a count, so the model
/// retries of a rig-loop run are on the same report as its tools' recovery when the
/// [`GuardedTool`](super::GuardedTool)s share `run`.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use agent_errors::{Event, RunContext};
/// use agent_errors::retry::RetrySchedule;
/// use agent_errors::rig::recovering_for;
/// use rig_core::test_utils::{MockCompletionModel, MockTurn};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let run = Arc::new(RunContext::new());
/// let provider = MockCompletionModel::from_turns([MockTurn::text("hello")]);
/// let model = recovering_for(provider, RetrySchedule::attempts(4)?, &run);
/// let agent = rig_agent::AgentBuilder::new(model).build();
/// assert_eq!(agent.prompt("hi").await?.output(), "hello");
/// let retries = run.events().snapshot().iter().filter(|e| matches!(e, Event::LlmRetry { .. })).count();
/// assert_eq!(retries, 0); // nothing failed
/// # Ok(())
/// # }
/// ```
pub fn recovering_for(
    model: impl Into<DynModel<Completion>>,
    schedule: RetrySchedule,
    run: &RunContext,
) -> DynModel<Completion> {
    recovering_with(model, schedule, run.event_sink())
}

fn recovering_with(
    model: impl Into<DynModel<Completion>>,
    schedule: RetrySchedule,
    events: EventSink,
) -> DynModel<Completion> {
    let model = model.into();
    let wire = RecoveringWire {
        name: model.name().to_owned(),
        id: model.id().map(str::to_owned),
        capabilities: model.capabilities(),
    };
    let transport = RecoveringTransport {
        model,
        schedule,
        events,
    };
    Model::new(wire, transport).erase()
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

/// Calls the wrapped model, retrying under our classification.
#[derive(Clone)]
struct RecoveringTransport {
    model: DynModel<Completion>,
    schedule: RetrySchedule,
    /// The run's log, when the model was made for one.
    events: EventSink,
}

impl Transport<RecoveringWire> for RecoveringTransport {
    fn send(&self, request: CompletionRequest, _exchange: Exchange) -> Opening<Answer> {
        let (model, schedule) = (self.model.clone(), self.schedule.clone());
        let events = self.events.clone();
        Opening::new(async move {
            let response = match model.call(request.clone()).await {
                Ok(response) => response,
                Err(first) => retry(&model, &request, &schedule, &events, first).await?,
            };
            let request_id = response.provider_request_id.clone();
            Ok(
                Opened::new(futures_util::stream::iter([Ok(Answer(Box::new(response)))]))
                    .with_request_id(request_id),
            )
        })
    }
}

/// The wrapped model called again after its first failure `first`, each retry an `llm_retry`
/// event (layer `rig`) and the end of it counted as recovered or given up.
async fn retry(
    model: &DynModel<Completion>,
    request: &CompletionRequest,
    schedule: &RetrySchedule,
    events: &EventSink,
    first: ProviderError,
) -> Result<CompletionResponse, ProviderError> {
    let mut last = None;
    let retried = retry_after_failure(
        schedule.delays(),
        first,
        || model.call(request.clone()),
        |error| classify(error),
        |_, notice| {
            last = Some(notice.classification.kind);
            let event = Event::LlmRetry {
                layer: ModelLayer::Rig,
                attempt: notice.attempt,
                delay: notice.delay,
                kind: notice.classification.kind,
            };
            emit_to(event, [events.log(), None]);
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
            Err(failure.into_error())
        }
    }
}
