//! Usage limits on a run: each cap, per tool, per turn, across a resume, and the graceful stop
//! that asks the model once more for its best answer.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use agent_errors::checkpoint::SqliteCheckpoints;
use agent_errors::llm::Usage;
use agent_errors::run::{
    ModelPrice, OnExceed, OutputPolicy, UsageLimit, UsageLimitExceeded, UsageLimits,
};
use agent_errors::testing::{
    Reply, ReportAssertions, ScriptedModel, echo_tool, transcript_violations,
};
use agent_errors::{Agent, ChatResponse, Message, RunError, RunOptions, ToolCall, ToolDef};
use tokio::sync::mpsc;

/// A turn of calls of `name`, reporting `usage`.
fn turn(model: &ScriptedModel, calls: &[&str], usage: Option<Usage>) -> ChatResponse {
    let calls = calls
        .iter()
        .map(|name| ToolCall::new(model.next_call_id(), *name, r#"{"text":"hi"}"#))
        .collect();
    let mut response = ChatResponse::tool_calls(calls);
    response.usage = usage;
    response
}

fn text(answer: &str, usage: Option<Usage>) -> ChatResponse {
    let mut response = ChatResponse::text(answer);
    response.usage = usage;
    response
}

fn agent(model: &ScriptedModel, limits: UsageLimits) -> Agent {
    Agent::builder("capped")
        .model(model.clone())
        .tools([echo_tool("search"), echo_tool("echo")])
        .usage_limits(limits)
        .build()
        .expect("builds")
}

fn exceeded(result: Result<String, RunError>) -> UsageLimitExceeded {
    match result {
        Err(RunError::UsageLimit(exceeded)) => *exceeded,
        other => panic!("expected a usage limit, got {other:?}"),
    }
}

/// The results in `transcript`, as (content, is_error).
fn results(transcript: &[Message]) -> Vec<(String, bool)> {
    transcript
        .iter()
        .filter_map(|m| match m {
            Message::Tool(r) => Some((r.content.clone(), r.is_error)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_request_past_the_request_limit_is_not_sent() {
    let model = ScriptedModel::new();
    model.push(Reply::response(turn(&model, &["echo"], None)));
    model.push(Reply::response(turn(&model, &["echo"], None)));
    model.push(Reply::response(text("done", None)));
    let outcome = agent(&model, UsageLimits::new().max_requests(2))
        .run_with_report("go")
        .await;
    let exceeded = exceeded(outcome.result);
    assert_eq!(exceeded.limit, UsageLimit::Requests);
    assert_eq!(exceeded.usage.requests, 2);
    assert_eq!(exceeded.usage.tool_calls, 2);
    assert_eq!(model.calls(), 2, "the third request was never sent");
    assert!(transcript_violations(&outcome.transcript).is_empty());
    assert_eq!(outcome.report.model_calls, 2);
}

#[tokio::test]
async fn each_token_limit_is_checked_after_the_response_that_went_past_it() {
    let cases = [
        (
            UsageLimits::new().max_input_tokens(100),
            UsageLimit::InputTokens,
        ),
        (
            UsageLimits::new().max_output_tokens(30),
            UsageLimit::OutputTokens,
        ),
        (
            UsageLimits::new().max_total_tokens(150),
            UsageLimit::TotalTokens,
        ),
    ];
    for (limits, limit) in cases {
        let model = ScriptedModel::new();
        // 80 in, 20 out: under every cap; the second response takes each one past its cap.
        model.push(Reply::response(turn(
            &model,
            &["echo"],
            Some(Usage::new(80, 20)),
        )));
        model.push(Reply::response(turn(
            &model,
            &["echo"],
            Some(Usage::new(80, 20)),
        )));
        model.push(Reply::response(text("done", None)));
        let outcome = agent(&model, limits).run_with_report("go").await;
        let exceeded = exceeded(outcome.result);
        assert_eq!(exceeded.limit, limit);
        assert_eq!(exceeded.usage.tokens, Usage::new(160, 40));
        assert_eq!(model.calls(), 2);
        // The first turn's call ran; the response that went past the cap was not acted on.
        assert_eq!(exceeded.usage.tool_calls, 1);
        assert!(transcript_violations(&outcome.transcript).is_empty());
    }
}

#[tokio::test]
async fn the_cost_limit_counts_the_price_of_the_model_that_answered() {
    let model = ScriptedModel::named("priced");
    model.push(Reply::response(turn(
        &model,
        &["echo"],
        Some(Usage::new(1_000_000, 0)),
    )));
    model.push(Reply::response(turn(
        &model,
        &["echo"],
        Some(Usage::new(0, 1_000_000)),
    )));
    model.push(Reply::response(text("done", None)));
    let limits = UsageLimits::new()
        .price("priced", ModelPrice::per_million_tokens(1.0, 4.0))
        .max_cost(3.0);
    let exceeded = exceeded(agent(&model, limits).run("go").await);
    assert_eq!(exceeded.limit, UsageLimit::Cost);
    assert_eq!(exceeded.usage.cost, 5.0);
    assert_eq!(model.calls(), 2);
}

#[tokio::test]
async fn a_turn_past_the_run_s_tool_call_limit_runs_none_of_its_calls() {
    let model = ScriptedModel::new();
    model.push(Reply::response(turn(&model, &["echo", "echo"], None)));
    model.push(Reply::response(turn(&model, &["echo", "echo"], None)));
    model.push(Reply::response(text("done", None)));
    let outcome = agent(&model, UsageLimits::new().max_tool_calls(3))
        .run_with_report("go")
        .await;
    let exceeded = exceeded(outcome.result);
    assert_eq!(exceeded.limit, UsageLimit::ToolCalls);
    assert_eq!(exceeded.usage.tool_calls, 2);
    let results = results(&outcome.transcript);
    assert_eq!(results.len(), 4, "every call is answered: {results:?}");
    assert_eq!(results[0], ("hi".to_owned(), false));
    assert!(results[2].1 && results[2].0.contains("not run"));
    assert!(results[3].1 && results[3].0.contains("not run"));
    assert!(transcript_violations(&outcome.transcript).is_empty());
}

#[tokio::test]
async fn a_model_asking_for_ten_thousand_calls_in_one_turn_is_stopped_by_default() {
    let ran = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&ran);
    let tool = ToolDef::new("echo", "Counts its calls.", move |_: serde_json::Value| {
        let counted = Arc::clone(&counted);
        async move {
            counted.fetch_add(1, Ordering::SeqCst);
            Ok::<_, std::convert::Infallible>("ok".to_owned())
        }
    });
    let model = ScriptedModel::new();
    let calls = vec!["echo"; 10_000];
    model.push(Reply::response(turn(&model, &calls, None)));
    model.push(Reply::response(text("done", None)));
    let agent = Agent::builder("flooded")
        .model(model.clone())
        .tool(tool)
        .build()
        .expect("builds");
    let outcome = agent.run_with_report("go").await;
    let exceeded = exceeded(outcome.result);
    assert_eq!(exceeded.limit, UsageLimit::ToolCallsPerTurn);
    assert_eq!(ran.load(Ordering::SeqCst), 0, "no call of the turn ran");
    assert_eq!(results(&outcome.transcript).len(), 10_000);
    assert!(transcript_violations(&outcome.transcript).is_empty());
}

#[tokio::test]
async fn a_per_turn_limit_lets_through_a_turn_at_the_limit() {
    let model = ScriptedModel::new();
    model.push(Reply::response(turn(&model, &["echo"; 3], None)));
    model.push(Reply::response(text("done", None)));
    let limits = UsageLimits::new().max_tool_calls_per_turn(3);
    assert_eq!(agent(&model, limits).run("go").await.unwrap(), "done");
}

#[tokio::test]
async fn a_tool_s_own_limit_counts_only_its_calls() {
    let model = ScriptedModel::new();
    model.push(Reply::response(turn(&model, &["search", "echo"], None)));
    model.push(Reply::response(turn(
        &model,
        &["search", "echo", "echo"],
        None,
    )));
    model.push(Reply::response(turn(&model, &["search"], None)));
    model.push(Reply::response(text("done", None)));
    let outcome = agent(&model, UsageLimits::new().max_calls_of("search", 2))
        .run_with_report("go")
        .await;
    let exceeded = exceeded(outcome.result);
    assert_eq!(
        exceeded.limit,
        UsageLimit::ToolCallsOf {
            tool: "search".to_owned()
        }
    );
    assert_eq!(exceeded.usage.calls_of.get("search"), Some(&2));
    assert_eq!(exceeded.usage.tool_calls, 5);
    assert_eq!(model.calls(), 3);
    assert!(transcript_violations(&outcome.transcript).is_empty());
}

#[tokio::test]
async fn the_graceful_stop_asks_once_without_tools_and_returns_the_answer() {
    let model = ScriptedModel::new();
    model.push(Reply::response(turn(&model, &["search"], None)));
    model.push(Reply::response(text(
        "my best answer",
        Some(Usage::new(10, 5)),
    )));
    let limits = UsageLimits::new()
        .max_tool_calls(0)
        .on_exceed(UsageLimit::ToolCalls, OnExceed::FinalAnswer);
    let outcome = agent(&model, limits).run_with_report("go").await;
    assert_eq!(outcome.result.unwrap(), "my best answer");
    assert_eq!(model.calls(), 2);
    let last = model.last_request().expect("asked");
    assert!(last.tools.is_empty(), "the final request offers no tools");
    let Some(Message::User { content }) = last.messages.last() else {
        panic!("the final request ends with the stop's question: {last:?}");
    };
    assert!(content.contains("limit on tool calls"), "{content}");
    assert!(
        outcome
            .report
            .event_names()
            .contains(&"usage_limit_reached")
    );
    assert_eq!(outcome.report.model_calls, 2, "the last request is counted");
    assert_eq!(outcome.report.usage, Usage::new(10, 5));
    assert!(transcript_violations(&outcome.transcript).is_empty());
}

#[tokio::test]
async fn the_graceful_stop_past_the_request_limit_sends_exactly_one_more_request() {
    let model = ScriptedModel::new();
    model.push(Reply::response(turn(&model, &["echo"], None)));
    model.push(Reply::response(text("best so far", None)));
    let limits = UsageLimits::new()
        .max_requests(1)
        .on_exceed(UsageLimit::Requests, OnExceed::FinalAnswer);
    assert_eq!(
        agent(&model, limits).run("go").await.unwrap(),
        "best so far"
    );
    assert_eq!(model.calls(), 2);
}

#[tokio::test]
async fn a_final_request_answered_with_tool_calls_ends_with_the_limit_and_does_not_loop() {
    let model = ScriptedModel::new();
    model.push(Reply::response(turn(&model, &["echo"], None)));
    model.push(Reply::response(turn(&model, &["echo"], None)));
    model.push(Reply::response(turn(&model, &["echo"], None)));
    let limits = UsageLimits::new()
        .max_requests(1)
        .on_exceed(UsageLimit::Requests, OnExceed::FinalAnswer);
    let outcome = agent(&model, limits).run_with_report("go").await;
    let exceeded = exceeded(outcome.result);
    assert_eq!(exceeded.limit, UsageLimit::Requests);
    assert_eq!(model.calls(), 2, "one last request, never a loop");
    assert!(transcript_violations(&outcome.transcript).is_empty());
    assert!(
        !matches!(outcome.transcript.last(), Some(Message::User { .. })),
        "the stop's question is not left dangling"
    );
}

/// A tool that tells the test it started, then never returns: the run is killed in it.
fn hanging(started: mpsc::UnboundedSender<()>) -> ToolDef {
    ToolDef::new("echo", "Hangs.", move |_: serde_json::Value| {
        let started = started.clone();
        async move {
            let _ = started.send(());
            std::future::pending::<Result<String, std::convert::Infallible>>().await
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_and_limits_hold_across_a_resume() {
    let dir = std::env::temp_dir().join(format!("agent-errors-usage-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let path = dir.join("runs.db");

    let model = ScriptedModel::new();
    model.push(Reply::response(turn(
        &model,
        &["echo"],
        Some(Usage::new(40, 10)),
    )));
    let (sender, mut started) = mpsc::unbounded_channel();
    let first = Agent::builder("durable")
        .model(model.clone())
        .tool(hanging(sender))
        .checkpoints(SqliteCheckpoints::open(&path).expect("opens"))
        .usage_limits(UsageLimits::new().max_requests(2).max_calls_of("echo", 2))
        .build()
        .expect("builds");
    let options = RunOptions::new().run_id("capped-run");
    let task = tokio::spawn(async move { first.run_with("go", options).await });
    started.recv().await.expect("the tool started");
    task.abort();
    let _ = task.await;

    // Another process, whose agent has no caps of its own: the run keeps those it started with.
    let model = ScriptedModel::new();
    model.push(Reply::response(turn(
        &model,
        &["echo"],
        Some(Usage::new(40, 10)),
    )));
    model.push(Reply::response(text("done", None)));
    let resumed = Agent::builder("durable")
        .model(model.clone())
        .tool(echo_tool("echo"))
        .checkpoints(SqliteCheckpoints::open(&path).expect("opens"))
        .usage_limits(UsageLimits::none())
        .build()
        .expect("builds");
    let outcome = resumed.resume("capped-run", RunOptions::new()).await;
    let exceeded = exceeded(outcome.result);
    assert_eq!(exceeded.limit, UsageLimit::Requests);
    assert_eq!(
        exceeded.usage.requests, 2,
        "the first process's request counts"
    );
    assert_eq!(exceeded.usage.tokens, Usage::new(80, 20));
    // The interrupted call's outcome is unknown, so the model's repeat of it is answered, not
    // run: the first process's one call of `echo` is all that counts.
    assert_eq!(exceeded.usage.calls_of.get("echo"), Some(&1));
    assert_eq!(model.calls(), 1, "one request left after the resume");
    assert!(transcript_violations(&outcome.transcript).is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A model request retried by `on_llm_error` is a request: the retries stop at the cap.
#[tokio::test(start_paused = true)]
async fn on_llm_error_retries_stop_at_the_request_limit() {
    let model = ScriptedModel::new();
    for _ in 0..5 {
        model.push(Reply::error(std::io::Error::other("overloaded")));
    }
    model.push(Reply::response(text("done", None)));
    let agent = Agent::builder("capped")
        .model(model.clone())
        .usage_limits(UsageLimits::new().max_requests(2))
        .on_llm_error(|_, _| {
            agent_errors::LlmErrorDecision::retry(10, std::time::Duration::from_millis(1))
        })
        .build()
        .expect("builds");
    let outcome = agent.run_with_report("go").await;
    assert!(outcome.result.is_err(), "{:?}", outcome.result);
    assert_eq!(model.calls(), 2, "no request past the cap was sent");
}

/// A streamed run spends from the same caps: its requests and the tokens its streamed
/// responses report stop it as they would a run that is not streamed.
#[tokio::test]
async fn a_streamed_run_stops_at_its_caps() {
    for (limits, limit) in [
        (UsageLimits::new().max_requests(2), UsageLimit::Requests),
        (
            UsageLimits::new().max_total_tokens(150),
            UsageLimit::TotalTokens,
        ),
    ] {
        let model = ScriptedModel::new();
        for _ in 0..3 {
            let usage = Some(Usage::new(80, 20));
            model.push(Reply::response(turn(&model, &["echo"], usage)));
        }
        model.push(Reply::response(text("done", None)));
        let (sender, mut deltas) = mpsc::channel(1024);
        let options = RunOptions::new().stream_to(sender);
        let outcome = agent(&model, limits).run_with("go", options).await;
        assert_eq!(exceeded(outcome.result).limit, limit);
        assert_eq!(model.calls(), 2, "no request past the cap was sent");
        assert!(deltas.try_recv().is_ok(), "the run was streamed");
    }
}

/// The retries of `PersistentRetry` around the run's model are requests: they stop at the cap.
#[tokio::test(start_paused = true)]
async fn persistent_retries_stop_at_the_request_limit() {
    let model = ScriptedModel::new();
    for _ in 0..5 {
        model.push(Reply::error(agent_errors::HttpError::new(
            503,
            "unavailable",
        )));
    }
    model.push(Reply::response(text("done", None)));
    let agent = Agent::builder("capped")
        .model(agent_errors::llm::PersistentRetry::new(model.clone()))
        .usage_limits(UsageLimits::new().max_requests(2))
        .build()
        .expect("builds");
    let outcome = agent.run_with_report("go").await;
    assert!(outcome.result.is_err(), "{:?}", outcome.result);
    assert_eq!(model.calls(), 2, "no request past the cap was sent");
}

/// Why building an agent with `limits` (and the tools `search` and `echo`, on a model named
/// `priced`) was refused.
fn refused(limits: UsageLimits) -> String {
    let built = Agent::builder("capped")
        .model(ScriptedModel::named("priced"))
        .tools([echo_tool("search"), echo_tool("echo")])
        .usage_limits(limits)
        .build();
    match built {
        Err(error) => error.to_string(),
        Ok(_) => panic!("built an agent whose limit could never apply"),
    }
}

#[test]
fn a_cap_on_the_calls_of_a_tool_the_agent_lacks_is_refused_at_build() {
    let error = refused(UsageLimits::new().max_calls_of("serach", 3));
    assert!(error.contains("`serach`"), "{error}");
    assert!(error.contains("did you mean `search`?"), "{error}");
}

#[test]
fn a_cost_cap_without_a_price_for_the_agent_s_model_is_refused_at_build() {
    let unpriced = UsageLimits::new()
        .price("gpt-4o", ModelPrice::per_million_tokens(2.5, 10.0))
        .max_cost(0.5);
    let error = refused(unpriced);
    assert!(error.contains("no price for model `priced`"), "{error}");

    let priced = UsageLimits::new()
        .price("priced", ModelPrice::per_million_tokens(2.5, 10.0))
        .max_cost(0.5)
        .max_calls_of("search", 3);
    let model = ScriptedModel::named("priced");
    agent(&model, priced);
}

#[test]
fn a_cost_cap_or_price_that_is_not_an_amount_is_refused_at_build() {
    let price = ModelPrice::per_million_tokens(2.5, 10.0);
    let nan_cap = UsageLimits::new().price("priced", price).max_cost(f64::NAN);
    let error = refused(nan_cap);
    assert!(error.contains("max_cost(NaN)"), "{error}");

    let taking_back = ModelPrice::per_million_tokens(2.5, -10.0);
    let negative = UsageLimits::new()
        .price("priced", taking_back)
        .max_cost(0.5);
    let error = refused(negative);
    assert!(error.contains("the price of `priced`"), "{error}");

    let endless = UsageLimits::new()
        .price("priced", price)
        .max_cost(f64::INFINITY);
    assert!(refused(endless).contains("max_cost(inf)"));
}

#[test]
fn a_cost_cap_without_a_price_for_the_output_fallback_model_is_refused_at_build() {
    let limits = UsageLimits::new()
        .price("priced", ModelPrice::per_million_tokens(2.5, 10.0))
        .max_cost(0.5);
    let built = Agent::builder("capped")
        .model(ScriptedModel::named("priced"))
        .output_policy(OutputPolicy::retry(1).then_fallback(ScriptedModel::named("backup")))
        .usage_limits(limits)
        .build();
    let Err(error) = built else {
        panic!("built an agent whose fallback's tokens would cost nothing");
    };
    assert!(
        error.to_string().contains("no price for model `backup`"),
        "{error}"
    );
}

#[test]
fn a_final_answer_chosen_for_a_cap_the_limits_do_not_set_is_refused_at_build() {
    // No request cap: the graceful stop chosen for it could never happen.
    let error = refused(
        UsageLimits::new()
            .max_total_tokens(1_000)
            .on_exceed(UsageLimit::Requests, OnExceed::FinalAnswer),
    );
    assert!(error.contains("model requests"), "{error}");
    // Chosen for caps that are set, it builds.
    let set = UsageLimits::new()
        .max_requests(3)
        .on_exceed(UsageLimit::Requests, OnExceed::FinalAnswer)
        .on_exceed(UsageLimit::ToolCallsPerTurn, OnExceed::FinalAnswer);
    agent(&ScriptedModel::new(), set);
}

#[tokio::test]
async fn a_runs_own_usage_limits_are_refused_as_the_builder_refuses_the_agents() {
    use agent_errors::build::ConfigProblem;
    use agent_errors::run::{OnExceed, UsageLimit, UsageLimits};
    let model = agent_errors::testing::ScriptedModel::new().text("never asked");
    let agent = agent_errors::Agent::builder("a")
        .model(model.clone())
        .tool(agent_errors::testing::echo_tool("search"))
        .build()
        .unwrap();
    let limits = UsageLimits::new()
        .max_requests(3)
        .on_exceed(UsageLimit::ToolCalls, OnExceed::FinalAnswer)
        .max_calls_of("serach", 1);
    let options = agent_errors::RunOptions::new().usage_limits(limits);
    let outcome = agent.run_with("hi", options).await;
    match outcome.result {
        Err(agent_errors::RunError::InvalidUsageLimits(error)) => {
            let problems = error.problems();
            assert!(problems.contains(&ConfigProblem::FinalAnswerForUnsetCap {
                limit: UsageLimit::ToolCalls
            }));
            assert!(problems.contains(&ConfigProblem::UnknownCappedTool {
                tool: "serach".into(),
                did_you_mean: Some("search".into()),
            }));
        }
        other => panic!("expected the limits to be refused: {other:?}"),
    }
    assert_eq!(model.calls(), 0, "the run did not start");
}
