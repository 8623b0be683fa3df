//! The reacting model: reads the transcript it is sent and answers by fixed rules, with seeded
//! habits (a mistake in its first arguments, pushing on past a failure), the same for every
//! strategy. Its answers go through the testing kit's `ScriptedModel`, which records every
//! request (for the secret scan) and counts the calls.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use agent_errors::llm::Usage;
use agent_errors::stream::{ChatStream, StreamEvent, response_events, stream_of};
use agent_errors::testing::{Reply, ScriptedModel};
use agent_errors::{BoxError, ChatModel, ChatRequest, ChatResponse, Message, ToolCall};
use futures_util::future::BoxFuture;
use serde_json::Value;

use crate::faults::{CANARY_CORE, FaultPlan};
use crate::tasks::{Task, broken_args, compose_answer};

/// Calls of one step (the alternative's included) before the model stops trying it.
const MAX_TRIES: u32 = 3;
/// With an alternative tool: calls of the first before switching, and of both before stopping.
const SWITCH_AFTER: u32 = 2;
const MAX_TRIES_WITH_ALTERNATIVE: u32 = 4;

/// What the model says it could not do: not a success, and not a wrong answer either.
pub(crate) const GAVE_UP: &str = "I could not complete the task";

/// Stands in for a value the model never got: an answer containing it is built on an error.
const GUESSED: &str = "(unknown, assumed fine)";

/// Which model of a run this is: only the primary suffers a provider outage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Primary,
    Backup,
}

/// A model that reacts to what it sees.
#[derive(Clone)]
pub(crate) struct ReactingModel {
    kit: ScriptedModel,
    task: Arc<Task>,
    plan: FaultPlan,
    role: Role,
    repeats: Arc<Mutex<HashMap<usize, u32>>>,
    tokens: Arc<AtomicU64>,
}

impl std::fmt::Debug for ReactingModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReactingModel")
            .field("role", &self.role)
            .field("calls", &self.calls())
            .finish_non_exhaustive()
    }
}

impl ReactingModel {
    pub(crate) fn new(task: Arc<Task>, plan: FaultPlan, role: Role) -> Self {
        let name = match role {
            Role::Primary => "primary",
            Role::Backup => "backup",
        };
        ReactingModel {
            kit: ScriptedModel::named(name),
            task,
            plan,
            role,
            repeats: Arc::default(),
            tokens: Arc::default(),
        }
    }

    /// Calls made, failed ones included.
    pub(crate) fn calls(&self) -> usize {
        self.kit.calls()
    }

    /// Tokens billed: input and output of every call that answered (a cut answer bills its
    /// input).
    pub(crate) fn tokens(&self) -> u64 {
        self.tokens.load(Ordering::Relaxed)
    }

    /// Distinct messages it was sent that carry a planted secret.
    pub(crate) fn secrets_seen(&self) -> Vec<String> {
        let mut seen: Vec<String> = self
            .kit
            .requests()
            .iter()
            .flat_map(|r| r.messages.iter())
            .filter_map(|m| match m {
                Message::Tool(result) if result.content.contains(CANARY_CORE) => {
                    Some(format!("{}:{}", result.call_id, result.content))
                }
                Message::User { content } | Message::System { content }
                    if content.contains(CANARY_CORE) =>
                {
                    Some(content.clone())
                }
                _ => None,
            })
            .collect();
        seen.sort();
        seen.dedup();
        seen
    }

    /// The last `n` messages of the last request it was sent, one line each, cut at 240
    /// characters: what the model read before it answered (for `--misses`).
    pub(crate) fn last_messages(&self, n: usize) -> Vec<String> {
        let requests = self.kit.requests();
        let Some(last) = requests.last() else {
            return Vec::new();
        };
        let skip = last.messages.len().saturating_sub(n);
        last.messages[skip..]
            .iter()
            .map(|m| format!("{m:?}").chars().take(240).collect())
            .collect()
    }

    /// This call's fault, if any, and otherwise the answer; counts the call's place.
    fn next(&self, request: &ChatRequest, streaming: bool) -> Next {
        let place = request.messages.len();
        let repeat = {
            let mut repeats = self.repeats.lock().unwrap_or_else(|p| p.into_inner());
            let n = repeats.entry(place).or_default();
            *n += 1;
            *n - 1
        };
        if self.role == Role::Primary && self.plan.provider_down() {
            return Next::Fail(crate::faults::ModelFault::Overloaded.error().into());
        }
        if let Some(fault) = self.plan.model_fault(place, repeat) {
            return Next::Fail(fault.error().into());
        }
        let input = tokens_of(request);
        let response = decide(&self.task, &self.plan, &request.messages, &self.kit);
        if streaming && self.plan.stream_cut(place, repeat) {
            self.tokens.fetch_add(input, Ordering::Relaxed);
            return Next::Cut(response);
        }
        let output = response_tokens(&response);
        self.tokens.fetch_add(input + output, Ordering::Relaxed);
        Next::Answer(response.with_usage(Usage::new(input, output)))
    }

    async fn through_kit(
        &self,
        request: &ChatRequest,
        reply: Reply,
    ) -> Result<ChatResponse, BoxError> {
        self.kit.push(reply);
        self.kit.chat(request).await
    }
}

enum Next {
    Answer(ChatResponse),
    Fail(BoxError),
    Cut(ChatResponse),
}

impl ChatModel for ReactingModel {
    fn chat<'a>(
        &'a self,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChatResponse, BoxError>> {
        Box::pin(async move {
            let reply = match self.next(request, false) {
                Next::Answer(response) | Next::Cut(response) => Reply::response(response),
                Next::Fail(error) => Reply::error(error),
            };
            self.through_kit(request, reply).await
        })
    }

    fn chat_stream<'a>(
        &'a self,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChatStream<'a>, BoxError>> {
        Box::pin(async move {
            match self.next(request, true) {
                Next::Answer(response) => {
                    let response = self.through_kit(request, Reply::response(response)).await?;
                    Ok(stream_of(
                        response_events(response).into_iter().map(Ok).collect(),
                    ))
                }
                Next::Fail(error) => self
                    .through_kit(request, Reply::error(error))
                    .await
                    .map(|_| stream_of(Vec::new())),
                Next::Cut(response) => {
                    let response = self.through_kit(request, Reply::response(response)).await?;
                    Ok(cut_stream(response))
                }
            }
        })
    }

    fn name(&self) -> &str {
        self.kit.name()
    }
}

/// The first half of an answer's events, then the connection closing.
fn cut_stream<'a>(response: ChatResponse) -> ChatStream<'a> {
    let mut events: Vec<Result<StreamEvent, BoxError>> =
        vec![Ok(StreamEvent::TextDelta("Working on it".to_owned()))];
    let whole = response_events(response);
    events.extend(
        whole
            .into_iter()
            .take(2)
            .filter(|e| !matches!(e, StreamEvent::TextDelta(_)))
            .map(Ok),
    );
    events.push(Err(Box::new(std::io::Error::new(
        std::io::ErrorKind::UnexpectedEof,
        "connection closed mid-answer",
    ))));
    stream_of(events)
}

fn tokens_of(request: &ChatRequest) -> u64 {
    let chars: usize = request
        .messages
        .iter()
        .map(|m| match m {
            Message::System { content } | Message::User { content } => content.len(),
            Message::Assistant {
                content,
                tool_calls,
            } => {
                content.as_ref().map_or(0, String::len)
                    + tool_calls
                        .iter()
                        .map(|c| c.name.len() + c.arguments.len())
                        .sum::<usize>()
            }
            Message::Tool(result) => result.content.len(),
            _ => 0,
        })
        .sum();
    (chars / 4) as u64 + 8
}

fn response_tokens(response: &ChatResponse) -> u64 {
    let chars = response.text.as_ref().map_or(0, String::len)
        + response
            .tool_calls
            .iter()
            .map(|c| c.name.len() + c.arguments.len())
            .sum::<usize>();
    (chars / 4) as u64 + 4
}

/// Where the task stands, as the transcript shows it.
#[derive(Debug, Default, Clone)]
struct StepState {
    /// The value the step gave, once a call of it succeeded.
    value: Option<String>,
    /// Calls of the step answered so far.
    tries: u32,
    /// The last answer was an error, with this text.
    last_error: Option<String>,
    /// The last call sent broken arguments (the model knows its own slips).
    last_was_broken: bool,
    /// Whether the alternative tool was called.
    used_alternative: bool,
}

fn read_transcript(task: &Task, messages: &[Message]) -> (Vec<StepState>, usize) {
    let mut states = vec![StepState::default(); task.steps.len()];
    let mut calls: HashMap<&str, (usize, bool)> = HashMap::new();
    let mut furthest_called = 0;
    for message in messages {
        match message {
            Message::Assistant { tool_calls, .. } => {
                for call in tool_calls {
                    if let Some(step) = task
                        .steps
                        .iter()
                        .position(|s| s.is_called_by(&call.name, &call.arguments))
                    {
                        let broken = serde_json::from_str::<Value>(&call.arguments).ok()
                            != Some(task.steps[step].args.clone());
                        calls.insert(&*call.id, (step, broken));
                        furthest_called = furthest_called.max(step + 1);
                        if Some(&*call.name) == task.steps[step].alternative {
                            states[step].used_alternative = true;
                        }
                    }
                }
            }
            Message::Tool(result) => {
                let Some(&(step, broken)) = calls.get(&*result.call_id) else {
                    continue;
                };
                let state = &mut states[step];
                state.tries += 1;
                state.last_was_broken = broken;
                if result.is_error {
                    state.last_error = Some(result.content.to_lowercase());
                } else {
                    state.value = Some(result.content.clone());
                    state.last_error = None;
                }
            }
            _ => {}
        }
    }
    (states, furthest_called)
}

/// Failures no second call of the same arguments can change, as their text shows them.
fn looks_permanent(error: &str) -> bool {
    [
        "http 401",
        "http 403",
        "http 404",
        "http 400",
        "unauthorized",
        "forbidden",
        "not found",
        "not_found",
        "\"auth\"",
        "\"validation\"",
        "invalid request",
    ]
    .iter()
    .any(|needle| error.contains(needle))
}

/// The model's next answer, by its rules.
fn decide(
    task: &Task,
    plan: &FaultPlan,
    messages: &[Message],
    kit: &ScriptedModel,
) -> ChatResponse {
    let (states, furthest_called) = read_transcript(task, messages);
    // A step left behind without a value was pushed past: its value was made up.
    let first_open =
        (0..task.steps.len()).find(|&i| states[i].value.is_none() && i + 1 >= furthest_called);
    let Some(step) = first_open else {
        return ChatResponse::text(final_answer(&states));
    };
    let state = &states[step];
    let spec = &task.steps[step];
    let call = |tool: &str, args: String| {
        ChatResponse::tool_calls(vec![ToolCall::new(kit.next_call_id(), tool, args)])
    };
    if state.tries == 0 && state.last_error.is_none() {
        let args = if plan.bad_args(step) {
            broken_args(&spec.args)
        } else {
            spec.args.to_string()
        };
        return call(spec.tool, args);
    }
    let error = state.last_error.as_deref().unwrap_or_default();
    // Its own slip, told back as such, it corrects; a slip that reached the service and got a
    // status back is a failure like any other.
    if state.last_was_broken && !error.contains("http 4") {
        return call(spec.tool, spec.args.to_string());
    }
    let limit = if spec.alternative.is_some() {
        MAX_TRIES_WITH_ALTERNATIVE
    } else {
        MAX_TRIES
    };
    if looks_permanent(error) || state.tries >= limit {
        if !plan.guesses(step) {
            return ChatResponse::text(format!("{GAVE_UP}: step {} failed.", step + 1));
        }
        return match task.steps.get(step + 1) {
            Some(next) => {
                let args = if plan.bad_args(step + 1) {
                    broken_args(&next.args)
                } else {
                    next.args.to_string()
                };
                call(next.tool, args)
            }
            None => {
                let mut guessed = states.clone();
                guessed[step].value = Some(GUESSED.to_owned());
                ChatResponse::text(final_answer(&guessed))
            }
        };
    }
    match spec.alternative {
        Some(alternative) if state.used_alternative || state.tries >= SWITCH_AFTER => {
            call(alternative, spec.args.to_string())
        }
        _ => call(spec.tool, spec.args.to_string()),
    }
}

fn final_answer(states: &[StepState]) -> String {
    let values: Vec<String> = states
        .iter()
        .map(|s| s.value.clone().unwrap_or_else(|| GUESSED.to_owned()))
        .collect();
    compose_answer(&values)
}
