//! `on_llm_error`: what the loop does when the model call itself fails.

use std::io;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_errors::Event;
use agent_errors::testing::{ReportAssertions, ScriptedModel, echo_tool};
use agent_errors::{Agent, AgentBuilder, RunError, run::Json};
use agent_errors::{Cancellation, ChatResponse, LlmErrorDecision, retry::ZeroAttempts};
use tokio::time::Instant;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn refused() -> io::Error {
    io::Error::from(io::ErrorKind::ConnectionRefused)
}

/// A model error that says which call produced it, so "the original error" can be checked.
#[derive(Debug, thiserror::Error)]
#[error("model down (call {0})")]
struct Down(u32);

fn numbered_failures(model: ScriptedModel) -> ScriptedModel {
    let n = Arc::new(AtomicU32::new(0));
    model.then_fail_forever(move || Down(n.fetch_add(1, Ordering::SeqCst) + 1))
}

#[tokio::test(start_paused = true)]
async fn without_a_handler_the_original_error_comes_back_unchanged() {
    let model = ScriptedModel::new().then_fail_forever(refused);
    let agent = Agent::builder("a").model(model.clone()).build().unwrap();

    let err = agent.run("hi").await.unwrap_err();

    let io_err = err
        .model_error()
        .and_then(|e| e.downcast_ref::<io::Error>())
        .expect("the model's io::Error, not a wrapper");
    assert_eq!(io_err.kind(), io::ErrorKind::ConnectionRefused);
    assert_eq!(err.to_string(), refused().to_string());
    assert_eq!(model.calls(), 1, "Rethrow is the default: no retry");
    let owned = err.into_model_error().unwrap();
    assert!(owned.downcast::<io::Error>().is_ok());
}

#[tokio::test(start_paused = true)]
async fn rethrow_returns_the_error_the_handler_was_shown() {
    let model = numbered_failures(ScriptedModel::new());
    let agent = Agent::builder("a")
        .model(model)
        .on_llm_error(|_, _| LlmErrorDecision::Rethrow)
        .build()
        .unwrap();
    let err = agent.run("hi").await.unwrap_err();
    assert_eq!(
        err.model_error().unwrap().downcast_ref::<Down>().unwrap().0,
        1
    );
}

#[tokio::test(start_paused = true)]
async fn respond_with_ends_the_run_with_that_output() {
    let model = ScriptedModel::new().then_fail_forever(refused);
    let agent = Agent::builder("a")
        .model(model.clone())
        .on_llm_error(|_, _| LlmErrorDecision::RespondWith("fallback".to_owned()))
        .build()
        .unwrap();
    assert_eq!(agent.run("hi").await.unwrap(), "fallback");
    assert_eq!(model.calls(), 1);
}

#[derive(Debug, PartialEq, serde::Deserialize, schemars::JsonSchema)]
struct Report {
    findings: Vec<String>,
}

#[tokio::test(start_paused = true)]
async fn respond_with_takes_the_agents_typed_output() {
    let model = ScriptedModel::new().then_fail_forever(refused);
    let agent = AgentBuilder::<Json<Report>>::new("typed")
        .model(model)
        .on_llm_error(|_, _| LlmErrorDecision::RespondWith(Json(Report { findings: vec![] })))
        .build()
        .unwrap();
    let Json(report) = agent.run("analyse").await.unwrap();
    assert_eq!(report, Report { findings: vec![] });
}

#[tokio::test(start_paused = true)]
async fn retry_recovers_when_the_model_comes_back() {
    let model = ScriptedModel::new().errors(2, refused).text("the answer");
    let agent = Agent::builder("a")
        .model(model.clone())
        .on_llm_error(|_, _| LlmErrorDecision::retry(3, ms(500)))
        .build()
        .unwrap();
    let outcome = agent.run_with_report("hi").await;
    assert_eq!(outcome.result.unwrap(), "the answer");
    assert_eq!(model.calls(), 3);
    outcome
        .report
        .assert_events(&["llm_retry", "llm_retry"])
        .assert_turns(1)
        .assert_model_calls(3);
}

#[tokio::test(start_paused = true)]
async fn retry_that_runs_out_returns_the_latest_original_error() {
    let model = numbered_failures(ScriptedModel::new());
    let asked = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&asked);
    let agent = Agent::builder("a")
        .model(model.clone())
        .on_llm_error(move |err, attempt| {
            log.lock().unwrap().push((attempt, err.to_string()));
            LlmErrorDecision::retry(3, ms(500))
        })
        .build()
        .unwrap();

    let err = agent.run("hi").await.unwrap_err();

    assert_eq!(
        *asked.lock().unwrap(),
        [
            (1, "model down (call 1)".to_owned()),
            (2, "model down (call 2)".to_owned()),
            (3, "model down (call 3)".to_owned()),
        ],
        "asked after every failure, with the attempt number"
    );
    assert_eq!(model.calls(), 3, "max_attempts counts the first call");
    assert_eq!(
        err.model_error().unwrap().downcast_ref::<Down>().unwrap().0,
        3
    );
}

#[tokio::test(start_paused = true)]
async fn the_handler_may_switch_decision_between_failures() {
    let model = ScriptedModel::new().then_fail_forever(refused);
    let agent = Agent::builder("a")
        .model(model.clone())
        .on_llm_error(|_, attempt| {
            if attempt == 1 {
                LlmErrorDecision::retry(5, ms(100))
            } else {
                Ok(LlmErrorDecision::RespondWith("fallback".to_owned()))
            }
        })
        .build()
        .unwrap();
    assert_eq!(agent.run("hi").await.unwrap(), "fallback");
    assert_eq!(model.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn retry_with_zero_attempts_is_rejected_and_never_retries() {
    assert_eq!(
        LlmErrorDecision::<String>::retry(0, ms(500)),
        Err(ZeroAttempts)
    );

    // A handler that passes the rejection on is not read as "give up": the run ends with an
    // error that names the mistake and what to return instead, after the one call.
    let model = ScriptedModel::new().then_fail_forever(refused);
    let agent = Agent::builder("a")
        .model(model.clone())
        .on_llm_error(|_, _| LlmErrorDecision::retry(0, ms(500)))
        .build()
        .unwrap();
    let err = agent.run("hi").await.unwrap_err();
    assert!(
        matches!(err, RunError::InvalidLlmDecision(ZeroAttempts)),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(
        message.contains("retry(0, ..)") && message.contains("LlmErrorDecision::Rethrow"),
        "{message}"
    );
    assert_eq!(model.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn backoff_doubles_from_the_initial_delay() {
    let calls_at = Arc::new(Mutex::new(Vec::new()));
    let model = ScriptedModel::new();
    for i in 0..4 {
        let calls_at = Arc::clone(&calls_at);
        model.push(agent_errors::testing::Reply::computed(move |_| {
            calls_at.lock().unwrap().push(Instant::now());
            if i < 3 {
                Err(refused().into())
            } else {
                Ok(ChatResponse::text("ok"))
            }
        }));
    }
    let agent = Agent::builder("a")
        .model(model)
        .on_llm_error(|_, _| LlmErrorDecision::retry(4, ms(500)))
        .build()
        .unwrap();

    let outcome = agent.run_with_report("hi").await;

    assert_eq!(outcome.result.unwrap(), "ok");
    let at = calls_at.lock().unwrap();
    let gaps: Vec<Duration> = at.windows(2).map(|w| w[1] - w[0]).collect();
    assert_eq!(gaps, [ms(500), ms(1000), ms(2000)]);
    let delays: Vec<_> = outcome
        .report
        .events
        .iter()
        .map(|e| match e {
            Event::LlmRetry { attempt, delay, .. } => (*attempt, *delay),
            other => panic!("unexpected event {other:?}"),
        })
        .collect();
    assert_eq!(delays, [(1, ms(500)), (2, ms(1000)), (3, ms(2000))]);
}

#[tokio::test(start_paused = true)]
async fn retries_do_not_use_up_turns() {
    let model = ScriptedModel::new()
        .errors(2, refused)
        .tool_call("echo", r#"{"text": "x"}"#)
        .errors(2, refused)
        .text("done");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tool(echo_tool("echo"))
        .max_turns(2)
        .on_llm_error(|_, _| LlmErrorDecision::retry(3, ms(10)))
        .build()
        .unwrap();
    let outcome = agent.run_with_report("hi").await;
    assert_eq!(outcome.result.unwrap(), "done");
    outcome.report.assert_turns(2).assert_model_calls(6);
}

#[tokio::test(start_paused = true)]
async fn the_retry_budget_resets_every_turn() {
    let model = ScriptedModel::new()
        .error(refused())
        .tool_call("echo", r#"{"text": "x"}"#)
        .error(refused())
        .tool_call("echo", r#"{"text": "y"}"#)
        .error(refused())
        .text("done");
    let attempts = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&attempts);
    let agent = Agent::builder("a")
        .model(model)
        .tool(echo_tool("echo"))
        .on_llm_error(move |_, attempt| {
            log.lock().unwrap().push(attempt);
            LlmErrorDecision::retry(2, ms(10))
        })
        .build()
        .unwrap();
    // A per-run budget of 2 calls would have run out on the second turn.
    assert_eq!(agent.run("hi").await.unwrap(), "done");
    assert_eq!(*attempts.lock().unwrap(), [1, 1, 1]);
}

#[tokio::test(start_paused = true)]
async fn cancellation_does_not_reach_the_handler() {
    let model = ScriptedModel::new()
        .reply(agent_errors::testing::Reply::text("too late").after(Duration::from_secs(60)));
    let asked = Arc::new(AtomicU32::new(0));
    let counter = Arc::clone(&asked);
    let agent = Agent::builder("a")
        .model(model)
        .on_llm_error(move |_, _| {
            counter.fetch_add(1, Ordering::SeqCst);
            LlmErrorDecision::RespondWith("handler".to_owned())
        })
        .build()
        .unwrap();
    let cancel = Cancellation::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        trigger.cancel();
    });
    let start = Instant::now();
    let err = agent.run_cancellable("hi", cancel).await.unwrap_err();
    assert!(matches!(err, RunError::Cancelled), "{err:?}");
    assert_eq!(
        start.elapsed(),
        Duration::from_secs(1),
        "the model call was abandoned"
    );
    assert_eq!(asked.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn cancellation_interrupts_a_retry_backoff() {
    let model = ScriptedModel::new().then_fail_forever(refused);
    let agent = Agent::builder("a")
        .model(model.clone())
        .on_llm_error(|_, _| LlmErrorDecision::retry(5, Duration::from_secs(100)))
        .build()
        .unwrap();
    let cancel = Cancellation::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        trigger.cancel();
    });
    let err = agent.run_cancellable("hi", cancel).await.unwrap_err();
    assert!(err.is_cancelled());
    assert_eq!(model.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn the_turn_cap_does_not_reach_the_handler() {
    let model = ScriptedModel::new()
        .tool_call("echo", r#"{"text": "1"}"#)
        .tool_call("echo", r#"{"text": "2"}"#)
        .text("never asked");
    let asked = Arc::new(AtomicU32::new(0));
    let counter = Arc::clone(&asked);
    let agent = Agent::builder("a")
        .model(model.clone())
        .tool(echo_tool("echo"))
        .max_turns(2)
        .on_llm_error(move |_, _| {
            counter.fetch_add(1, Ordering::SeqCst);
            LlmErrorDecision::RespondWith("handler".to_owned())
        })
        .build()
        .unwrap();
    let err = agent.run("hi").await.unwrap_err();
    assert!(matches!(err, RunError::TurnCap { max_turns: 2 }), "{err:?}");
    assert_eq!(model.calls(), 2);
    assert_eq!(asked.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn a_large_retry_budget_is_capped_like_every_schedule() {
    let model = ScriptedModel::new().then_fail_forever(refused);
    let agent = Agent::builder("a")
        .model(model.clone())
        .on_llm_error(|_, _| LlmErrorDecision::retry(20, ms(500)))
        .build()
        .unwrap();
    let start = Instant::now();
    let outcome = agent.run_with_report("hi").await;

    assert!(matches!(outcome.result, Err(RunError::Model(_))));
    assert_eq!(model.calls(), 20);
    let delays: Vec<Duration> = outcome
        .report
        .events
        .iter()
        .filter_map(|e| match e {
            Event::LlmRetry { delay, .. } => Some(*delay),
            _ => None,
        })
        .collect();
    assert_eq!(delays.len(), 19);
    assert!(
        delays.iter().all(|d| *d <= Duration::from_secs(32)),
        "{delays:?}"
    );
    assert_eq!(delays.last(), Some(&Duration::from_secs(32)));
    let bound = Duration::from_secs(32).mul_f64(19.0 * 1.25);
    assert!(Instant::now() - start <= bound);
}

#[tokio::test(start_paused = true)]
async fn retry_after_replaces_the_backoff_between_model_calls() {
    let busy = || agent_errors::HttpError::new(503, "busy").with_header("retry-after", "7");
    let model = ScriptedModel::new().errors(1, busy).text("ok");
    let agent = Agent::builder("a")
        .model(model.clone())
        .on_llm_error(|_, _| LlmErrorDecision::retry(3, ms(500)))
        .build()
        .unwrap();
    let start = Instant::now();
    assert_eq!(agent.run("hi").await.unwrap(), "ok");
    assert_eq!(Instant::now() - start, Duration::from_secs(7));

    // A server asking for a day is cut to a minute, as in the model wrappers.
    let slow = || agent_errors::HttpError::new(429, "later").with_header("retry-after", "86400");
    let model = ScriptedModel::new().errors(1, slow).text("ok");
    let agent = Agent::builder("a")
        .model(model)
        .on_llm_error(|_, _| LlmErrorDecision::retry(3, ms(500)))
        .build()
        .unwrap();
    let start = Instant::now();
    assert_eq!(agent.run("hi").await.unwrap(), "ok");
    assert_eq!(Instant::now() - start, Duration::from_secs(60));
}

/// A handler that says `retry` for every failure, as the README's example does.
fn retry_three_times()
-> impl Fn(&agent_errors::run::ModelError, u32) -> Result<LlmErrorDecision, ZeroAttempts>
+ Send
+ Sync
+ 'static {
    |_, _| LlmErrorDecision::retry(3, ms(500))
}

#[tokio::test(start_paused = true)]
async fn retry_does_not_call_again_what_cannot_succeed() {
    let cannot_succeed = [
        agent_errors::HttpError::new(400, "invalid request: unknown field `temprature`"),
        agent_errors::HttpError::new(
            400,
            "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.",
        ),
        agent_errors::HttpError::new(401, "invalid api key"),
        agent_errors::HttpError::new(403, "forbidden"),
        agent_errors::HttpError::new(429, "You exceeded your current quota: insufficient_quota"),
    ];
    for error in cannot_succeed {
        let status = error.status();
        let model = ScriptedModel::new().then_fail_forever(move || error.clone());
        let agent = Agent::builder("a")
            .model(model.clone())
            .on_llm_error(retry_three_times())
            .build()
            .unwrap();
        let outcome = agent.run_with_report("hi").await;
        let err = outcome.result.unwrap_err();
        let http = err
            .model_error()
            .unwrap()
            .downcast_ref::<agent_errors::HttpError>();
        assert_eq!(http.map(|e| e.status()), Some(status));
        assert_eq!(
            model.calls(),
            1,
            "HTTP {status} is called once under retry(3, ..)"
        );
        outcome.report.assert_count("llm_retry", 0);
    }
}

#[tokio::test(start_paused = true)]
async fn retry_calls_again_what_can_succeed() {
    let model = ScriptedModel::new()
        .then_fail_forever(|| agent_errors::HttpError::new(503, "service unavailable"));
    let agent = Agent::builder("a")
        .model(model.clone())
        .on_llm_error(retry_three_times())
        .build()
        .unwrap();
    let outcome = agent.run_with_report("hi").await;
    assert!(outcome.result.unwrap_err().model_error().is_some());
    assert_eq!(model.calls(), 3);
    outcome.report.assert_count("llm_retry", 2);
}

#[tokio::test(start_paused = true)]
async fn retry_regardless_calls_again_what_the_status_calls_hopeless() {
    assert_eq!(
        LlmErrorDecision::<String>::retry_regardless(0, ms(500)),
        Err(ZeroAttempts)
    );
    let model = ScriptedModel::new()
        .errors(2, || {
            agent_errors::HttpError::new(400, "gateway: backend restarting")
        })
        .text("the answer");
    let agent = Agent::builder("a")
        .model(model.clone())
        .on_llm_error(|_, _| LlmErrorDecision::retry_regardless(3, ms(500)))
        .build()
        .unwrap();
    assert_eq!(agent.run("hi").await.unwrap(), "the answer");
    assert_eq!(model.calls(), 3);
}

#[tokio::test(start_paused = true)]
async fn model_call_retries_spend_the_runs_retry_allowance() {
    let model = numbered_failures(ScriptedModel::new());
    let agent = Agent::builder("a")
        .model(model.clone())
        .limits(agent_errors::Limits::default().with_max_retries(2))
        .on_llm_error(|_, _| LlmErrorDecision::retry(10, ms(500)))
        .build()
        .unwrap();
    let err = agent.run("hi").await.unwrap_err();
    assert_eq!(
        model.calls(),
        3,
        "the first call and the two retries the run allows"
    );
    assert_eq!(
        err.model_error().unwrap().downcast_ref::<Down>().unwrap().0,
        3
    );
}

/// A runtime built without its timer would panic at the first backoff, mid-run: the run is
/// refused before the model is asked, with an error saying what to enable.
#[test]
fn a_runtime_without_a_timer_is_refused_at_run_start_not_a_panic_at_the_first_retry() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime without enable_time");
    let model = ScriptedModel::new()
        .error(agent_errors::HttpError::new(503, "busy"))
        .text("answered after a retry");
    let agent = Agent::builder("a")
        .model(model.clone())
        .on_llm_error(|_, _| LlmErrorDecision::retry(3, ms(100)))
        .build()
        .unwrap();

    let result = runtime.block_on(agent.run("hi"));

    let Err(error) = result else {
        panic!("ran without a timer: {result:?}")
    };
    assert!(matches!(error, RunError::NoTimer), "{error:?}");
    assert!(error.to_string().contains("enable_time()"), "{error}");
    assert_eq!(model.calls(), 0, "refused before the model is asked");
}

/// The timer is looked for once per runtime, not once per run: a thread that already ran on a
/// runtime with a timer still refuses a run on another runtime without one.
#[test]
fn a_runtime_without_a_timer_is_refused_after_a_run_on_one_with_a_timer() {
    let agent = |model: &ScriptedModel| {
        Agent::builder("a")
            .model(model.clone())
            .on_llm_error(|_, _| LlmErrorDecision::retry(3, ms(100)))
            .build()
            .unwrap()
    };
    let timed = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime with its timer");
    let answered = ScriptedModel::new().text("the answer");
    assert_eq!(
        timed.block_on(agent(&answered).run("hi")).unwrap(),
        "the answer"
    );
    let untimed = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime without enable_time");
    let refused = ScriptedModel::new().text("not asked");

    let result = untimed.block_on(agent(&refused).run("hi"));

    assert!(matches!(result, Err(RunError::NoTimer)), "{result:?}");
    assert_eq!(refused.calls(), 0, "refused before the model is asked");
    let again = ScriptedModel::new().text("again");
    assert_eq!(timed.block_on(agent(&again).run("hi")).unwrap(), "again");
}
