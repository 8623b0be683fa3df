//! rig under our policies: a rig provider as our model, rig tools as ours, our policies inside
//! rig's own agent loop. Offline, on rig's own test kit (`MockCompletionModel`, mock tools).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_errors::classify::classify;
use agent_errors::llm::FallbackModel;
use agent_errors::policy::{Action, Policy, PolicyKey};
use agent_errors::prelude::*;
use agent_errors::retry::RetrySchedule;
use agent_errors::rig::{GuardedTool, RecoveringModel, RigModel};
use agent_errors::testing::ScriptedModel;
use agent_errors::{ErrorKind, Registry, RunContext};
use http::{HeaderMap, HeaderValue, StatusCode};
use rig_core::ProviderResponseError;
use rig_core::completion::CompletionRequest;
use rig_core::driver::{Exchange, Model, Opening, Transport};
use rig_core::error::ProviderError;
use rig_core::test_utils::{MockCompletionModel, MockFrame, MockRuntime, MockScript, MockTurn};
use rig_core::tool::{Tool, ToolContext, ToolErrorKind, ToolExecutionError};
use tokio::time::Instant;

/// A provider's error reply, as rig's HTTP transport preserves it.
fn reply(status: u16, body: &str) -> ProviderResponseError {
    ProviderResponseError::new(StatusCode::from_u16(status).unwrap(), body)
}

pub(super) fn status(status: u16) -> ProviderError {
    ProviderError::ProviderResponse(reply(status, r#"{"error": {"message": "nope"}}"#))
}

fn rate_limited(retry_after: &str) -> ProviderError {
    let mut headers = HeaderMap::new();
    headers.insert("retry-after", HeaderValue::from_str(retry_after).unwrap());
    ProviderError::ProviderResponse(reply(429, "slow down").with_headers(Some(headers)))
}

fn unauthorized() -> ProviderError {
    ProviderError::InvalidAuthentication(reply(401, "invalid x-api-key"))
}

/// rig's scripted model behind a transport that fails as a provider's HTTP transport would: the
/// n-th call fails with the n-th entry of its script when that is an error, and is answered by
/// the scripted model otherwise. It records the model each request named.
#[derive(Clone)]
pub(super) struct Failing {
    failures: Arc<Mutex<VecDeque<Option<ProviderError>>>>,
    pub(super) calls: Arc<AtomicU32>,
    models: Arc<Mutex<Vec<Option<String>>>>,
    inner: MockRuntime,
}

impl Transport<MockScript> for Failing {
    fn send(&self, request: CompletionRequest, exchange: Exchange) -> Opening<MockFrame> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.models.lock().unwrap().push(request.model.clone());
        match self.failures.lock().unwrap().pop_front().flatten() {
            Some(error) => Opening::failed(error),
            None => self.inner.send(request, exchange),
        }
    }
}

/// A model whose first calls fail with `failures`, then answer `turns`.
pub(super) fn failing(
    failures: impl IntoIterator<Item = ProviderError>,
    turns: impl IntoIterator<Item = MockTurn>,
) -> (Model<MockScript, Failing>, Failing) {
    failing_as(failures.into_iter().map(Some), turns)
}

/// A model whose calls go by `script`: `None` is answered from `turns`, an error fails the call.
pub(super) fn failing_as(
    script: impl IntoIterator<Item = Option<ProviderError>>,
    turns: impl IntoIterator<Item = MockTurn>,
) -> (Model<MockScript, Failing>, Failing) {
    let mock = MockCompletionModel::from_turns(turns);
    let transport = Failing {
        failures: Arc::new(Mutex::new(script.into_iter().collect())),
        calls: Arc::new(AtomicU32::new(0)),
        models: Arc::new(Mutex::new(Vec::new())),
        inner: mock.transport.clone(),
    };
    (Model::new(mock.wire.clone(), transport.clone()), transport)
}

fn retry_three_times() -> impl Fn(
    &agent_errors::run::ModelError,
    u32,
) -> Result<LlmErrorDecision, agent_errors::retry::ZeroAttempts>
+ Send
+ Sync
+ 'static {
    |_, _| LlmErrorDecision::retry(3, Duration::from_millis(500))
}

#[test]
fn provider_errors_are_classified_by_status_headers_and_code_not_text() {
    let cases = [
        (status(503), ErrorKind::Transient, true),
        (status(400), ErrorKind::Validation, false),
        (unauthorized(), ErrorKind::Auth, false),
        (rate_limited("7"), ErrorKind::Quota, true),
        // The code, not the words, says the quota is gone.
        (
            ProviderError::ProviderResponse(reply(
                429,
                r#"{"error": {"code": "insufficient_quota"}}"#,
            )),
            ErrorKind::Quota,
            false,
        ),
        // No status: a gRPC code stands for one.
        (
            ProviderError::ProviderResponse(
                ProviderResponseError::without_status("try later")
                    .with_code(Some("UNAVAILABLE".into())),
            ),
            ErrorKind::Transient,
            true,
        ),
        // A body that says "timed out" is not read: rig's variant says the request was bad.
        (
            ProviderError::request("timed out"),
            ErrorKind::Validation,
            false,
        ),
        (ProviderError::Truncated, ErrorKind::Transient, true),
    ];
    for (error, kind, retryable) in cases {
        let class = classify(&error);
        assert_eq!(
            (class.kind, class.is_retryable()),
            (kind, retryable),
            "{error}"
        );
    }
    assert_eq!(
        classify(&rate_limited("7")).retry_after,
        Some(Duration::from_secs(7))
    );
}

#[tokio::test(start_paused = true)]
async fn a_429_with_retry_after_is_waited_out_as_told_under_on_llm_error() {
    let (model, transport) = failing([rate_limited("7")], [MockTurn::text("ok")]);
    let agent = Agent::builder("a")
        .model(RigModel::new(model))
        .on_llm_error(retry_three_times())
        .build()
        .unwrap();
    let start = Instant::now();
    assert_eq!(agent.run("hi").await.unwrap(), "ok");
    assert_eq!(Instant::now() - start, Duration::from_secs(7));
    assert_eq!(transport.calls.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn a_503_is_retried_and_401_and_400_never_are() {
    let (model, transport) = failing([status(503)], [MockTurn::text("ok")]);
    let agent = Agent::builder("a")
        .model(RigModel::new(model))
        .on_llm_error(retry_three_times())
        .build()
        .unwrap();
    assert_eq!(agent.run("hi").await.unwrap(), "ok");
    assert_eq!(transport.calls.load(Ordering::SeqCst), 2);

    for error in [unauthorized(), status(400)] {
        let (model, transport) = failing([error], [MockTurn::text("never")]);
        let agent = Agent::builder("a")
            .model(RigModel::new(model))
            .on_llm_error(retry_three_times())
            .build()
            .unwrap();
        let err = agent.run("hi").await.unwrap_err();
        assert!(
            err.model_error()
                .and_then(|e| e.downcast_ref::<ProviderError>())
                .is_some(),
            "rig's own error comes back, unchanged: {err:?}"
        );
        assert_eq!(transport.calls.load(Ordering::SeqCst), 1, "{err}");
    }
}

#[tokio::test(start_paused = true)]
async fn fallback_model_switches_across_rig_providers_on_overload_only() {
    let overloaded = || status(529);
    let (primary, primary_calls) = failing([overloaded(), overloaded()], []);
    let (fallback, _) = failing([], [MockTurn::text("from the fallback")]);
    let model = FallbackModel::new(
        RigModel::new(primary).with_model_id("big"),
        RigModel::new(fallback).with_model_id("small"),
    )
    .after(2)
    .unwrap();
    let agent = Agent::builder("a").model(model).build().unwrap();
    assert_eq!(agent.run("hi").await.unwrap(), "from the fallback");
    assert_eq!(primary_calls.calls.load(Ordering::SeqCst), 2);

    // A 401 and a 400 are not the fallback's business: returned at once, never retried.
    for error in [unauthorized(), status(400)] {
        let (primary, primary_calls) = failing([error], []);
        let (fallback, fallback_calls) = failing([], [MockTurn::text("never")]);
        let model = FallbackModel::new(RigModel::new(primary), RigModel::new(fallback));
        let agent = Agent::builder("a")
            .model(model)
            .on_llm_error(retry_three_times())
            .build()
            .unwrap();
        agent.run("hi").await.unwrap_err();
        assert_eq!(primary_calls.calls.load(Ordering::SeqCst), 1);
        assert_eq!(fallback_calls.calls.load(Ordering::SeqCst), 0);
    }
}

#[tokio::test]
async fn requests_and_answers_map_both_ways() {
    let mock = MockCompletionModel::from_turns([
        MockTurn::tool_call("call-1", "add", serde_json::json!({"x": 2, "y": 3})),
        MockTurn::text("5").with_usage(
            rig_core::completion::Usage::new()
                .input_tokens(12)
                .output_tokens(3),
        ),
    ]);
    let agent = Agent::builder("calc")
        .model(RigModel::new(mock.clone()).with_model_id("model-a"))
        .tool(ToolDef::from_rig(rig_agent::test_utils::MockAddTool))
        .build()
        .unwrap();
    assert_eq!(agent.run("2 + 3?").await.unwrap(), "5");

    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].model.as_deref(), Some("model-a"));
    assert_eq!(requests[0].tools[0].name.as_str(), "add");
    // The second request carries the call and its result, answered by id.
    let history = serde_json::to_string(&requests[1].chat_history).unwrap();
    assert!(history.contains("call-1"), "{history}");
}

/// A rig tool that fails `failures` times with `kind`, then answers.
#[derive(Clone)]
struct Flaky {
    kind: ToolErrorKind,
    failures: u32,
    calls: Arc<AtomicU32>,
}

#[derive(serde::Deserialize)]
struct FlakyArgs {
    n: i64,
}

impl Tool for Flaky {
    const NAME: &'static str = "flaky";
    type Args = FlakyArgs;
    type Output = i64;
    type Error = ToolExecutionError;

    fn description(&self) -> String {
        "Doubles n, eventually.".into()
    }

    fn parameters(&self) -> serde_json::Value {
        serde_json::json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})
    }

    async fn call(&self, _: &mut ToolContext, args: FlakyArgs) -> Result<i64, ToolExecutionError> {
        if self.calls.fetch_add(1, Ordering::SeqCst) < self.failures {
            return Err(ToolExecutionError::new(self.kind, "upstream said no"));
        }
        Ok(args.n * 2)
    }
}

fn flaky(kind: ToolErrorKind, failures: u32) -> Flaky {
    Flaky {
        kind,
        failures,
        calls: Arc::new(AtomicU32::new(0)),
    }
}

fn retry(n: u32) -> Policy {
    Policy::new().on(PolicyKey::Execution, Action::retry(n).unwrap())
}

#[tokio::test(start_paused = true)]
async fn a_rig_tool_is_retried_by_its_kind_under_our_policy() {
    let tool = flaky(ToolErrorKind::Network, 2);
    let calls = Arc::clone(&tool.calls);
    let registry = Registry::builder()
        .tool(ToolDef::from_rig(tool).with_policy(retry(3)))
        .build()
        .unwrap();
    let call = agent_errors::ToolCall::new("1", "flaky", r#"{"n": 21}"#);
    let outcome = registry.execute(&RunContext::new(), &call).await;
    assert_eq!(outcome.result().unwrap().content, "42");
    assert_eq!(calls.load(Ordering::SeqCst), 3);

    // `invalid_args` and a tool that says it is not retryable are not called again.
    for tool in [
        flaky(ToolErrorKind::PermissionDenied, 1),
        flaky(ToolErrorKind::Other, 1),
    ] {
        let calls = Arc::clone(&tool.calls);
        let registry = Registry::builder()
            .tool(ToolDef::from_rig(tool).with_policy(retry(3)))
            .build()
            .unwrap();
        let _ = registry.execute(&RunContext::new(), &call).await;
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
    let explained = Registry::builder()
        .tool(ToolDef::from_rig(flaky(ToolErrorKind::Network, 0)).with_policy(retry(3)))
        .build()
        .unwrap()
        .explain("flaky")
        .unwrap()
        .to_string();
    assert!(explained.contains("retry"), "{explained}");
}

#[fixer]
fn stringly_n(req: FixRequest) -> Result<Fix, FixerError> {
    Ok(Fix::args(req.raw_args.replace("\"21\"", "21")))
}

#[tokio::test(start_paused = true)]
async fn a_rig_tool_with_bad_arguments_is_repaired_by_a_fixer() {
    let tool = flaky(ToolErrorKind::Network, 0);
    let calls = Arc::clone(&tool.calls);
    let model = ScriptedModel::new()
        .tool_call("flaky", r#"{"n": "21"}"#)
        .text("done");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tool(ToolDef::from_rig(tool).with_policy(Policy::new().on(
            PolicyKey::InvalidArgs,
            Action::fix("stringly_n", 1).unwrap(),
        )))
        .fixers(fixers![stringly_n])
        .build()
        .unwrap();
    assert_eq!(agent.run("double 21").await.unwrap(), "done");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the tool ran once, on repaired arguments"
    );
    let results = model.requests();
    let last = format!("{:?}", results.last().unwrap().messages);
    assert!(last.contains("42"), "{last}");
}

#[tokio::test(start_paused = true)]
async fn inside_rigs_own_loop_a_failing_tool_is_retried_by_our_policy() {
    let tool = flaky(ToolErrorKind::RateLimited, 2);
    let calls = Arc::clone(&tool.calls);
    let registry = Arc::new(
        Registry::builder()
            .tool(ToolDef::from_rig(tool).with_policy(retry(3)))
            .build()
            .unwrap(),
    );
    let guarded = GuardedTool::<Flaky>::new(registry, Arc::new(RunContext::new())).unwrap();
    let model = MockCompletionModel::from_turns([
        MockTurn::tool_call("call-1", "flaky", serde_json::json!({"n": 21})),
        MockTurn::text("it is 42"),
    ]);
    let agent = rig_agent::AgentBuilder::new(model.clone())
        .default_max_turns(3)
        .tool(guarded.clone())
        .add_hook(guarded.stop_hook())
        .build();
    let response = agent.prompt("double 21").await.unwrap();
    assert_eq!(response.output(), "it is 42");
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    let history = serde_json::to_string(&model.requests()[1].chat_history).unwrap();
    assert!(history.contains("42"), "{history}");
}

#[tokio::test(start_paused = true)]
async fn inside_rigs_own_loop_an_auth_failure_ends_the_run_before_the_next_model_call() {
    let tool = flaky(ToolErrorKind::PermissionDenied, 5);
    let registry = Arc::new(
        Registry::builder()
            .tool(ToolDef::from_rig(tool))
            .build()
            .unwrap(),
    );
    let guarded = GuardedTool::<Flaky>::new(registry, Arc::new(RunContext::new())).unwrap();
    let model = MockCompletionModel::from_turns([
        MockTurn::tool_call("call-1", "flaky", serde_json::json!({"n": 21})),
        MockTurn::text("never asked"),
    ]);
    let agent = rig_agent::AgentBuilder::new(model.clone())
        .default_max_turns(3)
        .tool(guarded.clone())
        .add_hook(guarded.stop_hook())
        .build();
    agent.prompt("double 21").await.unwrap_err();
    assert_eq!(
        model.request_count(),
        1,
        "no model call after the run ended"
    );
    assert!(guarded.stopped().unwrap().to_string().contains("flaky"));
}

#[tokio::test(start_paused = true)]
async fn inside_rigs_own_loop_a_transient_model_failure_no_longer_ends_the_run() {
    let turns = || {
        [
            MockTurn::tool_call("call-1", "flaky", serde_json::json!({"n": 21})),
            MockTurn::text("it is 42"),
        ]
    };
    // The first call answers; the call after the tool turn fails twice: 503, then a 429 asking
    // for 7 s.
    let script = || [None, Some(status(503)), Some(rate_limited("7"))];
    let agent = |model: rig_core::DynModel<rig_core::operation::Completion>| {
        let registry = Registry::builder()
            .tool(ToolDef::from_rig(flaky(ToolErrorKind::Network, 0)))
            .build()
            .unwrap();
        let guarded =
            GuardedTool::<Flaky>::new(Arc::new(registry), Arc::new(RunContext::new())).unwrap();
        rig_agent::AgentBuilder::new(model)
            .default_max_turns(3)
            .tool(guarded.clone())
            .add_hook(guarded.stop_hook())
            .build()
    };

    // rig alone: the 503 ends the run.
    let (model, transport) = failing_as(script(), turns());
    agent(model.erase()).prompt("double 21").await.unwrap_err();
    assert_eq!(transport.calls.load(Ordering::SeqCst), 2);

    let (model, transport) = failing_as(script(), turns());
    let schedule = RetrySchedule::attempts(4).unwrap().with_jitter(0.0);
    let start = Instant::now();
    let response = agent(RecoveringModel::new(model, schedule, Arc::new(RunContext::new())).into())
        .prompt("double 21")
        .await
        .unwrap();
    assert_eq!(response.output(), "it is 42");
    assert_eq!(transport.calls.load(Ordering::SeqCst), 4);
    // 500 ms after the 503, then the 7 s the 429 asked for.
    assert_eq!(Instant::now() - start, Duration::from_millis(7_500));

    // What cannot succeed is not called again: rig's run ends as before.
    let (model, transport) = failing_as([None, Some(status(400))], turns());
    let schedule = RetrySchedule::attempts(4).unwrap();
    agent(RecoveringModel::new(model, schedule, Arc::new(RunContext::new())).into())
        .prompt("double 21")
        .await
        .unwrap_err();
    assert_eq!(transport.calls.load(Ordering::SeqCst), 2);
}

mod fallback {
    //! Fallback across providers, rig's and ours, by failure kind.

    use agent_errors::llm::{FallbackOn, FinishReason, RequestOptions, ResponseFormat};
    use agent_errors::observe::EventLog;
    use agent_errors::testing::Reply;
    use agent_errors::{ChatModel, ChatRequest, ChatResponse, Event, Message};

    use super::*;

    fn ask() -> ChatRequest {
        ChatRequest::new(vec![Message::user("hi")], Vec::new())
    }

    fn all_triggers() -> [FallbackOn; 5] {
        [
            FallbackOn::Overload,
            FallbackOn::RateLimit {
                patience: Duration::from_secs(5),
            },
            FallbackOn::Outage,
            FallbackOn::AuthOrConfig,
            FallbackOn::BadAnswer,
        ]
    }

    fn backup() -> ScriptedModel {
        ScriptedModel::named("backup").text("from the backup")
    }

    #[tokio::test(start_paused = true)]
    async fn a_rate_limit_longer_than_the_callers_patience_falls_back_at_once() {
        let (primary, calls) = failing([rate_limited("30")], []);
        let model = FallbackModel::new(RigModel::new(primary), backup()).on(all_triggers());
        let start = Instant::now();
        let answer = model.chat(&ask()).await.unwrap();
        assert_eq!(answer.text.as_deref(), Some("from the backup"));
        assert_eq!(answer.model.as_deref(), Some("backup"));
        assert_eq!(
            Instant::now(),
            start,
            "no wait for a limit the caller will not wait out"
        );
        assert_eq!(calls.calls.load(Ordering::SeqCst), 1);

        // Within its patience, the primary is waited for.
        let (primary, calls) = failing([rate_limited("2")], [MockTurn::text("primary")]);
        let backup = backup();
        let model = FallbackModel::new(RigModel::new(primary).with_model_id("a"), backup.clone())
            .on(all_triggers());
        let answer = model.chat(&ask()).await.unwrap();
        assert_eq!(answer.text.as_deref(), Some("primary"));
        assert_eq!(Instant::now() - start, Duration::from_secs(2));
        assert_eq!(calls.calls.load(Ordering::SeqCst), 2);
        assert_eq!(backup.calls(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn an_outage_that_outlasts_the_primarys_retries_falls_back() {
        let outage = || [status(503), status(503), status(503)];
        let (primary, calls) = failing(outage(), []);
        let model = FallbackModel::new(RigModel::new(primary), backup())
            .on([FallbackOn::Outage])
            .after(3)
            .unwrap();
        let answer = model.chat(&ask()).await.unwrap();
        assert_eq!(answer.text.as_deref(), Some("from the backup"));
        assert_eq!(calls.calls.load(Ordering::SeqCst), 3);

        // The default triggers are overload only: an outage comes back as it was.
        let (primary, _) = failing(outage(), []);
        let backup = backup();
        let model = FallbackModel::new(RigModel::new(primary), backup.clone());
        let error = model.chat(&ask()).await.unwrap_err();
        assert!(error.downcast_ref::<ProviderError>().is_some());
        assert_eq!(backup.calls(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn the_primarys_auth_or_configuration_failure_falls_back_at_once() {
        for error in [unauthorized(), status(404)] {
            let (primary, calls) = failing([error], []);
            let model =
                FallbackModel::new(RigModel::new(primary), backup()).on([FallbackOn::AuthOrConfig]);
            let answer = model.chat(&ask()).await.unwrap();
            assert_eq!(answer.text.as_deref(), Some("from the backup"));
            assert_eq!(calls.calls.load(Ordering::SeqCst), 1);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_bad_answer_falls_back() {
        let structured = ResponseFormat::JsonSchema {
            name: "city".into(),
            schema: serde_json::json!({"type": "object", "required": ["city"]}),
            strict: true,
        };
        let cases = [
            (ChatResponse::text("  "), None),
            (
                ChatResponse::text("The answer is").with_finish_reason(FinishReason::Length),
                None,
            ),
            (
                ChatResponse::text("I can't help with that.")
                    .with_finish_reason(FinishReason::Refusal),
                None,
            ),
            (
                ChatResponse::text(r#"{"town": "Lyon"}"#),
                Some(structured.clone()),
            ),
            (ChatResponse::text("Lyon"), Some(structured.clone())),
        ];
        for (bad, format) in cases {
            let primary = ScriptedModel::named("primary").reply(Reply::response(bad.clone()));
            let model = FallbackModel::new(primary, backup()).on([FallbackOn::BadAnswer]);
            let mut request = ask();
            if let Some(format) = &format {
                request =
                    request.with_options(RequestOptions::new().response_format(format.clone()));
            }
            let answer = model.chat(&request).await.unwrap();
            assert_eq!(answer.model.as_deref(), Some("backup"), "{bad:?}");
        }
        // A good structured answer stays.
        let primary = ScriptedModel::named("primary").reply(Reply::text(r#"{"city": "Lyon"}"#));
        let model = FallbackModel::new(primary, backup()).on([FallbackOn::BadAnswer]);
        let request = ask().with_options(RequestOptions::new().response_format(structured));
        assert_eq!(
            model.chat(&request).await.unwrap().model.as_deref(),
            Some("primary")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_invalid_request_does_not_cascade_through_the_chain() {
        let (primary, primary_calls) = failing([status(400)], []);
        let (second, second_calls) = failing([], [MockTurn::text("never")]);
        let last = backup();
        let model = FallbackModel::new(
            RigModel::new(primary),
            FallbackModel::new(RigModel::new(second), last.clone()).on(all_triggers()),
        )
        .on(all_triggers());
        let error = model.chat(&ask()).await.unwrap_err();
        assert_eq!(
            error
                .downcast_ref::<ProviderError>()
                .and_then(ProviderError::provider_response_status),
            Some(StatusCode::BAD_REQUEST)
        );
        assert_eq!(primary_calls.calls.load(Ordering::SeqCst), 1);
        assert_eq!(second_calls.calls.load(Ordering::SeqCst), 0);
        assert_eq!(last.calls(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_three_model_chain_across_rig_and_ours_each_model_naming_itself() {
        let (first, first_calls) = failing([rate_limited("60")], []);
        let (second, second_calls) = failing([], [MockTurn::from_contents([])]);
        let last = ScriptedModel::named("ours").text("answered by ours");
        let log = Arc::new(EventLog::new());
        let model = FallbackModel::new(
            RigModel::new(first).with_model_id("first-model"),
            FallbackModel::new(
                RigModel::new(second).with_model_id("second-model"),
                last.clone(),
            )
            .on(all_triggers())
            .event_log(Arc::clone(&log)),
        )
        .on(all_triggers())
        .event_log(Arc::clone(&log));

        let answer = model.chat(&ask()).await.unwrap();
        assert_eq!(answer.text.as_deref(), Some("answered by ours"));
        assert_eq!(answer.model.as_deref(), Some("ours"));
        assert_eq!(
            *first_calls.models.lock().unwrap(),
            [Some("first-model".to_owned())]
        );
        assert_eq!(
            *second_calls.models.lock().unwrap(),
            [Some("second-model".to_owned())]
        );
        assert_eq!(last.calls(), 1);
        let switches: Vec<(String, String)> = log
            .snapshot()
            .into_iter()
            .filter_map(|event| match event {
                Event::LlmFallback { from, to, .. } => Some((from, to)),
                _ => None,
            })
            .collect();
        assert_eq!(
            switches,
            [
                ("first-model".to_owned(), "second-model".to_owned()),
                ("second-model".to_owned(), "ours".to_owned()),
            ]
        );
    }
}

mod streaming {
    //! A rig provider streamed through our agent: deltas as they arrive, a reply broken in the
    //! middle handed to `on_llm_error` with what had arrived.

    use agent_errors::RunOptions;
    use agent_errors::run::RunDelta;
    use agent_errors::stream::{StreamEvent, StreamInterrupted};
    use rig_core::test_utils::MockStreamEvent;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_rig_stream_broken_mid_answer_reaches_on_llm_error_and_is_retried() {
        let usage = rig_core::completion::Usage::new()
            .input_tokens(5)
            .output_tokens(1);
        let model = MockCompletionModel::from_stream_turns([
            vec![
                MockStreamEvent::text("Hel"),
                MockStreamEvent::Error(rig_core::test_utils::MockError::ProviderResponse(reply(
                    503, "busy",
                ))),
            ],
            vec![
                MockStreamEvent::text("Hello"),
                MockStreamEvent::final_response(usage),
            ],
        ]);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        let agent = Agent::builder("streamer")
            .model(RigModel::new(model.clone()))
            .on_llm_error(move |error, _| {
                let cut = error.downcast_ref::<StreamInterrupted>().unwrap();
                log.lock().unwrap().push(cut.partial_text.clone());
                LlmErrorDecision::retry(2, Duration::from_millis(1))
            })
            .build()
            .unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::channel(64);
        let outcome = agent.run_with("hi", RunOptions::new().stream_to(tx)).await;
        assert_eq!(outcome.result.unwrap(), "Hello");
        assert_eq!(*seen.lock().unwrap(), ["Hel"]);
        assert_eq!(model.request_count(), 2);
        let mut deltas = Vec::new();
        while let Ok(delta) = rx.try_recv() {
            deltas.push(delta);
        }
        assert_eq!(
            deltas[0],
            RunDelta::Model(StreamEvent::TextDelta("Hel".into()))
        );
        assert!(deltas.contains(&RunDelta::Model(StreamEvent::TextDelta("Hello".into()))));
        assert!(
            deltas.contains(&RunDelta::Model(StreamEvent::Usage(
                agent_errors::llm::Usage::new(5, 1)
            ))),
            "{deltas:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_streamed_rig_tool_call_is_run() {
        let model = MockCompletionModel::from_stream_turns([
            vec![
                MockStreamEvent::tool_call("call-1", "add", serde_json::json!({"x": 2, "y": 3})),
                MockStreamEvent::final_response_with_default_usage(),
            ],
            vec![
                MockStreamEvent::text("5"),
                MockStreamEvent::final_response_with_default_usage(),
            ],
        ]);
        let agent = Agent::builder("calc")
            .model(RigModel::new(model.clone()))
            .tool(ToolDef::from_rig(rig_agent::test_utils::MockAddTool))
            .build()
            .unwrap();
        let (tx, _rx) = tokio::sync::mpsc::channel(64);
        let outcome = agent
            .run_with("2 + 3?", RunOptions::new().stream_to(tx))
            .await;
        assert_eq!(outcome.result.unwrap(), "5");
        let history = serde_json::to_string(&model.requests()[1].chat_history).unwrap();
        assert!(history.contains("call-1"), "{history}");
    }
}

#[tokio::test(start_paused = true)]
async fn persistent_retry_and_the_runs_retry_budget_hold_over_a_rig_provider() {
    let (model, transport) = failing([status(503), status(503)], [MockTurn::text("ok")]);
    let model = agent_errors::llm::PersistentRetry::new(RigModel::new(model));
    let agent = Agent::builder("a").model(model).build().unwrap();
    assert_eq!(agent.run("hi").await.unwrap(), "ok");
    assert_eq!(transport.calls.load(Ordering::SeqCst), 3);

    // One retry allowed for the whole run: the second 503 ends it.
    let (model, transport) = failing([status(503), status(503)], [MockTurn::text("ok")]);
    let agent = Agent::builder("a")
        .model(RigModel::new(model))
        .on_llm_error(retry_three_times())
        .limits(agent_errors::Limits::default().with_max_retries(1))
        .build()
        .unwrap();
    agent.run("hi").await.unwrap_err();
    assert_eq!(transport.calls.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn inside_rigs_own_loop_a_fixer_repairs_a_rig_tools_arguments() {
    let tool = flaky(ToolErrorKind::Network, 0);
    let calls = Arc::clone(&tool.calls);
    let registry = Registry::builder()
        .tool(ToolDef::from_rig(tool).with_policy(Policy::new().on(
            PolicyKey::InvalidArgs,
            Action::fix("stringly_n", 1).unwrap(),
        )))
        .fixers(fixers![stringly_n])
        .build()
        .unwrap();
    let guarded =
        GuardedTool::<Flaky>::new(Arc::new(registry), Arc::new(RunContext::new())).unwrap();
    let model = MockCompletionModel::from_turns([
        MockTurn::tool_call("call-1", "flaky", serde_json::json!({"n": "21"})),
        MockTurn::text("it is 42"),
    ]);
    let agent = rig_agent::AgentBuilder::new(model.clone())
        .default_max_turns(3)
        .tool(guarded.clone())
        .add_hook(guarded.stop_hook())
        .build();
    assert_eq!(
        agent.prompt("double 21").await.unwrap().output(),
        "it is 42"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let history = serde_json::to_string(&model.requests()[1].chat_history).unwrap();
    assert!(history.contains("42"), "{history}");
}

/// A rig tool that records the idempotency key (and the session value) each attempt is called
/// with, and fails the first attempt of every key on a broken connection.
#[derive(Clone, Default)]
struct Keyed {
    seen: Arc<Mutex<Vec<Option<String>>>>,
    sessions: Arc<Mutex<Vec<Option<String>>>>,
}

/// A value a rig user hands every tool of a run through rig's `ToolContext`.
#[derive(serde::Serialize, serde::Deserialize)]
struct Session(String);

impl rig_core::tool::ContextValue for Session {
    const KEY: &'static str = "session";
}

impl Keyed {
    fn seen(&self) -> Vec<Option<String>> {
        self.seen.lock().unwrap().clone()
    }

    /// The keys seen, each attempt's, asserting every attempt had one.
    fn keys(&self) -> Vec<String> {
        let seen = self.seen();
        assert!(
            seen.iter().all(Option::is_some),
            "an attempt had no key: {seen:?}"
        );
        seen.into_iter().flatten().collect()
    }
}

impl Tool for Keyed {
    const NAME: &'static str = "keyed";
    type Args = serde_json::Value;
    type Output = String;
    type Error = ToolExecutionError;

    fn description(&self) -> String {
        "Writes once per key.".into()
    }

    fn parameters(&self) -> serde_json::Value {
        serde_json::json!({"type": "object"})
    }

    async fn call(
        &self,
        context: &mut ToolContext,
        _: serde_json::Value,
    ) -> Result<String, ToolExecutionError> {
        let key = context
            .get::<agent_errors::call::IdempotencyKey>()?
            .map(|key| key.to_string());
        let session = context.get::<Session>()?.map(|session| session.0);
        self.sessions.lock().unwrap().push(session);
        let mut seen = self.seen.lock().unwrap();
        let first = !seen.contains(&key);
        seen.push(key);
        if first {
            return Err(ToolExecutionError::new(
                ToolErrorKind::Network,
                "connection reset",
            ));
        }
        Ok("written".into())
    }
}

/// Asserts `keys` are two calls' attempts, two each: equal within a call, different across.
fn two_calls_retried_once(keys: &[String]) {
    assert_eq!(keys.len(), 4, "{keys:?}");
    assert_eq!(keys[0], keys[1], "a retry sees its call's key");
    assert_eq!(keys[2], keys[3], "a retry sees its call's key");
    assert_ne!(keys[0], keys[2], "another call sees another key");
}

#[tokio::test(start_paused = true)]
async fn in_our_loop_a_rig_tool_reads_its_calls_key_the_same_on_every_attempt() {
    let tool = Keyed::default();
    let model = ScriptedModel::new()
        .tool_call("keyed", "{}")
        .tool_call("keyed", "{}")
        .text("done");
    let agent = Agent::builder("a")
        .model(model)
        .tool(ToolDef::from_rig(tool.clone()).with_policy(retry(3)))
        .build()
        .unwrap();
    let options = agent_errors::RunOptions::new().run_id("run-7");
    agent.run_with("write twice", options).await.result.unwrap();
    let keys = tool.keys();
    two_calls_retried_once(&keys);
    assert_eq!(keys[0], "run-7:call_1");
    assert_eq!(keys[2], "run-7:call_2");
}

#[tokio::test(start_paused = true)]
async fn a_rig_tool_under_a_run_context_without_a_run_id_finds_no_key() {
    let tool = Keyed::default();
    let registry = Registry::builder()
        .tool(ToolDef::from_rig(tool.clone()).with_policy(retry(3)))
        .build()
        .unwrap();
    let call = agent_errors::ToolCall::new("1", "keyed", "{}");
    let outcome = registry.execute(&RunContext::new(), &call).await;
    assert_eq!(outcome.result().unwrap().content, "written");
    assert_eq!(tool.seen(), [None, None]);
}

/// A rig agent on rig's own loop whose `keyed` tool is guarded in `ctx` and called twice.
async fn two_guarded_calls(ctx: RunContext, tool: &Keyed, context: ToolContext) {
    let registry = Registry::builder()
        .tool(ToolDef::from_rig(tool.clone()).with_policy(retry(3)))
        .build()
        .unwrap();
    let guarded = GuardedTool::<Keyed>::new(Arc::new(registry), Arc::new(ctx)).unwrap();
    let model = MockCompletionModel::from_turns([
        MockTurn::tool_call("call-1", "keyed", serde_json::json!({})),
        MockTurn::tool_call("call-2", "keyed", serde_json::json!({})),
        MockTurn::text("written twice"),
    ]);
    let agent = rig_agent::AgentBuilder::new(model)
        .default_max_turns(4)
        .tool(guarded.clone())
        .add_hook(guarded.stop_hook())
        .build();
    let response = agent.prompt("write twice").tool_context(context).await;
    assert_eq!(response.unwrap().output(), "written twice");
}

#[tokio::test(start_paused = true)]
async fn inside_rigs_own_loop_a_rig_tool_reads_its_calls_key_the_same_on_every_attempt() {
    let tool = Keyed::default();
    let mut context = ToolContext::new();
    context.insert(Session("s-1".into())).unwrap();
    let ctx = RunContext::new().with_run_id("run-9");
    two_guarded_calls(ctx, &tool, context).await;
    let keys = tool.keys();
    two_calls_retried_once(&keys);
    for key in &keys {
        assert!(key.starts_with("run-9:rig-effect-"), "{key}");
    }
    let sessions = tool.sessions.lock().unwrap().clone();
    assert_eq!(
        sessions,
        vec![Some("s-1".to_owned()); 4],
        "the values given to rig's run reach the guarded tool"
    );
}

#[tokio::test(start_paused = true)]
async fn inside_rigs_own_loop_a_run_without_an_id_gets_one_of_its_own() {
    let (first, second) = (Keyed::default(), Keyed::default());
    two_guarded_calls(RunContext::new(), &first, ToolContext::new()).await;
    two_guarded_calls(RunContext::new(), &second, ToolContext::new()).await;
    let (first, second) = (first.keys(), second.keys());
    two_calls_retried_once(&first);
    two_calls_retried_once(&second);
    let run_id = |key: &str| key.split(':').next().unwrap().to_owned();
    assert!(run_id(&first[0]).starts_with("run-"), "{first:?}");
    assert_eq!(run_id(&first[0]), run_id(&first[2]), "one run, one id");
    assert_ne!(
        run_id(&first[0]),
        run_id(&second[0]),
        "two runs never share keys"
    );
}

/// A rig agent on rig's own loop, built anew around `guarded`, that calls `keyed` once.
async fn one_call_through(guarded: &GuardedTool<Keyed>) {
    let model = MockCompletionModel::from_turns([
        MockTurn::tool_call("call-1", "keyed", serde_json::json!({})),
        MockTurn::text("written"),
    ]);
    let agent = rig_agent::AgentBuilder::new(model)
        .default_max_turns(3)
        .tool(guarded.clone())
        .add_hook(guarded.stop_hook())
        .build();
    assert_eq!(agent.prompt("write").await.unwrap().output(), "written");
}

#[tokio::test(start_paused = true)]
async fn inside_rigs_own_loop_agents_built_around_one_guard_without_a_run_id_never_share_a_key() {
    // One guard made once (an app's state) and an agent built per request: each agent's bus
    // numbers its dispatches from the start again, so a key made of those numbers would name
    // the second request's write as the first's, and the service would drop it as a repeat.
    let tool = Keyed::default();
    let registry = Registry::builder()
        .tool(ToolDef::from_rig(tool.clone()).with_policy(retry(3)))
        .build()
        .unwrap();
    let guarded = GuardedTool::<Keyed>::new(Arc::new(registry), Arc::new(RunContext::new()));
    let guarded = guarded.unwrap();
    one_call_through(&guarded).await;
    one_call_through(&guarded).await;
    two_calls_retried_once(&tool.keys());
}

#[tokio::test(start_paused = true)]
async fn two_guards_over_one_run_context_never_give_two_calls_one_key_and_say_so() {
    use tracing_subscriber::layer::SubscriberExt;
    let _serial = crate::capture::serial().await;
    let capture = crate::capture::Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    let _guard = crate::support::subscriber::set_default(subscriber);
    tracing::callsite::rebuild_interest_cache();
    let tool = Keyed::default();
    let registry = Registry::builder()
        .tool(ToolDef::from_rig(tool.clone()).with_policy(retry(3)))
        .build()
        .unwrap();
    let (registry, ctx) = (
        Arc::new(registry),
        Arc::new(RunContext::new().with_run_id("run-4")),
    );
    // Two code paths of one service each guard the run: rig numbers each agent's calls from 1.
    let service = tracing::info_span!("service");
    let (first, second) = service.in_scope(|| {
        let first = GuardedTool::<Keyed>::new(Arc::clone(&registry), Arc::clone(&ctx));
        let second = GuardedTool::<Keyed>::new(registry, Arc::clone(&ctx));
        (first.unwrap(), second.unwrap())
    });
    one_call_through(&first).await;
    one_call_through(&second).await;
    let keys = tool.keys();
    two_calls_retried_once(&keys);
    assert!(keys[0].starts_with("run-4:"), "{keys:?}");
    let spans = capture.spans();
    let said = spans.iter().filter(|span| span.name == "service");
    let said: Vec<String> = said
        .flat_map(|span| {
            span.event_fields
                .iter()
                .filter_map(|f| f.get("message").cloned())
        })
        .collect();
    assert_eq!(said.len(), 1, "said once, for the second guard: {said:?}");
    assert!(
        said[0].contains("second rig guard over one RunContext"),
        "{said:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn inside_rigs_own_loop_agents_built_around_one_guard_with_a_run_id_never_share_a_key() {
    // The same, with the run id given: rig's ids for the two agents' writes are equal, and a
    // key made of them would name two refunds as one.
    let tool = Keyed::default();
    let registry = Registry::builder()
        .tool(ToolDef::from_rig(tool.clone()).with_policy(retry(3)))
        .build()
        .unwrap();
    let ctx = Arc::new(RunContext::new().with_run_id("run-8"));
    let guarded = GuardedTool::<Keyed>::new(Arc::new(registry), ctx).unwrap();
    one_call_through(&guarded).await;
    one_call_through(&guarded).await;
    let keys = tool.keys();
    two_calls_retried_once(&keys);
    assert!(keys[0].starts_with("run-8:rig-effect-"), "{keys:?}");
    assert!(keys[2].starts_with("run-8:rig-call-"), "{keys:?}");
}

/// A rig tool that makes a call of its own: `keyed`, through a registry and a run context of
/// its own, without a run id.
struct Nesting {
    inner: Arc<Registry>,
}

impl Tool for Nesting {
    const NAME: &'static str = "nesting";
    type Args = serde_json::Value;
    type Output = String;
    type Error = ToolExecutionError;

    fn description(&self) -> String {
        "Writes through a tool of its own.".into()
    }

    fn parameters(&self) -> serde_json::Value {
        serde_json::json!({"type": "object"})
    }

    async fn call(
        &self,
        _: &mut ToolContext,
        _: serde_json::Value,
    ) -> Result<String, ToolExecutionError> {
        let call = agent_errors::ToolCall::new("inner-1", "keyed", "{}");
        let outcome = self.inner.execute(&RunContext::new(), &call).await;
        Ok(outcome
            .result()
            .map_or_else(String::new, |r| r.content.clone()))
    }
}

#[tokio::test(start_paused = true)]
async fn inside_rigs_own_loop_a_call_a_guarded_tool_makes_itself_does_not_get_the_guarded_calls_key()
 {
    let tool = Keyed::default();
    let inner = Registry::builder()
        .tool(ToolDef::from_rig(tool.clone()).with_policy(retry(3)))
        .build()
        .unwrap();
    let outer = Registry::builder()
        .tool(ToolDef::from_rig(Nesting {
            inner: Arc::new(inner),
        }))
        .build()
        .unwrap();
    let ctx = Arc::new(RunContext::new().with_run_id("run-7"));
    let guarded = GuardedTool::<Nesting>::new(Arc::new(outer), ctx).unwrap();
    let model = MockCompletionModel::from_turns([
        MockTurn::tool_call("call-1", "nesting", serde_json::json!({})),
        MockTurn::text("done"),
    ]);
    let agent = rig_agent::AgentBuilder::new(model)
        .default_max_turns(3)
        .tool(guarded.clone())
        .add_hook(guarded.stop_hook())
        .build();
    assert_eq!(agent.prompt("write").await.unwrap().output(), "done");
    assert_eq!(
        tool.seen(),
        [None, None],
        "the inner call's context has no run id: no key, and never the outer call's"
    );
}

/// A rig tool that records its call's key, hangs past any timeout on its first attempt and
/// fails every later one on a broken connection.
#[derive(Clone, Default)]
struct Hanging {
    seen: Arc<Mutex<Vec<Option<String>>>>,
}

impl Tool for Hanging {
    const NAME: &'static str = "hanging";
    type Args = serde_json::Value;
    type Output = String;
    type Error = ToolExecutionError;

    fn description(&self) -> String {
        "Hangs, then fails.".into()
    }

    fn parameters(&self) -> serde_json::Value {
        serde_json::json!({"type": "object"})
    }

    async fn call(
        &self,
        context: &mut ToolContext,
        _: serde_json::Value,
    ) -> Result<String, ToolExecutionError> {
        let key = context
            .get::<agent_errors::call::IdempotencyKey>()?
            .map(|key| key.to_string());
        let first = {
            let mut seen = self.seen.lock().unwrap();
            seen.push(key);
            seen.len() == 1
        };
        if first {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
        Err(ToolExecutionError::new(
            ToolErrorKind::Network,
            "connection reset",
        ))
    }
}

#[tokio::test(start_paused = true)]
async fn inside_rigs_own_loop_the_calls_key_holds_past_a_timeout_and_on_its_fallback() {
    // No run id: the key reaches the tool only through the guard, past the executor's timeout,
    // its panic guard, its retries and the hand-over to the fallback.
    let (hanging, backup) = (Hanging::default(), Keyed::default());
    let policy = Policy::new().on(
        PolicyKey::Execution,
        [Action::retry(2).unwrap(), Action::fallback("keyed")],
    );
    let registry = Registry::builder()
        .tool(
            ToolDef::from_rig(hanging.clone())
                .idempotent(true)
                .with_timeout(Duration::from_secs(1))
                .with_policy(policy),
        )
        .tool(ToolDef::from_rig(backup.clone()).with_policy(retry(3)))
        .build()
        .unwrap();
    let ctx = Arc::new(RunContext::new());
    let guarded = GuardedTool::<Hanging>::new(Arc::new(registry), ctx).unwrap();
    let model = MockCompletionModel::from_turns([
        MockTurn::tool_call("call-1", "hanging", serde_json::json!({})),
        MockTurn::text("done"),
    ]);
    let agent = rig_agent::AgentBuilder::new(model)
        .default_max_turns(3)
        .tool(guarded.clone())
        .add_hook(guarded.stop_hook())
        .build();
    assert_eq!(agent.prompt("write").await.unwrap().output(), "done");
    let tried = hanging.seen.lock().unwrap().clone();
    assert!(tried.len() >= 2, "timed out, then retried: {tried:?}");
    let key = tried[0]
        .clone()
        .expect("the first attempt had the call's key");
    assert!(
        tried.iter().all(|k| k.as_deref() == Some(key.as_str())),
        "{tried:?}"
    );
    let handed_over = backup.keys();
    assert!(!handed_over.is_empty(), "the fallback ran");
    assert!(
        handed_over.iter().all(|k| *k == key),
        "{handed_over:?} vs {key}"
    );
}

#[tokio::test(start_paused = true)]
async fn inside_rigs_own_loop_two_calls_of_one_turn_get_two_keys() {
    use rig_core::completion::AssistantContent;
    use rig_core::message::{ToolCall as RigCall, ToolFunction, ToolName};

    let call = |id: &str| {
        let function = ToolFunction::new(ToolName::new("keyed").unwrap(), serde_json::json!({}));
        AssistantContent::ToolCall(RigCall::from_wire(id, function))
    };
    let tool = Keyed::default();
    let registry = Registry::builder()
        .tool(ToolDef::from_rig(tool.clone()).with_policy(retry(3)))
        .build()
        .unwrap();
    let ctx = Arc::new(RunContext::new().with_run_id("run-9"));
    let guarded = GuardedTool::<Keyed>::new(Arc::new(registry), ctx).unwrap();
    let model = MockCompletionModel::from_turns([
        MockTurn::from_contents([call("call-1"), call("call-2")]),
        MockTurn::text("written twice"),
    ]);
    let agent = rig_agent::AgentBuilder::new(model)
        .default_max_turns(3)
        .tool(guarded.clone())
        .add_hook(guarded.stop_hook())
        .build();
    assert_eq!(
        agent.prompt("write twice").await.unwrap().output(),
        "written twice"
    );
    let mut keys = tool.keys();
    keys.sort();
    assert_eq!(
        keys.len(),
        4,
        "each call failed once and was retried: {keys:?}"
    );
    assert_eq!(
        (keys[0] == keys[1], keys[2] == keys[3]),
        (true, true),
        "{keys:?}"
    );
    assert_ne!(keys[0], keys[2], "two calls of one turn, two keys");
}

mod attempts {
    //! Every attempt of a rig-loop run visible: the model retries of a `RecoveringModel` on the
    //! run's report, and a guarded tool's call as one span, rig's, with its retries in it.

    use agent_errors::Event;
    use agent_errors::observe::ModelLayer;
    use tracing_subscriber::layer::SubscriberExt;

    use super::*;
    use crate::capture::{Capture, serial};

    fn turns() -> [MockTurn; 2] {
        [
            MockTurn::tool_call("call-1", "flaky", serde_json::json!({"n": 21})),
            MockTurn::text("it is 42"),
        ]
    }

    /// A rig agent of `model` whose `flaky` tool fails `failures` times under `retry(3)`,
    /// guarded in `run`.
    fn agent(
        model: impl Into<rig_core::DynModel<rig_core::operation::Completion>>,
        run: &Arc<RunContext>,
        failures: u32,
    ) -> rig_agent::Agent {
        let tool = ToolDef::from_rig(flaky(ToolErrorKind::Network, failures)).with_policy(retry(3));
        let registry = Registry::builder().tool(tool).build().unwrap();
        let guarded = GuardedTool::<Flaky>::new(Arc::new(registry), Arc::clone(run)).unwrap();
        rig_agent::AgentBuilder::new(model)
            .default_max_turns(3)
            .tool(guarded.clone())
            .add_hook(guarded.stop_hook())
            .build()
    }

    #[tokio::test(start_paused = true)]
    async fn a_model_retry_inside_rigs_loop_is_on_the_runs_report_beside_the_tools() {
        let run = Arc::new(RunContext::new());
        let (model, transport) = failing_as([None, Some(status(503))], turns());
        let schedule = RetrySchedule::attempts(3).unwrap().with_jitter(0.0);
        let model = agent_errors::rig::RecoveringModel::new(model, schedule, Arc::clone(&run));
        let recorder = metrics_util::debugging::DebuggingRecorder::new();
        let counted = metrics::set_default_local_recorder(&recorder);

        let response = agent(model, &run, 1).prompt("double 21").await.unwrap();

        drop(counted);
        let key = format!(
            "agent_errors.recoveries{{error.type={},layer=rig,outcome=recovered}}",
            classify(&status(503)).kind
        );
        assert!(
            matches!(
                crate::capture::metrics_of(&recorder).get(&key),
                Some(metrics_util::debugging::DebugValue::Counter(1))
            ),
            "{key}"
        );

        assert_eq!(response.output(), "it is 42");
        assert_eq!(transport.calls.load(Ordering::SeqCst), 3);
        let events = run.events().snapshot();
        let names: Vec<&str> = events.iter().map(Event::name).collect();
        assert_eq!(names, ["tool_retry", "llm_retry"]);
        assert_eq!(
            events[1],
            Event::LlmRetry {
                layer: ModelLayer::Rig,
                attempt: 1,
                delay: Duration::from_millis(500),
                kind: classify(&status(503)).kind,
            }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_guarded_call_is_one_span_under_rigs_call_id_with_its_retries_in_it() {
        let _serial = serial().await;
        let capture = Capture::default();
        let subscriber = tracing_subscriber::registry().with(capture.clone());
        let _guard = crate::support::subscriber::set_default(subscriber);
        tracing::callsite::rebuild_interest_cache();
        // rig's span callsites are registered by the first run that reaches them, perhaps a
        // test on another thread with no subscriber: one run first, then the interest cache
        // rebuilt, so that the run under test sees rig's spans whoever registered them.
        let warm_up = Arc::new(RunContext::new());
        let model = MockCompletionModel::from_turns(turns());
        agent(model, &warm_up, 0).prompt("double 21").await.unwrap();
        tracing::callsite::rebuild_interest_cache();
        let before = capture.spans().len();
        let run = Arc::new(RunContext::new().with_run_id("run-7"));
        let model = MockCompletionModel::from_turns(turns());

        let response = agent(model, &run, 2).prompt("double 21").await.unwrap();

        assert_eq!(response.output(), "it is 42");
        let spans = capture.spans().split_off(before);
        let calls: Vec<_> = spans.iter().filter(|s| s.name == "execute_tool").collect();
        assert_eq!(calls.len(), 1, "one span for the one call: {spans:#?}");
        let call = calls[0];
        let id = call
            .fields
            .get("gen_ai.tool.call.id")
            .expect("rig's call id");
        assert!(
            id.contains("call-1"),
            "rig's id for the call, not ours: {id} {call:#?}"
        );
        assert_eq!(call.events, ["tool_retry", "tool_retry"]);
        let attempts: Vec<&str> = call
            .event_fields
            .iter()
            .filter_map(|fields| fields.get("agent_errors.attempt"))
            .map(String::as_str)
            .collect();
        assert_eq!(attempts, ["1", "2"]);
    }
}

#[test]
fn a_rig_failure_is_never_read_by_its_words() {
    use agent_errors::ToolError;
    // A rig tool whose only signal is a status in its message: not a status, and not retried.
    let worded = ToolExecutionError::other("upstream said HTTP 503 Service Unavailable");
    let error = ToolError::execution(serde_json::json!({}), worded);
    let class = classify(error.cause());
    assert_eq!(class.kind, ErrorKind::Unknown, "{class:?}");
    assert_eq!(class.status, None);
    let wrapped = std::io::Error::other(ToolExecutionError::other("rate limit exceeded, 429"));
    assert_eq!(classify(&wrapped).kind, ErrorKind::Unknown);
    // What it says by type still counts.
    let typed = ToolExecutionError::new(ToolErrorKind::Network, "HTTP 404 in the words");
    assert_eq!(classify(&typed).kind, ErrorKind::Transient);
    // And the same words in an error of the user's own are read as before.
    let own = std::io::Error::other("upstream said HTTP 503 Service Unavailable");
    assert_ne!(classify(&own).kind, ErrorKind::Unknown);
}
