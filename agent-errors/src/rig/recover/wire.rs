//! The recovering model's wire: requests pass to the wrapped model as rig prepared them, and
//! the wrapped model's whole answer comes back as one frame that the decoder writes into rig's
//! reply block by block.

use std::marker::PhantomData;

use rig_core::completion::AssistantContent;
use rig_core::completion::{
    Accepts, CompletionRequest, CompletionResponse, ReplayTarget,
    options::{Mapping, OptionFields, OptionMap},
};
use rig_core::error::{EncodeError, ProviderError};
use rig_core::message::Api;
use rig_core::operation::{Block, Completion, Finish};
use rig_core::wire::document::{Reassemble, Serves};
use rig_core::wire::{Descriptor, Flow, Mode, Out, Wire, WireEvent};
use rig_core::{DynModel, wire::Decoder};

/// The wire format the recovering wire names in rig's history.
const API: Api = Api::from_static("agent_errors.recovering");

/// The recovering wire: the wrapped model's name, id and capabilities; requests pass as they
/// are.
#[derive(Debug, Clone)]
pub(super) struct RecoveringWire {
    name: String,
    id: Option<String>,
    capabilities: rig_core::wire::Capabilities,
}

impl RecoveringWire {
    /// The wire of a chain whose first model is `primary`: named as it is.
    pub(super) fn like(primary: &DynModel<Completion>) -> Self {
        RecoveringWire {
            name: primary.name().to_owned(),
            id: primary.id().map(str::to_owned),
            capabilities: primary.capabilities(),
        }
    }
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
pub(super) struct Answer(pub(super) Box<CompletionResponse>);

/// Rebuilds the reply's document: the wrapped model's own.
#[derive(Debug, Default)]
pub(super) struct AnswerDocument(Option<serde_json::Value>);

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
pub(super) struct AnswerDecoder<'id>(PhantomData<fn(&'id ()) -> &'id ()>);

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
/// images and provider-only items are not carried over (see [`RecoveringModel`](super::RecoveringModel)).
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
