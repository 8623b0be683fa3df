//! One meter for every path a run spends on: a fallback tool, a retried tool body, a fixer
//! agent's own requests, a fallback model, and responses that report no usage are all held to
//! the run's caps.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use agent_errors::HttpError;
use agent_errors::llm::{FallbackModel, Usage};
use agent_errors::policy::{Action, Policy, PolicyKey};
use agent_errors::run::{MissingUsage, ModelPrice, UsageLimit, UsageLimitExceeded, UsageLimits};
use agent_errors::testing::{Reply, ReportAssertions, ScriptedModel, transcript_violations};
use agent_errors::{Agent, ChatResponse, RunError, ToolCall, ToolDef};
use tracing_subscriber::layer::{Context, SubscriberExt};

/// A tool that answers "ok" after failing its first `failures` calls with a 503, and counts
/// every run of its body.
fn counted(name: &'static str, failures: u32) -> (ToolDef, Arc<AtomicU32>) {
    let ran = Arc::new(AtomicU32::new(0));
    let seen = Arc::clone(&ran);
    let tool = ToolDef::new(name, "Counts its runs.", move |_: serde_json::Value| {
        let run = seen.fetch_add(1, Ordering::SeqCst) + 1;
        async move {
            if run <= failures {
                return Err(HttpError::new(503, "down"));
            }
            Ok("ok".to_owned())
        }
    });
    (tool, ran)
}

fn exceeded(result: Result<String, RunError>) -> UsageLimitExceeded {
    match result {
        Err(RunError::UsageLimit(exceeded)) => *exceeded,
        other => panic!("expected a usage limit, got {other:?}"),
    }
}

fn with_usage(mut response: ChatResponse, usage: Option<Usage>) -> ChatResponse {
    response.usage = usage;
    response
}

#[tokio::test(start_paused = true)]
async fn a_tool_run_as_a_fallback_counts_against_its_own_cap() {
    let (expensive, expensive_runs) = counted("expensive", 0);
    let (cheap, _) = counted("cheap", u32::MAX);
    let cheap =
        cheap.with_policy(Policy::new().on(PolicyKey::Execution, [Action::fallback("expensive")]));
    let model = ScriptedModel::new()
        .tool_call("expensive", "{}")
        .tool_call("cheap", "{}")
        .text("done");
    let agent = Agent::builder("capped")
        .model(model.clone())
        .tools([expensive, cheap])
        .usage_limits(UsageLimits::new().max_calls_of("expensive", 1))
        .build()
        .unwrap();

    let outcome = agent.run_with_report("go").await;

    let exceeded = exceeded(outcome.result);
    let expensive = UsageLimit::ToolCallsOf {
        tool: "expensive".into(),
    };
    assert_eq!(exceeded.limit, expensive);
    assert_eq!(
        expensive_runs.load(Ordering::SeqCst),
        1,
        "the fallback did not run"
    );
    assert_eq!(exceeded.usage.calls_of["expensive"], 1);
    assert_eq!(model.calls(), 2, "the run ended with the turn");
    assert!(transcript_violations(&outcome.transcript).is_empty());
}

#[tokio::test(start_paused = true)]
async fn each_retry_of_a_tool_body_is_a_tool_call() {
    let (flaky, runs) = counted("flaky", 2);
    let flaky =
        flaky.with_policy(Policy::new().on(PolicyKey::Execution, Action::retry(5).unwrap()));
    let model = ScriptedModel::new().tool_call("flaky", "{}").text("done");
    let agent = Agent::builder("capped")
        .model(model)
        .tool(flaky)
        .usage_limits(UsageLimits::new().max_tool_calls(2))
        .build()
        .unwrap();

    let exceeded = exceeded(agent.run("go").await);

    assert_eq!(exceeded.limit, UsageLimit::ToolCalls);
    assert_eq!(exceeded.usage.tool_calls, 2);
    assert_eq!(runs.load(Ordering::SeqCst), 2, "the third run was refused");
}

/// A tool whose every call fails, repaired by the fixer `json_fixer`.
fn needs_fixing() -> ToolDef {
    let (tool, _) = counted("count_keys", u32::MAX);
    tool.with_policy(Policy::new().on(PolicyKey::Execution, Action::fix("json_fixer", 1).unwrap()))
}

/// A fixer agent whose model would make three requests, each reporting 1,001,000 tokens.
fn greedy_fixer() -> (ScriptedModel, Agent) {
    let model = ScriptedModel::new();
    for _ in 0..2 {
        let call = ToolCall::new(model.next_call_id(), "lookup", "{}");
        let turn = ChatResponse::tool_calls(vec![call]);
        model.push(Reply::response(with_usage(
            turn,
            Some(Usage::new(1_000_000, 1_000)),
        )));
    }
    let answer = ChatResponse::text(r#"{"json": "{}"}"#);
    model.push(Reply::response(with_usage(
        answer,
        Some(Usage::new(1_000_000, 1_000)),
    )));
    let agent = Agent::builder("fixer")
        .model(model.clone())
        .build()
        .unwrap();
    (model, agent)
}

#[tokio::test(start_paused = true)]
async fn a_fixer_agent_spends_from_the_caps_of_the_run_it_repairs() {
    let (fixer_model, fixer) = greedy_fixer();
    let model = ScriptedModel::new();
    let call = ToolCall::new(model.next_call_id(), "count_keys", "{}");
    let turn = ChatResponse::tool_calls(vec![call]);
    model.push(Reply::response(with_usage(turn, Some(Usage::new(100, 10)))));
    model.push(Reply::text("done"));
    let agent = Agent::builder("parent")
        .model(model.clone())
        .tool(needs_fixing())
        .fixer(fixer.into_fixer("json_fixer"))
        .usage_limits(UsageLimits::new().max_requests(2).max_total_tokens(1_000))
        .build()
        .unwrap();

    let outcome = agent.run_with_report("go").await;

    let exceeded = exceeded(outcome.result);
    assert_eq!(exceeded.limit, UsageLimit::TotalTokens);
    assert_eq!(exceeded.usage.tokens, Usage::new(1_000_100, 1_010));
    assert_eq!(
        exceeded.usage.requests, 2,
        "the parent's one and the fixer's one"
    );
    assert_eq!(
        fixer_model.calls(),
        1,
        "the fixer's run stopped at the parent's cap"
    );
    assert_eq!(model.calls(), 1);
    assert!(transcript_violations(&outcome.transcript).is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_fixer_agent_s_requests_count_against_the_run_s_request_cap() {
    let (fixer_model, fixer) = greedy_fixer();
    let model = ScriptedModel::new()
        .tool_call("count_keys", "{}")
        .text("done");
    let agent = Agent::builder("parent")
        .model(model.clone())
        .tool(needs_fixing())
        .fixer(fixer.into_fixer("json_fixer"))
        .usage_limits(UsageLimits::new().max_requests(2))
        .build()
        .unwrap();

    let exceeded = exceeded(agent.run("go").await);

    assert_eq!(exceeded.limit, UsageLimit::Requests);
    assert_eq!(exceeded.usage.requests, 2);
    assert_eq!(
        fixer_model.calls(),
        1,
        "the fixer's second request was not sent"
    );
    assert_eq!(model.calls(), 1);
}

/// An agent capped at `requests` model requests whose model falls back from an overloaded
/// primary to a model that answers "done"; with both models, to count their calls.
fn falling_back(requests: u32) -> (Agent, ScriptedModel, ScriptedModel) {
    let primary = ScriptedModel::named("primary").error(HttpError::new(529, "overloaded"));
    let fallback = ScriptedModel::named("fallback").text("done");
    let model = FallbackModel::new(primary.clone(), fallback.clone())
        .after(1)
        .unwrap();
    let agent = Agent::builder("capped")
        .model(model)
        .usage_limits(UsageLimits::new().max_requests(requests))
        .build()
        .unwrap();
    (agent, primary, fallback)
}

#[tokio::test(start_paused = true)]
async fn a_switch_to_a_fallback_model_is_a_request() {
    let (agent, primary, fallback) = falling_back(1);

    let exceeded = exceeded(agent.run("go").await);

    assert_eq!(exceeded.limit, UsageLimit::Requests);
    assert_eq!(exceeded.usage.requests, 1);
    assert_eq!((primary.calls(), fallback.calls()), (1, 0));
}

#[tokio::test(start_paused = true)]
async fn a_fallback_model_s_answer_counts_within_the_caps() {
    let (agent, primary, fallback) = falling_back(2);

    assert_eq!(agent.run("go").await.unwrap(), "done");
    assert_eq!((primary.calls(), fallback.calls()), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn a_fallback_model_s_answer_is_priced_as_the_model_that_gave_it() {
    let primary = ScriptedModel::named("cheap").error(HttpError::new(529, "overloaded"));
    let fallback = ScriptedModel::named("dear");
    let answer = ChatResponse::text("done");
    fallback.push(Reply::response(with_usage(
        answer,
        Some(Usage::new(1_000_000, 0)),
    )));
    let model = FallbackModel::new(primary, fallback).after(1).unwrap();
    let limits = UsageLimits::new()
        .price("cheap", ModelPrice::per_million_tokens(0.01, 0.01))
        .price("dear", ModelPrice::per_million_tokens(10.0, 10.0))
        .max_cost(1.0);
    let agent = Agent::builder("capped")
        .model(model)
        .usage_limits(limits)
        .build()
        .unwrap();

    let exceeded = exceeded(agent.run("go").await);

    assert_eq!(exceeded.limit, UsageLimit::Cost);
    assert_eq!(
        exceeded.usage.cost, 10.0,
        "the fallback's price, not the primary's"
    );
}

/// Counts the `usage_missing` warnings logged.
#[derive(Clone, Default)]
struct MissingWarnings(Arc<Mutex<u32>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for MissingWarnings {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        struct IsMissing(bool);
        impl tracing::field::Visit for IsMissing {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "event" && format!("{value:?}").contains("usage_missing") {
                    self.0 = true;
                }
            }
        }
        let mut missing = IsMissing(false);
        event.record(&mut missing);
        if missing.0 && *event.metadata().level() == tracing::Level::WARN {
            *self.0.lock().unwrap() += 1;
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_response_without_usage_is_estimated_and_told_once() {
    let warnings = MissingWarnings::default();
    let subscriber = tracing_subscriber::registry().with(warnings.clone());
    let _guard = crate::support::subscriber::set_default(subscriber);
    let model = ScriptedModel::new().tool_call("lookup", "{}").text("done");
    let agent = Agent::builder("capped")
        .model(model)
        .usage_limits(UsageLimits::new().max_total_tokens(1_000))
        .build()
        .unwrap();

    // 8,000 characters: about 2,000 tokens by the estimate, past the cap at the first answer.
    let outcome = agent.run_with_report("x".repeat(8_000)).await;

    let exceeded = exceeded(outcome.result);
    assert_eq!(exceeded.limit, UsageLimit::TotalTokens);
    assert!(
        exceeded.usage.tokens.input_tokens >= 2_000,
        "{:?}",
        exceeded.usage
    );
    outcome.report.assert_events(&["usage_missing"]);
    assert_eq!(*warnings.0.lock().unwrap(), 1);
}

#[tokio::test(start_paused = true)]
async fn responses_without_usage_count_as_the_caps_say_and_are_told_once_a_run() {
    let model = ScriptedModel::new()
        .tool_call("lookup", "{}")
        .tool_call("lookup", "{}")
        .text("done");
    let assumed = MissingUsage::Assume(Usage::new(600, 0));
    let limits = UsageLimits::new()
        .max_total_tokens(1_000)
        .missing_usage(assumed);
    let agent = Agent::builder("capped")
        .model(model.clone())
        .usage_limits(limits)
        .build()
        .unwrap();

    let outcome = agent.run_with_report("go").await;

    let exceeded = exceeded(outcome.result);
    assert_eq!(exceeded.limit, UsageLimit::TotalTokens);
    assert_eq!(exceeded.usage.tokens, Usage::new(1_200, 0));
    assert_eq!(model.calls(), 2);
    assert_eq!(outcome.report.count("usage_missing"), 1);
}

/// A provider that reports zero tokens for an exchange that had some counted nothing: its
/// responses are estimated like responses that report no usage, and it is told once.
#[tokio::test(start_paused = true)]
async fn a_response_reporting_zero_tokens_is_estimated_like_one_reporting_none() {
    let zero = |response| Reply::response(with_usage(response, Some(Usage::new(0, 0))));
    let model = ScriptedModel::new();
    for _ in 0..20 {
        let call = ToolCall::new(model.next_call_id(), "lookup", "{}");
        model.push(zero(ChatResponse::tool_calls(vec![call])));
    }
    model.push(zero(ChatResponse::text("done")));
    let (tool, _) = counted("lookup", 0);
    let agent = Agent::builder("capped")
        .model(model.clone())
        .tool(tool)
        .usage_limits(UsageLimits::new().max_total_tokens(2_000))
        .build()
        .unwrap();

    // 4,000 characters: about 1,000 tokens a request by the estimate.
    let outcome = agent.run_with_report("x".repeat(4_000)).await;

    let exceeded = exceeded(outcome.result);
    assert_eq!(exceeded.limit, UsageLimit::TotalTokens);
    assert!(model.calls() <= 2, "{} requests ran", model.calls());
    assert_eq!(outcome.report.count("usage_missing"), 1);
}
