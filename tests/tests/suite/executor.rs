//! The executor, driven as a user would: tools and fixers registered by hand, one call at a time.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use agent_errors::breaker::{BreakerState, ServiceBreaker};
use agent_errors::build::ConfigProblem;
use agent_errors::policy::{PolicyKey, PolicyLayer};
use agent_errors::{
    ErrorKind, Fix, FixRequest, FixerError, HttpError, Registry, RunContext, Severity, ToolCall,
    ToolDef, ToolError,
    build::FixerDef,
    call::CallOutcome,
    policy::{Action, Ladder, Policy},
};
use agent_errors::{permission::Permission, run::TerminationReason};
use serde::Deserialize;

#[derive(Deserialize, schemars::JsonSchema)]
struct NameArgs {
    name: String,
}

/// A tool that fails with `errors` in order, then greets; counts its calls.
fn scripted_tool(name: &'static str, errors: Vec<HttpError>) -> (ToolDef, Arc<AtomicU32>) {
    let calls = Arc::new(AtomicU32::new(0));
    let counter = calls.clone();
    let errors = Arc::new(errors);
    let tool = ToolDef::new(name, "Greets someone.", move |args: NameArgs| {
        let counter = counter.clone();
        let errors = errors.clone();
        async move {
            let n = counter.fetch_add(1, Ordering::SeqCst) as usize;
            match errors.get(n) {
                Some(e) => Err(e.clone()),
                None => Ok(format!("hello {}", args.name)),
            }
        }
    });
    (tool, calls)
}

/// A registry holding just this tool.
fn registry_of(tool: ToolDef) -> Registry {
    Registry::builder()
        .tool(tool)
        .build()
        .expect("one tool with a valid policy")
}

fn call(name: &str, args: &str) -> ToolCall {
    ToolCall::new("call-1", name, args)
}

fn ok_content(outcome: &CallOutcome) -> &str {
    let result = outcome.result().expect("a result, not a stop");
    assert!(!result.is_error, "expected success, got {}", result.content);
    &result.content
}

fn error_json(outcome: &CallOutcome) -> serde_json::Value {
    let result = outcome.result().expect("a result, not a stop");
    assert!(
        result.is_error,
        "expected an error result, got {}",
        result.content
    );
    serde_json::from_str(&result.content).expect("error results are JSON")
}

/// How many events of this name the run recorded.
fn count_events(ctx: &RunContext, name: &str) -> usize {
    ctx.events()
        .snapshot()
        .iter()
        .filter(|e| e.name() == name)
        .count()
}

fn retry(n: u32) -> Action {
    Action::retry(n).expect("n > 0")
}

#[tokio::test(start_paused = true)]
async fn retry_3_on_a_transient_error_that_fails_twice_calls_three_times_and_succeeds() {
    let (tool, calls) = scripted_tool("greet", vec![HttpError::new(503, "busy"); 2]);
    let tool = tool.with_policy(Policy::new().on(PolicyKey::Execution, retry(3)));
    let registry = registry_of(tool);
    let ctx = RunContext::new();

    let start = tokio::time::Instant::now();
    let outcome = registry
        .execute(&ctx, &call("greet", r#"{"name":"world"}"#))
        .await;

    assert_eq!(ok_content(&outcome), "hello world");
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    assert_eq!(count_events(&ctx, "tool_retry"), 2);
    // 500 ms then 1 s, each plus at most 25% jitter.
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(1500) && waited <= Duration::from_millis(1875),
        "{waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn retry_3_on_an_auth_error_calls_once_and_stops_the_run() {
    let (tool, calls) = scripted_tool("greet", vec![HttpError::new(401, "token expired"); 5]);
    let tool = tool.with_policy(Policy::new().on(PolicyKey::Execution, retry(3)));
    let registry = registry_of(tool);
    let ctx = RunContext::new();

    let outcome = registry
        .execute(&ctx, &call("greet", r#"{"name":"world"}"#))
        .await;

    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let stop = outcome.stop().expect("auth ends the run");
    assert_eq!(stop.kind, ErrorKind::Auth);
    assert_eq!(stop.reason, TerminationReason::Auth);
    assert_eq!(stop.tool, "greet");
    assert!(stop.user_message.contains("credentials"));
    // The original error is still there to downcast.
    let source = stop.unredacted_error().unwrap().cause();
    assert_eq!(source.downcast_ref::<HttpError>().unwrap().status(), 401);
}

#[tokio::test(start_paused = true)]
async fn transient_failures_that_use_up_their_retries_end_the_run() {
    let (tool, calls) = scripted_tool("greet", vec![HttpError::new(503, "down"); 10]);
    let tool = tool.with_policy(Policy::new().on(PolicyKey::Execution, retry(3)));
    let registry = registry_of(tool);
    let ctx = RunContext::new();

    let outcome = registry
        .execute(&ctx, &call("greet", r#"{"name":"world"}"#))
        .await;

    assert_eq!(calls.load(Ordering::SeqCst), 3);
    let stop = outcome.stop().expect("exhausted transient ends the run");
    assert_eq!(
        stop.reason,
        TerminationReason::RetriesExhausted { attempts: 3 }
    );
}

#[tokio::test(start_paused = true)]
async fn with_no_policy_anywhere_nothing_is_retried() {
    let (tool, calls) = scripted_tool("greet", vec![HttpError::new(503, "down")]);
    let registry = registry_of(tool);
    let outcome = registry
        .execute(&RunContext::new(), &call("greet", r#"{"name":"a"}"#))
        .await;
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert!(outcome.stop().is_some());
}

#[tokio::test]
async fn model_fixable_failures_go_to_the_model_sanitized() {
    let noisy = format!("no user \x1b[31mbob\x1b[0m\n{}", "x".repeat(1000));
    let (tool, _) = scripted_tool("greet", vec![HttpError::new(404, noisy)]);
    let registry = registry_of(tool);
    let outcome = registry
        .execute(&RunContext::new(), &call("greet", r#"{"name":"bob"}"#))
        .await;
    let json = error_json(&outcome);
    assert_eq!(json["tool"], "greet");
    assert_eq!(json["kind"], "not_found");
    let message = json["message"].as_str().unwrap();
    assert!(message.chars().count() <= 301, "{}", message.len());
    assert!(!message.chars().any(|c| c.is_control()));
    assert!(
        json["suggestion"]
            .as_str()
            .unwrap()
            .to_lowercase()
            .contains("identifier")
    );
}

fn trailing_comma_fixer(calls: Arc<AtomicU32>) -> FixerDef {
    FixerDef::from_fn("json_fixer", move |req: FixRequest| {
        calls.fetch_add(1, Ordering::SeqCst);
        Ok(Fix::args(req.raw_args.replace(",}", "}")))
    })
}

#[tokio::test]
async fn invalid_args_are_repaired_by_a_fixer_then_the_tool_runs_once() {
    let (tool, calls) = scripted_tool("greet", vec![]);
    let fixes = Arc::new(AtomicU32::new(0));
    let tool = tool.with_policy(Policy::new().on(
        PolicyKey::InvalidArgs,
        Action::fix("json_fixer", 1).unwrap(),
    ));
    let registry = Registry::builder()
        .tool(tool)
        .fixer(trailing_comma_fixer(fixes.clone()))
        .build()
        .unwrap();
    let ctx = RunContext::new();

    let outcome = registry
        .execute(&ctx, &call("greet", r#"{"name":"world",}"#))
        .await;

    assert_eq!(ok_content(&outcome), "hello world");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(fixes.load(Ordering::SeqCst), 1);
    assert_eq!(count_events(&ctx, "tool_fixed"), 1);
}

#[tokio::test]
async fn a_fixer_that_fails_twice_then_succeeds_within_its_retries() {
    let (tool, calls) = scripted_tool("greet", vec![]);
    let asked = Arc::new(AtomicU32::new(0));
    let seen = asked.clone();
    let fixer = FixerDef::from_fn("flaky_fixer", move |req: FixRequest| {
        let n = seen.fetch_add(1, Ordering::SeqCst);
        assert_eq!(req.attempt, n + 1);
        if n < 2 {
            Err(FixerError::other(std::io::Error::other("fixer hiccup")))
        } else {
            Ok(Fix::args(r#"{"name":"fixed"}"#))
        }
    });
    let tool = tool.with_policy(Policy::new().on(
        PolicyKey::InvalidArgs,
        Action::fix("flaky_fixer", 3).unwrap(),
    ));
    let registry = Registry::builder().tool(tool).fixer(fixer).build().unwrap();

    let outcome = registry
        .execute(&RunContext::new(), &call("greet", "not json"))
        .await;

    assert_eq!(ok_content(&outcome), "hello fixed");
    assert_eq!(asked.load(Ordering::SeqCst), 3);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_fixer_that_escalates_gives_an_error_result_with_reason_and_severity() {
    let (tool, calls) = scripted_tool("greet", vec![]);
    let fixer = FixerDef::from_fn("escalator", |_req: FixRequest| {
        Err(FixerError::escalate(
            r#"Keys must be quoted. Corrected: {"name":"world"}"#,
            Severity::Medium,
        ))
    });
    let tool = tool.with_policy(
        Policy::new().on(PolicyKey::InvalidArgs, Action::fix("escalator", 3).unwrap()),
    );
    let registry = Registry::builder().tool(tool).fixer(fixer).build().unwrap();
    let ctx = RunContext::new();

    let outcome = registry
        .execute(&ctx, &call("greet", "{name: world}"))
        .await;

    let json = error_json(&outcome);
    assert!(
        json["message"]
            .as_str()
            .unwrap()
            .contains(r#"Corrected: {"name":"world"}"#)
    );
    assert_eq!(json["severity"], "medium");
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert_eq!(count_events(&ctx, "escalated"), 1);
}

#[tokio::test]
async fn a_fixer_that_throws_stops_the_run_even_with_retries_left() {
    let (tool, _) = scripted_tool("greet", vec![]);
    let asked = Arc::new(AtomicU32::new(0));
    let seen = asked.clone();
    let fixer = FixerDef::from_fn("thrower", move |_req: FixRequest| {
        seen.fetch_add(1, Ordering::SeqCst);
        Err(FixerError::throw("binary garbage, not JSON"))
    });
    let tool = tool
        .with_policy(Policy::new().on(PolicyKey::InvalidArgs, Action::fix("thrower", 5).unwrap()));
    let registry = Registry::builder().tool(tool).fixer(fixer).build().unwrap();

    let outcome = registry
        .execute(&RunContext::new(), &call("greet", "\u{0}\u{1}"))
        .await;

    let stop = outcome.stop().expect("throw ends the run");
    assert_eq!(
        stop.reason,
        TerminationReason::Thrown("binary garbage, not JSON".into())
    );
    assert_eq!(asked.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_fixer_that_always_returns_garbage_ends_at_the_repair_cap() {
    let (tool, calls) = scripted_tool("greet", vec![]);
    let asked = Arc::new(AtomicU32::new(0));
    let seen = asked.clone();
    let fixer = FixerDef::from_fn("garbage", move |_req: FixRequest| {
        seen.fetch_add(1, Ordering::SeqCst);
        Ok(Fix::args("{still broken"))
    });
    let tool = tool.with_policy(Policy::new().on(
        PolicyKey::InvalidArgs,
        [Action::fix("garbage", 1000).unwrap(), Action::Escalate],
    ));
    let registry = Registry::builder().tool(tool).fixer(fixer).build().unwrap();

    let outcome = registry
        .execute(&RunContext::new(), &call("greet", "{broken"))
        .await;

    assert_eq!(asked.load(Ordering::SeqCst), 8, "the default repair cap");
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert_eq!(error_json(&outcome)["kind"], "validation");
}

#[tokio::test(start_paused = true)]
async fn retry_then_fallback_calls_the_first_tool_twice_then_the_fallback() {
    let (primary, primary_calls) = scripted_tool("fetch", vec![HttpError::new(503, "down"); 10]);
    let (backup, backup_calls) = scripted_tool("cached_fetch", vec![]);
    let primary = primary.with_policy(Policy::new().on(
        PolicyKey::Execution,
        [retry(2), Action::fallback("cached_fetch")],
    ));
    let registry = Registry::builder()
        .tool(primary)
        .tool(backup)
        .build()
        .unwrap();
    let ctx = RunContext::new();

    let outcome = registry
        .execute(&ctx, &call("fetch", r#"{"name":"x"}"#))
        .await;

    assert_eq!(ok_content(&outcome), "hello x");
    assert_eq!(primary_calls.load(Ordering::SeqCst), 2);
    assert_eq!(backup_calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn degrade_drops_the_tool_for_the_rest_of_the_run() {
    let (tool, calls) = scripted_tool("weather", vec![HttpError::new(500, "boom"); 10]);
    let tool = tool
        .optional(true)
        .with_policy(Policy::new().on(PolicyKey::Execution, Action::Degrade));
    let registry = registry_of(tool);
    let ctx = RunContext::new();

    let first = registry
        .execute(&ctx, &call("weather", r#"{"name":"x"}"#))
        .await;
    assert!(
        error_json(&first)["suggestion"]
            .as_str()
            .unwrap()
            .contains("unavailable")
    );
    assert!(ctx.is_degraded("weather"));

    let second = registry
        .execute(&ctx, &call("weather", r#"{"name":"x"}"#))
        .await;
    error_json(&second);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "a degraded tool is never called again"
    );
    assert!(
        !RunContext::new().is_degraded("weather"),
        "fresh for every run"
    );
}

#[tokio::test]
async fn an_unknown_tool_gets_an_error_result_listing_the_available_ones() {
    let (a, _) = scripted_tool("alpha", vec![]);
    let (b, _) = scripted_tool("beta", vec![]);
    let registry = Registry::builder().tool(a).tool(b).build().unwrap();
    let outcome = registry
        .execute(&RunContext::new(), &call("gamma", "{}"))
        .await;
    let json = error_json(&outcome);
    assert!(json["message"].as_str().unwrap().contains("gamma"));
    let suggestion = json["suggestion"].as_str().unwrap();
    assert!(
        suggestion.contains("alpha") && suggestion.contains("beta"),
        "{suggestion}"
    );
}

#[tokio::test]
async fn a_panicking_tool_is_caught_and_classified_as_a_bug() {
    let tool = ToolDef::new("boom", "Panics.", |_args: NameArgs| async move {
        if true {
            panic!("index out of bounds");
        }
        Ok::<_, std::io::Error>(1)
    });
    let registry = registry_of(tool);
    let outcome = registry
        .execute(&RunContext::new(), &call("boom", r#"{"name":"x"}"#))
        .await;
    let json = error_json(&outcome);
    assert_eq!(json["kind"], "bug");
    assert!(
        json["message"]
            .as_str()
            .unwrap()
            .contains("index out of bounds")
    );
}

#[tokio::test]
async fn a_denied_call_never_runs() {
    let (tool, calls) = scripted_tool("delete", vec![]);
    let registry = registry_of(tool);
    let ctx = RunContext::new().with_permission(Arc::new(|call: &ToolCall| {
        if &*call.name == "delete" {
            Permission::Deny("deleting needs the user's approval".into())
        } else {
            Permission::Allow
        }
    }));
    let outcome = registry
        .execute(&ctx, &call("delete", r#"{"name":"x"}"#))
        .await;
    assert!(
        error_json(&outcome)["message"]
            .as_str()
            .unwrap()
            .contains("approval")
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn cancelling_mid_call_answers_operation_cancelled() {
    let tool = ToolDef::new("slow", "Takes a minute.", |_args: NameArgs| async move {
        tokio::time::sleep(Duration::from_secs(60)).await;
        Ok::<_, std::io::Error>("done")
    });
    let registry = registry_of(tool);
    let ctx = RunContext::new();
    let cancel = ctx.cancellation().clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        cancel.cancel();
    });
    let outcome = registry
        .execute(&ctx, &call("slow", r#"{"name":"x"}"#))
        .await;
    assert_eq!(outcome.result().unwrap().content, "operation cancelled");
}

/// The stop a tripped per-run breaker gives: the tool and its failure count.
fn tripped(outcome: &CallOutcome) -> Option<(String, u32)> {
    match outcome.stop()?.reason {
        TerminationReason::BreakerTripped { failures } => {
            Some((outcome.stop()?.tool.clone(), failures))
        }
        _ => None,
    }
}

#[tokio::test]
async fn the_run_breaker_trips_after_three_consecutive_failures_and_resets_on_success() {
    let (tool, _) = scripted_tool(
        "greet",
        vec![HttpError::new(404, "a"), HttpError::new(404, "b")],
    );
    let registry = registry_of(tool);
    let ctx = RunContext::new();
    let args = r#"{"name":"x"}"#;
    assert!(tripped(&registry.execute(&ctx, &call("greet", args)).await).is_none());
    assert!(tripped(&registry.execute(&ctx, &call("greet", args)).await).is_none());
    ok_content(&registry.execute(&ctx, &call("greet", args)).await);
    // Unknown tools count per name too; the third failure stops the run.
    for _ in 0..2 {
        let outcome = registry.execute(&ctx, &call("nope", "{}")).await;
        assert!(outcome.result().is_some_and(|r| r.is_error));
    }
    let third = registry.execute(&ctx, &call("nope", "{}")).await;
    assert_eq!(tripped(&third), Some(("nope".to_owned(), 3)));
    // A tripped tool is not called again in this run: every later call stops too.
    let again = registry.execute(&ctx, &call("nope", "{}")).await;
    assert_eq!(tripped(&again), Some(("nope".to_owned(), 3)));
}

#[tokio::test(start_paused = true)]
async fn an_open_service_circuit_goes_straight_to_the_fallback() {
    let (primary, primary_calls) = scripted_tool("fetch", vec![HttpError::new(503, "down"); 100]);
    let (backup, backup_calls) = scripted_tool("cached_fetch", vec![]);
    let primary = primary.with_policy(Policy::new().on(
        PolicyKey::Execution,
        [retry(3), Action::fallback("cached_fetch")],
    ));
    let registry = Registry::builder()
        .tool(primary)
        .tool(backup)
        .build()
        .unwrap();
    let breaker = Arc::new(ServiceBreaker::new(3, Duration::from_secs(30)).unwrap());

    let first = RunContext::new().with_service_breaker(breaker.clone());
    ok_content(
        &registry
            .execute(&first, &call("fetch", r#"{"name":"x"}"#))
            .await,
    );
    assert_eq!(primary_calls.load(Ordering::SeqCst), 3);

    // A second run: the circuit is open, so no retries are burned on the primary.
    let second = RunContext::new().with_service_breaker(breaker.clone());
    ok_content(
        &registry
            .execute(&second, &call("fetch", r#"{"name":"x"}"#))
            .await,
    );
    assert_eq!(primary_calls.load(Ordering::SeqCst), 3);
    assert_eq!(backup_calls.load(Ordering::SeqCst), 2);

    // After the cooldown one probe goes through.
    tokio::time::advance(Duration::from_secs(31)).await;
    let third = RunContext::new().with_service_breaker(breaker);
    ok_content(
        &registry
            .execute(&third, &call("fetch", r#"{"name":"x"}"#))
            .await,
    );
    assert_eq!(primary_calls.load(Ordering::SeqCst), 4);
}

#[test]
fn resolution_goes_tool_then_agent_defaults_then_crate_defaults_then_built_in() {
    let (tool, _) = scripted_tool("greet", vec![]);
    let tool = tool
        .with_policy(Policy::new().on(PolicyKey::Execution, retry(2)))
        .with_crate_defaults(Some(
            Policy::new()
                .on(PolicyKey::Execution, retry(9))
                .on(PolicyKey::InvalidArgs, Action::Throw)
                .on(PolicyKey::Kind(ErrorKind::Timeout), retry(4)),
        ));
    let registry = Registry::builder()
        .tool(tool)
        .on_any_tool_error(
            Policy::new()
                .on(PolicyKey::Execution, retry(7))
                .on(PolicyKey::Kind(ErrorKind::Quota), retry(5)),
        )
        .build()
        .unwrap();

    let explained = registry.explain("greet").unwrap();
    assert_eq!(
        explained.source_of(PolicyKey::Execution),
        Some(PolicyLayer::Tool)
    );
    assert_eq!(
        explained.ladder(PolicyKey::Execution),
        Some(&Ladder::from(retry(2)))
    );
    assert_eq!(
        explained.source_of(PolicyKey::Kind(ErrorKind::Quota)),
        Some(PolicyLayer::AgentDefaults)
    );
    assert_eq!(
        explained.source_of(PolicyKey::InvalidArgs),
        Some(PolicyLayer::CrateDefaults)
    );
    assert_eq!(
        explained.source_of(PolicyKey::Kind(ErrorKind::Timeout)),
        Some(PolicyLayer::CrateDefaults)
    );
    assert_eq!(
        explained.source_of(PolicyKey::Kind(ErrorKind::Auth)),
        Some(PolicyLayer::BuiltIn)
    );
    assert_eq!(explained.source_of(PolicyKey::Kind(ErrorKind::Bug)), None);

    let text = explained.to_string();
    assert!(text.contains("execution     = retry(2)  <- tool"), "{text}");
    // The tool's own `execution` answers quota and timeout failures first: both entries are
    // listed, as shadowed.
    assert!(
        text.contains(
            "quota         = retry(5)  <- agent, every tool  (shadowed by `execution` <- tool)"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "timeout       = retry(4)  <- crate defaults  (shadowed by `execution` <- tool)"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "execution     = retry(7)  <- agent, every tool  (shadowed by `execution` <- tool)"
        ),
        "{text}"
    );
    assert_eq!(
        explained.for_kind(ErrorKind::Quota).2,
        PolicyLayer::Tool,
        "the shadowing entry is the one the executor uses"
    );
    assert!(
        text.contains("invalid_args  = throw  <- crate defaults"),
        "{text}"
    );
    assert!(
        text.contains("auth          = throw  <- built-in"),
        "{text}"
    );
}

#[test]
fn a_tool_that_sets_only_execution_inherits_invalid_args_from_the_defaults() {
    let (tool, _) = scripted_tool("greet", vec![]);
    let tool = tool
        .with_policy(Policy::new().on(PolicyKey::Execution, retry(3)))
        .with_crate_defaults(Some(Policy::new().on(
            PolicyKey::InvalidArgs,
            Action::fix("json_fixer", 2).unwrap(),
        )));
    let registry = Registry::builder()
        .tool(tool)
        .fixer(trailing_comma_fixer(Arc::default()))
        .build()
        .unwrap();
    let explained = registry.explain("greet").unwrap();
    assert_eq!(
        explained.source_of(PolicyKey::InvalidArgs),
        Some(PolicyLayer::CrateDefaults)
    );
    assert_eq!(
        explained.source_of(PolicyKey::Execution),
        Some(PolicyLayer::Tool)
    );
}

#[test]
fn building_lists_every_configuration_problem() {
    let (a, _) = scripted_tool("a", vec![]);
    let (a2, _) = scripted_tool("a", vec![]);
    let (b, _) = scripted_tool("b", vec![]);
    let b = b
        .with_policy(Policy::new().on(
            PolicyKey::InvalidArgs,
            Action::fix("missing_fixer", 1).unwrap(),
        ))
        .with_crate_defaults(Some(Policy::new().on(
            PolicyKey::Execution,
            [Action::fallback("nowhere"), Action::Degrade],
        )));
    let err = Registry::builder()
        .tool(a)
        .tool(a2)
        .tool(b)
        .on_tool_error("ghost", Policy::new())
        .build()
        .unwrap_err();
    let problems = err.problems();
    assert!(problems.contains(&ConfigProblem::DuplicateTool("a".into())));
    assert!(problems.iter().any(
        |p| matches!(p, ConfigProblem::UnknownFixer { fixer, .. } if fixer == "missing_fixer")
    ));
    assert!(problems.iter().any(
        |p| matches!(p, ConfigProblem::UnknownFallback { fallback, .. } if fallback == "nowhere")
    ));
    assert!(problems.iter().any(|p| matches!(
        p,
        ConfigProblem::DegradeNotOptional {
            layer: PolicyLayer::CrateDefaults,
            ..
        }
    )));
    assert!(problems.contains(&ConfigProblem::UnknownToolPolicy("ghost".into())));
    assert_eq!(problems.len(), 5, "{err}");
}

#[test]
fn a_retry_under_a_key_never_retried_is_refused_in_code_as_the_macros_refuse_it() {
    let retry = || Action::retry(3).unwrap();
    let (a, _) = scripted_tool("a", vec![]);
    let a =
        a.with_policy(Policy::new().on(PolicyKey::Kind(ErrorKind::Auth), [retry(), Action::Throw]));
    let (b, _) = scripted_tool("b", vec![]);
    let built = Registry::builder()
        .tool(a)
        .tool(b)
        .on_tool_error("b", Policy::new().on(PolicyKey::InvalidArgs, retry()))
        .build();
    let Err(error) = built else {
        panic!("built policies whose retries never run");
    };
    let error = error.to_string();
    assert!(error.contains("`a`: `auth` (tool)"), "{error}");
    assert!(error.contains("`b`: `invalid_args` (agent"), "{error}");

    let (c, _) = scripted_tool("c", vec![]);
    let c = c.with_policy(Policy::new().on(PolicyKey::Kind(ErrorKind::Transient), retry()));
    Registry::builder()
        .tool(c)
        .build()
        .expect("a transient failure is retried");
}

#[tokio::test]
async fn invalid_args_keep_the_raw_text_and_tell_bad_json_from_a_wrong_shape() {
    let (tool, _) = scripted_tool("greet", vec![]);
    let registry = registry_of(tool);
    let def = registry.tool("greet").unwrap();
    match agent_errors::testing::handler_of(def).call("{name: world}") {
        Err(ToolError::InvalidArgs { raw, .. }) => assert_eq!(raw, "{name: world}"),
        other => panic!("expected InvalidArgs, got {:?}", other.err()),
    }
    match agent_errors::testing::handler_of(def).call(r#"{"name": 5}"#) {
        Err(ToolError::Deserialization { target, .. }) => assert!(target.contains("NameArgs")),
        other => panic!("expected Deserialization, got {:?}", other.err()),
    }
}

#[derive(Deserialize, schemars::JsonSchema)]
struct NoArgs {}

#[tokio::test]
async fn a_tool_without_parameters_accepts_empty_arguments_and_offers_empty_properties() {
    let tool = ToolDef::new("now", "The time.", |_: NoArgs| async move {
        Ok::<_, std::io::Error>("noon")
    });
    assert_eq!(tool.parameters()["properties"], serde_json::json!({}));
    let registry = registry_of(tool);
    for raw in ["", "  ", "{}"] {
        let outcome = registry
            .execute(&RunContext::new(), &call("now", raw))
            .await;
        assert_eq!(ok_content(&outcome), "noon", "arguments {raw:?}");
    }
}

#[tokio::test]
async fn a_panicking_sync_fixer_is_caught_and_the_call_still_gets_one_result() {
    let (tool, _) = scripted_tool("greet", vec![]);
    let fixer = FixerDef::from_fn("panicky", |req: FixRequest| {
        let args = req.args.expect("the fixer assumes JSON");
        Ok(Fix::args_value(&args))
    });
    let tool = tool.with_policy(Policy::new().on(
        PolicyKey::InvalidArgs,
        [Action::fix("panicky", 2).unwrap(), Action::Escalate],
    ));
    let registry = Registry::builder().tool(tool).fixer(fixer).build().unwrap();

    let outcome = registry
        .execute(&RunContext::new(), &call("greet", "{not json"))
        .await;

    assert_eq!(error_json(&outcome)["kind"], "validation");
}

#[tokio::test(start_paused = true)]
async fn a_half_open_probe_is_not_stranded_by_bad_arguments_or_a_cancelled_call() {
    let slow_calls = Arc::new(AtomicU32::new(0));
    let seen = slow_calls.clone();
    let tool = ToolDef::new("fetch", "Fetches.", move |args: NameArgs| {
        let seen = seen.clone();
        async move {
            match seen.fetch_add(1, Ordering::SeqCst) {
                0 => Err(HttpError::new(503, "down")),
                1 => {
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    Ok(args.name)
                }
                _ => Ok(args.name),
            }
        }
    });
    let registry = registry_of(tool);
    let breaker = Arc::new(ServiceBreaker::new(1, Duration::from_secs(10)).unwrap());
    let run = || RunContext::new().with_service_breaker(breaker.clone());

    // One failure opens the circuit.
    assert!(
        registry
            .execute(&run(), &call("fetch", r#"{"name":"a"}"#))
            .await
            .stop()
            .is_some()
    );
    tokio::time::advance(Duration::from_secs(11)).await;

    // Bad arguments never reach the service, so they take no probe.
    let bad = registry.execute(&run(), &call("fetch", "{broken")).await;
    assert_eq!(error_json(&bad)["kind"], "validation");

    // The probe is cancelled mid-call: it is given back.
    let ctx = run();
    let cancel = ctx.cancellation().clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        cancel.cancel();
    });
    let cancelled = registry
        .execute(&ctx, &call("fetch", r#"{"name":"b"}"#))
        .await;
    assert_eq!(cancelled.result().unwrap().content, "operation cancelled");

    // So the next call may probe, succeeds, and closes the circuit.
    let probe = registry
        .execute(&run(), &call("fetch", r#"{"name":"c"}"#))
        .await;
    assert_eq!(ok_content(&probe), "c");
    assert_eq!(slow_calls.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_fallback_the_permission_hook_denies_answers_the_call_as_a_denial() {
    let (primary, _) = scripted_tool("fetch", vec![HttpError::new(404, "gone"); 5]);
    let (backup, backup_calls) = scripted_tool("admin_fetch", vec![]);
    let primary = primary.with_policy(Policy::new().on(
        PolicyKey::Execution,
        [Action::fallback("admin_fetch"), Action::Escalate],
    ));
    let registry = Registry::builder()
        .tool(primary)
        .tool(backup)
        .build()
        .unwrap();
    let ctx = RunContext::new().with_permission(Arc::new(|call: &ToolCall| {
        if &*call.name == "admin_fetch" {
            Permission::Deny("admin tools need approval".into())
        } else {
            Permission::Allow
        }
    }));

    let outcome = registry
        .execute(&ctx, &call("fetch", r#"{"name":"x"}"#))
        .await;

    // The fallback's denial is the answer: the model learns why, rather than seeing the
    // primary's 404 as if no fallback had been tried.
    let shown = error_json(&outcome);
    assert_eq!(shown["kind"], "auth");
    assert_eq!(shown["tool"], "admin_fetch");
    assert!(
        shown["message"]
            .as_str()
            .unwrap()
            .contains("permission denied: admin tools need approval"),
        "{shown}"
    );
    assert_eq!(backup_calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn parallel_failures_of_one_tool_in_one_turn_count_once_for_the_run_breaker() {
    let (tool, _) = scripted_tool("lookup", vec![HttpError::new(404, "no such id"); 9]);
    let registry = registry_of(tool);
    let ctx = RunContext::new();
    let args = r#"{"name":"x"}"#;

    let batch = [
        call("lookup", args),
        call("lookup", args),
        call("lookup", args),
    ];
    let outcomes = registry.execute_turn(&ctx, &batch).await;
    assert_eq!(outcomes.len(), 3);
    assert!(
        outcomes
            .iter()
            .all(|o| o.result().is_some_and(|r| r.is_error)),
        "three misses in one turn are one stumble: {outcomes:?}"
    );

    let second = registry.execute_turn(&ctx, &[call("lookup", args)]).await;
    assert!(tripped(&second[0]).is_none());
    let third = registry.execute_turn(&ctx, &[call("lookup", args)]).await;
    assert_eq!(tripped(&third[0]), Some(("lookup".to_owned(), 3)));
}

#[tokio::test(start_paused = true)]
async fn a_fallback_that_gets_an_auth_error_ends_the_run_and_is_named_for_it() {
    let (primary, _) = scripted_tool("fetch", vec![HttpError::new(503, "down"); 5]);
    let (backup, backup_calls) =
        scripted_tool("backup_fetch", vec![HttpError::new(401, "expired"); 5]);
    let primary = primary.optional(true).with_policy(Policy::new().on(
        PolicyKey::Execution,
        [retry(2), Action::fallback("backup_fetch"), Action::Degrade],
    ));
    let registry = Registry::builder()
        .tool(primary)
        .tool(backup)
        .build()
        .unwrap();

    let outcome = registry
        .execute(&RunContext::new(), &call("fetch", r#"{"name":"x"}"#))
        .await;

    let stop = outcome.stop().expect("auth from the fallback ends the run");
    assert_eq!(stop.reason, TerminationReason::Auth);
    assert_eq!(stop.tool, "backup_fetch");
    assert_eq!(backup_calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn a_tools_own_execution_entry_beats_a_lower_layers_per_kind_entry() {
    let (tool, calls) = scripted_tool("fetch", vec![HttpError::new(503, "down"); 3]);
    let tool = tool
        .with_policy(Policy::new().on(PolicyKey::Execution, retry(4)))
        .with_crate_defaults(Some(
            Policy::new().on(PolicyKey::Kind(ErrorKind::Transient), Action::Escalate),
        ));
    let registry = registry_of(tool);
    let explained = registry.explain("fetch").unwrap();
    assert_eq!(
        explained.for_kind(ErrorKind::Transient).2,
        PolicyLayer::Tool
    );

    let outcome = registry
        .execute(&RunContext::new(), &call("fetch", r#"{"name":"x"}"#))
        .await;

    assert_eq!(ok_content(&outcome), "hello x");
    assert_eq!(calls.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn auth_failures_follow_only_an_auth_entry_never_a_generic_execution_one() {
    let (tool, _) = scripted_tool("fetch", vec![HttpError::new(403, "forbidden")]);
    let tool = tool.with_policy(Policy::new().on(PolicyKey::Execution, Action::Escalate));
    let registry = registry_of(tool);
    let outcome = registry
        .execute(&RunContext::new(), &call("fetch", r#"{"name":"x"}"#))
        .await;
    assert_eq!(outcome.stop().unwrap().reason, TerminationReason::Auth);

    // Naming `auth` explicitly is how a tool shows auth failures to the model.
    let (tool, _) = scripted_tool("fetch", vec![HttpError::new(403, "forbidden")]);
    let tool =
        tool.with_policy(Policy::new().on(PolicyKey::Kind(ErrorKind::Auth), Action::Escalate));
    let registry = registry_of(tool);
    let outcome = registry
        .execute(&RunContext::new(), &call("fetch", r#"{"name":"x"}"#))
        .await;
    assert_eq!(error_json(&outcome)["kind"], "auth");
}

#[tokio::test]
async fn a_server_that_says_do_not_retry_is_answered_to_the_model_not_ended() {
    for error in [
        HttpError::new(501, "not implemented"),
        HttpError::new(503, "maintenance").with_header("x-should-retry", "false"),
    ] {
        let (tool, calls) = scripted_tool("fetch", vec![error.clone(); 3]);
        let tool = tool.with_policy(Policy::new().on(PolicyKey::Execution, retry(3)));
        let registry = registry_of(tool);
        let outcome = registry
            .execute(&RunContext::new(), &call("fetch", r#"{"name":"x"}"#))
            .await;
        error_json(&outcome);
        assert_eq!(calls.load(Ordering::SeqCst), 1, "{error}");
    }
}

#[tokio::test]
async fn a_single_unretried_outage_ends_the_run_without_claiming_retries() {
    let (tool, _) = scripted_tool("fetch", vec![HttpError::new(503, "down")]);
    let registry = registry_of(tool);
    let outcome = registry
        .execute(&RunContext::new(), &call("fetch", r#"{"name":"x"}"#))
        .await;
    let stop = outcome.stop().unwrap();
    assert_eq!(
        stop.reason,
        TerminationReason::RetriesExhausted { attempts: 1 }
    );
    assert!(
        !stop.user_message.contains("retries"),
        "{}",
        stop.user_message
    );
}

#[tokio::test]
async fn arguments_must_be_an_object_not_an_array() {
    let (tool, calls) = scripted_tool("greet", vec![]);
    let registry = registry_of(tool);
    let outcome = registry
        .execute(&RunContext::new(), &call("greet", r#"["world"]"#))
        .await;
    let json = error_json(&outcome);
    assert_eq!(json["kind"], "validation");
    assert!(!json["message"].as_str().unwrap().contains("__"), "{json}");
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn a_tool_timeout_turns_a_hang_into_a_timeout_the_policy_handles() {
    let calls = Arc::new(AtomicU32::new(0));
    let seen = calls.clone();
    let tool = ToolDef::new("lookup", "Looks up.", move |args: NameArgs| {
        let seen = seen.clone();
        async move {
            if seen.fetch_add(1, Ordering::SeqCst) == 0 {
                std::future::pending::<()>().await;
            }
            Ok::<_, std::io::Error>(args.name)
        }
    })
    .with_timeout(Duration::from_secs(5))
    .with_policy(Policy::new().on(PolicyKey::Kind(ErrorKind::Timeout), retry(2)));
    let registry = registry_of(tool);
    let ctx = RunContext::new();

    let start = tokio::time::Instant::now();
    let outcome = registry
        .execute(&ctx, &call("lookup", r#"{"name":"k"}"#))
        .await;

    assert_eq!(ok_content(&outcome), "k");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    let retried = ctx.events().snapshot();
    assert!(matches!(
        retried[0],
        agent_errors::Event::ToolRetry {
            kind: ErrorKind::Timeout,
            ..
        }
    ));
    // Five seconds of hanging, then one backoff of 500 ms plus at most 25%.
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(5500) && waited <= Duration::from_millis(5625),
        "{waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_fallback_leaves_the_model_the_called_tools_own_failure() {
    let (search, search_calls) =
        scripted_tool("search", vec![HttpError::new(400, "unknown field `q`"); 5]);
    let (cached, cached_calls) =
        scripted_tool("cached_search", vec![HttpError::new(503, "cache down"); 20]);
    let search = search.with_policy(Policy::new().on(
        PolicyKey::Execution,
        [
            retry(2),
            Action::fallback("cached_search"),
            Action::Escalate,
        ],
    ));
    let registry = Registry::builder()
        .tool(search)
        .tool(cached)
        .build()
        .unwrap();
    let ctx = RunContext::new();

    let outcome = registry
        .execute(&ctx, &call("search", r#"{"name":"x"}"#))
        .await;

    // The model reads why `search` failed (a request it should not repeat as is), not the
    // fallback's 503 under `search`'s name.
    let shown = error_json(&outcome);
    assert_eq!(shown["tool"], "search", "{shown}");
    assert_ne!(shown["kind"], "transient", "{shown}");
    let message = shown["message"].as_str().unwrap();
    assert!(message.contains("unknown field `q`"), "{shown}");
    assert!(message.contains("cached_search"), "{shown}");
    assert_eq!(
        search_calls.load(Ordering::SeqCst),
        1,
        "a 400 is not retried"
    );
    assert!(cached_calls.load(Ordering::SeqCst) >= 1);
    // The run's events keep both failures.
    let failed: Vec<(String, ErrorKind)> = ctx
        .events()
        .snapshot()
        .iter()
        .filter_map(|e| match e {
            agent_errors::Event::ToolFailed { tool, kind, .. } => Some((tool.clone(), *kind)),
            _ => None,
        })
        .collect();
    assert!(
        failed.contains(&("cached_search".to_owned(), ErrorKind::Transient)),
        "{failed:?}"
    );
    assert!(
        failed.iter().any(|(tool, _)| tool == "search"),
        "{failed:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_fallback_that_blips_once_is_retried_under_its_own_policy() {
    let (primary, primary_calls) = scripted_tool("fetch", vec![HttpError::new(503, "down"); 10]);
    let (backup, backup_calls) = scripted_tool("cached_fetch", vec![HttpError::new(503, "blip")]);
    let primary = primary.with_policy(Policy::new().on(
        PolicyKey::Execution,
        [retry(2), Action::fallback("cached_fetch")],
    ));
    let backup = backup.with_policy(Policy::new().on(PolicyKey::Execution, retry(3)));
    let registry = Registry::builder()
        .tool(primary)
        .tool(backup)
        .build()
        .unwrap();
    let ctx = RunContext::new();

    let outcome = registry
        .execute(&ctx, &call("fetch", r#"{"name":"x"}"#))
        .await;

    assert_eq!(ok_content(&outcome), "hello x");
    assert_eq!(primary_calls.load(Ordering::SeqCst), 2);
    assert_eq!(backup_calls.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn a_fallbacks_own_fallback_is_not_followed_and_the_called_tools_failure_ends_the_run() {
    let (primary, _) = scripted_tool("fetch", vec![HttpError::new(503, "down"); 10]);
    let (backup, backup_calls) =
        scripted_tool("cached_fetch", vec![HttpError::new(503, "cold"); 10]);
    let (third, third_calls) = scripted_tool("mirror_fetch", vec![]);
    let primary = primary.with_policy(Policy::new().on(
        PolicyKey::Execution,
        [retry(2), Action::fallback("cached_fetch")],
    ));
    let backup = backup.with_policy(Policy::new().on(
        PolicyKey::Execution,
        [retry(2), Action::fallback("mirror_fetch")],
    ));
    let registry = Registry::builder()
        .tool(primary)
        .tool(backup)
        .tool(third)
        .build()
        .unwrap();

    let outcome = registry
        .execute(&RunContext::new(), &call("fetch", r#"{"name":"x"}"#))
        .await;

    assert_eq!(
        third_calls.load(Ordering::SeqCst),
        0,
        "fallbacks do not chain"
    );
    assert_eq!(backup_calls.load(Ordering::SeqCst), 2, "its own retry(2)");
    let stop = outcome.stop().expect("a service stayed down: the run ends");
    assert_eq!(stop.tool, "fetch");
    assert_eq!(
        stop.reason,
        TerminationReason::RetriesExhausted { attempts: 4 }
    );
}

/// `fetch` under `[retry(2), fallback(cached_fetch)]`, the fallback under its own `retry(5)`,
/// both always failing 503; returns the registry and the two tools' call counters.
fn fetch_falling_back_to_a_retried_cache() -> (Registry, Arc<AtomicU32>, Arc<AtomicU32>) {
    let (primary, primary_calls) = scripted_tool("fetch", vec![HttpError::new(503, "down"); 10]);
    let (backup, backup_calls) =
        scripted_tool("cached_fetch", vec![HttpError::new(503, "cold"); 10]);
    let primary = primary.with_policy(Policy::new().on(
        PolicyKey::Execution,
        [retry(2), Action::fallback("cached_fetch")],
    ));
    let backup = backup.with_policy(Policy::new().on(PolicyKey::Execution, retry(5)));
    let registry = Registry::builder()
        .tool(primary)
        .tool(backup)
        .build()
        .unwrap();
    (registry, primary_calls, backup_calls)
}

#[tokio::test(start_paused = true)]
async fn a_fallbacks_retries_spend_the_runs_allowance() {
    let (registry, primary_calls, backup_calls) = fetch_falling_back_to_a_retried_cache();
    // Two retries in the run: one for `fetch`, one for its fallback.
    let ctx = RunContext::new().with_limits(agent_errors::Limits::default().with_max_retries(2));

    let outcome = registry
        .execute(&ctx, &call("fetch", r#"{"name":"x"}"#))
        .await;

    assert_eq!(primary_calls.load(Ordering::SeqCst), 2);
    assert_eq!(
        backup_calls.load(Ordering::SeqCst),
        2,
        "its first call and the one retry left"
    );
    assert_eq!(count_events(&ctx, "retry_budget_exhausted"), 1);
    assert_eq!(outcome.stop().expect("the retries ran out").tool, "fetch");
}

#[tokio::test(start_paused = true)]
async fn a_fallbacks_attempts_count_on_its_own_service_breaker() {
    let (registry, _, backup_calls) = fetch_falling_back_to_a_retried_cache();
    let breaker = Arc::new(ServiceBreaker::new(3, Duration::from_secs(30)).unwrap());
    let ctx = RunContext::new().with_service_breaker(breaker.clone());

    let outcome = registry
        .execute(&ctx, &call("fetch", r#"{"name":"x"}"#))
        .await;

    // The third failure opens the fallback's circuit, and its retry rung stops there.
    assert_eq!(backup_calls.load(Ordering::SeqCst), 3);
    assert_eq!(
        outcome.stop().expect("the service stayed down").tool,
        "fetch"
    );
    assert_eq!(breaker.state("cached_fetch"), BreakerState::Open);
    assert_eq!(breaker.state("fetch"), BreakerState::Closed);
}

/// A tool that records the idempotency key each call sees, then hangs past its timeout, fails
/// with a 504, or answers, in the order given (answering once the script runs out).
struct KeyProbe {
    script: Vec<Option<u16>>,
    keys: Arc<std::sync::Mutex<Vec<String>>>,
}

impl agent_errors::call::ToolHandler for KeyProbe {
    fn call(&self, raw: &str) -> Result<agent_errors::call::ToolFuture, ToolError> {
        self.call_with(raw, &agent_errors::call::Extensions::new())
    }

    fn call_with(
        &self,
        _: &str,
        extensions: &agent_errors::call::Extensions,
    ) -> Result<agent_errors::call::ToolFuture, ToolError> {
        let key = extensions
            .get::<agent_errors::call::IdempotencyKey>()
            .map(ToString::to_string)
            .unwrap_or_default();
        let mut keys = self.keys.lock().unwrap();
        let step = self.script.get(keys.len()).copied();
        keys.push(key);
        Ok(Box::pin(async move {
            match step {
                // Hangs: the tool's timeout answers.
                Some(None) => std::future::pending().await,
                Some(Some(status)) => Err(HttpError::new(status, "gateway timeout").into()),
                None => Ok("charged".to_owned()),
            }
        }))
    }
}

fn key_probe(
    name: &'static str,
    script: Vec<Option<u16>>,
) -> (ToolDef, Arc<std::sync::Mutex<Vec<String>>>) {
    let keys = Arc::new(std::sync::Mutex::new(Vec::new()));
    let handler = KeyProbe {
        script,
        keys: keys.clone(),
    };
    let schema = serde_json::json!({"type": "object", "properties": {}});
    let tool = ToolDef::from_handler(name, "Charges a card.", schema, handler)
        .with_timeout(Duration::from_secs(1));
    (tool, keys)
}

#[tokio::test(start_paused = true)]
async fn a_call_retried_after_a_timeout_and_a_504_and_its_fallback_keep_one_idempotency_key() {
    let (charge, charge_keys) = key_probe("charge", vec![None, Some(504), Some(504)]);
    let (backup, backup_keys) = key_probe("charge_backup", vec![]);
    let charge = charge.with_policy(Policy::new().on(
        PolicyKey::Execution,
        [retry(3), Action::fallback("charge_backup")],
    ));
    let registry = Registry::builder()
        .tool(charge)
        .tool(backup)
        .build()
        .unwrap();
    let ctx = RunContext::new().with_run_id("run-7");

    let outcome = registry.execute(&ctx, &call("charge", "{}")).await;

    assert_eq!(ok_content(&outcome), "charged");
    let charge_keys = charge_keys.lock().unwrap().clone();
    assert_eq!(
        charge_keys,
        vec!["run-7:call-1"; 3],
        "every attempt, one key"
    );
    assert_eq!(*backup_keys.lock().unwrap(), vec!["run-7:call-1"]);
}
