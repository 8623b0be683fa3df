//! The recommended preset, rule by rule, through the public API: what is retried (only where a
//! retry cannot apply an effect twice), what becomes an unknown outcome, what the model is
//! shown, error envelopes read by their text, the breakers, and what `explain` says.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use agent_errors::breaker::{BreakerState, ServiceBreaker};
use agent_errors::build::ConfigWarning;
use agent_errors::call::IdempotencyKey;
use agent_errors::policy::{Action, Policy, PolicyKey, PolicyLayer};
use agent_errors::run::TerminationReason;
use agent_errors::testing::{Fault, FaultyTool, ScriptedModel, echo_tool};
use agent_errors::{Agent, ChatRequest, Ctx, ErrorKind, HttpError, Message, policy, tool, tools};

/// The tool results the model was shown, in order, as of its last request.
fn shown(model: &ScriptedModel) -> Vec<String> {
    let last = model.last_request().expect("the model was asked");
    last.messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(result) => Some(result.content.clone()),
            _ => None,
        })
        .collect()
}

fn offered(request: &ChatRequest) -> Vec<String> {
    request.tools.iter().map(|t| t.name.clone()).collect()
}

/// An agent with the preset, `tool`, and a model that calls `tool` once then answers "done".
fn one_call(tool: agent_errors::ToolDef, model: &ScriptedModel) -> Agent {
    Agent::builder("a")
        .model(model.clone())
        .tool(tool)
        .recommended()
        .build()
        .expect("builds")
}

fn unavailable() -> HttpError {
    HttpError::new(503, "service unavailable")
}

#[tokio::test(start_paused = true)]
async fn an_ambiguous_failure_of_an_unkeyed_tool_with_effects_is_an_unknown_outcome() {
    for fault in [
        Fault::error(unavailable),
        Fault::error(|| io::Error::from(io::ErrorKind::TimedOut)),
        Fault::error(|| io::Error::from(io::ErrorKind::ConnectionReset)),
    ] {
        let refund = FaultyTool::new(echo_tool("refund")).then(fault);
        let model = ScriptedModel::new()
            .tool_call("refund", r#"{"text": "order 7"}"#)
            .text("I could not confirm the refund");
        let agent = one_call(refund.tool(), &model);

        let answer = agent.run("refund order 7").await;

        assert_eq!(answer.unwrap(), "I could not confirm the refund");
        assert_eq!(
            refund.calls(),
            1,
            "called once: a second call could refund twice"
        );
        let said = &shown(&model)[0];
        assert!(said.contains("outcome_unknown"), "{said}");
        assert!(said.contains("may have taken effect"), "{said}");
    }
}

/// Refunds an order, deduplicated by the call's key.
#[tool]
async fn refund(order: String, key: Ctx<IdempotencyKey>) -> Result<String, io::Error> {
    let _ = (&order, &*key);
    Ok("refunded".to_owned())
}

#[tokio::test(start_paused = true)]
async fn a_keyed_tool_is_retried_after_a_timeout_with_the_same_key() {
    let keyed = tools![refund].remove(0);
    assert!(keyed.is_keyed() && !keyed.is_idempotent());
    let refund = FaultyTool::new(keyed).fail_times(2, || io::Error::from(io::ErrorKind::TimedOut));
    let model = ScriptedModel::new()
        .tool_call("refund", r#"{"order": "7"}"#)
        .text("done");
    let agent = one_call(refund.tool(), &model);

    assert_eq!(agent.run("refund order 7").await.unwrap(), "done");

    assert_eq!(refund.calls(), 3);
    assert_eq!(shown(&model), ["refunded"]);
}

#[tokio::test(start_paused = true)]
async fn a_refused_connection_or_an_unresolved_name_is_retried_for_any_tool() {
    let refused = || io::Error::from(io::ErrorKind::ConnectionRefused);
    let unresolved = || io::Error::other("dns error: failed to lookup address information");
    let send = FaultyTool::new(echo_tool("send_email"))
        .fail_times(1, refused)
        .fail_times(1, unresolved);
    let model = ScriptedModel::new()
        .tool_call("send_email", r#"{"text": "hello"}"#)
        .text("sent");
    let agent = one_call(send.tool(), &model);

    assert_eq!(agent.run("send it").await.unwrap(), "sent");

    assert_eq!(
        send.calls(),
        3,
        "the request never reached the service twice"
    );
    assert_eq!(shown(&model), ["hello"]);
}

#[tokio::test(start_paused = true)]
async fn a_rate_limit_is_retried_for_any_tool_after_the_servers_wait() {
    let limited = || HttpError::new(429, "slow down").with_header("retry-after", "7");
    let send = FaultyTool::new(echo_tool("send_email")).fail_times(1, limited);
    let model = ScriptedModel::new()
        .tool_call("send_email", r#"{"text": "hello"}"#)
        .text("sent");
    let agent = one_call(send.tool(), &model);
    let started = tokio::time::Instant::now();

    assert_eq!(agent.run("send it").await.unwrap(), "sent");

    assert_eq!(send.calls(), 2);
    assert!(started.elapsed() >= Duration::from_secs(7));
}

#[tokio::test(start_paused = true)]
async fn an_idempotent_tool_is_retried_three_times_then_the_model_is_told() {
    let search = FaultyTool::new(echo_tool("search").idempotent(true))
        .then_always(Fault::error(unavailable));
    let model = ScriptedModel::new()
        .tool_call("search", r#"{"text": "shoes"}"#)
        .text("search is down");
    let agent = one_call(search.tool(), &model);

    assert_eq!(agent.run("find shoes").await.unwrap(), "search is down");

    assert_eq!(search.calls(), 3);
    let said = &shown(&model)[0];
    assert!(
        said.contains("transient") && said.contains("service unavailable"),
        "{said}"
    );
}

#[tokio::test(start_paused = true)]
async fn not_found_validation_and_bug_failures_are_shown_short_and_sanitized() {
    let secret = "sk-live-0123456789abcdefghijklmnop";
    let failures: [(Fault, &str); 3] = [
        (
            Fault::error(move || HttpError::new(404, format!("no order 7 (key {secret})"))),
            "not_found",
        ),
        (
            Fault::error(|| HttpError::new(422, "`amount` must be positive")),
            "validation",
        ),
        (Fault::Panic("index out of bounds".to_owned()), "bug"),
    ];
    for (fault, kind) in failures {
        let lookup = FaultyTool::new(echo_tool("lookup")).then(fault);
        let model = ScriptedModel::new()
            .tool_call("lookup", r#"{"text": "7"}"#)
            .text("told");
        let agent = one_call(lookup.tool(), &model);

        assert_eq!(agent.run("look up 7").await.unwrap(), "told");

        assert_eq!(lookup.calls(), 1, "{kind} is not retried");
        let said = &shown(&model)[0];
        assert!(said.contains(kind), "{said}");
        assert!(!said.contains(secret), "{said}");
        assert!(said.len() < 2_000, "{said}");
    }
}

#[tokio::test(start_paused = true)]
async fn an_overloaded_model_is_called_four_times_a_turn() {
    let overloaded = || HttpError::new(529, "overloaded");
    let model = ScriptedModel::new().errors(3, overloaded).text("answered");
    let agent = one_call(echo_tool("lookup").idempotent(true), &model);

    assert_eq!(agent.run("hello").await.unwrap(), "answered");
    assert_eq!(model.calls(), 4);

    let model = ScriptedModel::new().errors(4, overloaded).text("never");
    let agent = one_call(echo_tool("lookup").idempotent(true), &model);
    assert!(agent.run("hello").await.is_err());
    assert_eq!(model.calls(), 4, "the fourth failure ends the turn");
}

#[tokio::test(start_paused = true)]
async fn an_auth_failure_ends_the_run() {
    let crm = FaultyTool::new(echo_tool("crm").idempotent(true))
        .then_always(Fault::error(|| HttpError::new(401, "bad token")));
    let model = ScriptedModel::new()
        .tool_call("crm", r#"{"text": "7"}"#)
        .text("unreachable");
    let agent = one_call(crm.tool(), &model);

    let error = agent.run("look up 7").await.unwrap_err();

    let stop = error.terminated().expect("a tool's failure ended the run");
    assert_eq!(stop.reason, TerminationReason::Auth);
    assert_eq!(crm.calls(), 1);
}

/// A tool that answers each of `bodies` in turn, then the last one for good.
fn answering(name: &'static str, bodies: &'static [&'static str]) -> FaultyTool {
    let answers = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let tool = agent_errors::ToolDef::new(name, "Answers.", move |_: serde_json::Value| {
        let n = answers.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        async move { Ok::<_, io::Error>(bodies[n.min(bodies.len() - 1)]) }
    });
    FaultyTool::new(tool)
}

#[tokio::test(start_paused = true)]
async fn error_envelopes_are_classified_by_what_they_say() {
    const RESOLVED: &[&str] = &[r#"{"error": "Ticket with ID 1 is already resolved."}"#];
    let tickets = answering("close_ticket", RESOLVED);
    let model = ScriptedModel::new()
        .tool_call("close_ticket", r#"{"id": 1}"#)
        .text("it was already resolved");
    let agent = one_call(tickets.tool(), &model);
    assert_eq!(
        agent.run("close 1").await.unwrap(),
        "it was already resolved"
    );
    assert_eq!(
        tickets.calls(),
        1,
        "a domain refusal is for the model, not retried"
    );
    let said = &shown(&model)[0];
    assert!(
        said.contains("validation") && said.contains("already resolved"),
        "{said}"
    );

    const LIMITED: &[&str] = &[
        r#"{"error": "Rate limit exceeded, try again"}"#,
        r#"{"price": 42}"#,
    ];
    let quotes = answering("quote", LIMITED);
    let model = ScriptedModel::new().tool_call("quote", "{}").text("42");
    let agent = one_call(quotes.tool(), &model);
    assert_eq!(agent.run("price?").await.unwrap(), "42");
    assert_eq!(quotes.calls(), 2, "a rate limit in the body is retried");
    assert_eq!(shown(&model), [r#"{"price": 42}"#]);

    const GRAPHQL: &[&str] = &[
        r#"{"data": null, "errors": [{"message": "Service temporarily unavailable"}]}"#,
        r#"{"data": {"name": "Ada"}}"#,
    ];
    let users = answering("user", GRAPHQL);
    let model = ScriptedModel::new().tool_call("user", "{}").text("Ada");
    let agent = one_call(users.tool().idempotent(true), &model);
    assert_eq!(agent.run("who?").await.unwrap(), "Ada");
    assert_eq!(users.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn an_output_that_merely_mentions_an_error_is_a_result() {
    for body in [
        r#"{"id": 7, "status": "sent", "error": "none so far"}"#,
        r#"{"data": {"n": 1}, "errors": [{"message": "partial"}]}"#,
        r#"{"summary": "the error rate fell", "last_error": "timeout"}"#,
        "error: none",
    ] {
        let bodies: &'static [&'static str] = Box::leak(Box::new([body]));
        let tool = answering("report", bodies);
        let model = ScriptedModel::new().tool_call("report", "{}").text("ok");
        let agent = one_call(tool.tool(), &model);
        assert_eq!(agent.run("report").await.unwrap(), "ok");
        assert_eq!(shown(&model), [body]);
    }
}

#[tokio::test(start_paused = true)]
async fn one_unlucky_call_does_not_open_the_services_circuit() {
    // Six failures in a row over two calls, then the service is back: a breaker that counts
    // consecutive failures (five) would refuse the third call.
    let search = FaultyTool::new(echo_tool("search").idempotent(true)).fail_times(6, unavailable);
    let model = ScriptedModel::new()
        .tool_call("search", r#"{"text": "a"}"#)
        .tool_call("search", r#"{"text": "b"}"#)
        .tool_call("search", r#"{"text": "c"}"#)
        .text("found c");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tool(search.tool())
        .recommended()
        .build()
        .unwrap();

    assert_eq!(agent.run("search").await.unwrap(), "found c");

    assert_eq!(search.calls(), 7);
    assert_eq!(
        agent.service_breaker().state("search"),
        BreakerState::Closed
    );
    assert_eq!(shown(&model).last().map(String::as_str), Some("c"));
}

#[tokio::test(start_paused = true)]
async fn the_services_circuit_is_judged_from_its_twentieth_call() {
    // A service that is really down: every run's call fails its three tries. Six runs make 18
    // calls and the circuit stays closed; the 20th opens it and the 21st is refused unsent.
    let search = FaultyTool::new(echo_tool("search").idempotent(true)).fail_times(100, unavailable);
    let model = (0..7).fold(ScriptedModel::new(), |model, _| {
        model
            .tool_call("search", r#"{"text": "a"}"#)
            .text("gave up")
    });
    let agent = one_call(search.tool(), &model);
    for _ in 0..6 {
        assert_eq!(agent.run("search").await.unwrap(), "gave up");
    }
    assert_eq!(search.calls(), 18);
    assert_eq!(
        agent.service_breaker().state("search"),
        BreakerState::Closed
    );

    assert_eq!(agent.run("search").await.unwrap(), "gave up");

    assert_eq!(search.calls(), 20, "the third try met the open circuit");
    assert_eq!(agent.service_breaker().state("search"), BreakerState::Open);
    let said = shown(&model).pop().unwrap();
    assert!(said.contains("circuit is open"), "{said}");
}

#[tokio::test(start_paused = true)]
async fn an_open_circuit_tells_the_model_why_and_when_to_try_again() {
    let search = FaultyTool::new(echo_tool("search").idempotent(true)).fail_times(1, unavailable);
    let model = ScriptedModel::new()
        .tool_call("search", r#"{"text": "a"}"#)
        .text("will try later");
    let breaker = Arc::new(ServiceBreaker::new(1, Duration::from_secs(30)).unwrap());
    let agent = Agent::builder("a")
        .model(model.clone())
        .tool(search.tool())
        .service_breaker(breaker)
        .recommended()
        .build()
        .unwrap();

    assert_eq!(agent.run("search").await.unwrap(), "will try later");

    assert_eq!(search.calls(), 1, "the open circuit refused the retry");
    let said = &shown(&model)[0];
    assert!(said.contains("circuit is open"), "{said}");
    assert!(said.contains("Call it again in about 30 s"), "{said}");
}

#[tokio::test(start_paused = true)]
async fn a_broken_tool_is_taken_off_the_table_and_the_run_goes_on() {
    let lookup = FaultyTool::new(echo_tool("lookup"))
        .then_always(Fault::error(|| HttpError::new(400, "unsupported region")));
    let model = (1..=3)
        .fold(ScriptedModel::new(), |model, n| {
            model.tool_call("lookup", format!(r#"{{"text": "{n}"}}"#))
        })
        .tool_call("search", r#"{"text": "the order"}"#)
        .text("found it by searching");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tool(lookup.tool())
        .tool(echo_tool("search"))
        .recommended()
        .build()
        .unwrap();

    assert_eq!(
        agent.run("find the order").await.unwrap(),
        "found it by searching"
    );

    assert_eq!(lookup.calls(), 3);
    let requests = model.requests();
    assert_eq!(offered(&requests[3]), ["search"]);
    let said = shown(&model);
    assert!(said[2].contains("removed from your tools"), "{}", said[2]);
    assert!(!said[1].contains("removed"), "{}", said[1]);
}

#[tokio::test(start_paused = true)]
async fn failures_among_many_successes_do_not_remove_a_tool() {
    // Three not-found answers among seven hits: a tool that mostly works stays.
    let mut faulty = FaultyTool::new(echo_tool("lookup"));
    for n in 0..10 {
        faulty = if n % 3 == 2 {
            faulty.then(Fault::error(|| HttpError::new(404, "no such id")))
        } else {
            faulty.then(Fault::Delay(Duration::ZERO))
        };
    }
    let model = (0..10)
        .fold(ScriptedModel::new(), |model, n| {
            model.tool_call("lookup", format!(r#"{{"text": "{n}"}}"#))
        })
        .text("done");
    let agent = one_call(faulty.tool(), &model);

    assert_eq!(agent.run("look them up").await.unwrap(), "done");

    assert_eq!(faulty.calls(), 10);
    assert!(shown(&model).iter().all(|said| !said.contains("removed")));
}

#[test]
fn explain_shows_the_preset_as_a_layer_of_its_own() {
    let agent = Agent::builder("a")
        .model(ScriptedModel::new())
        .tool(echo_tool("refund").with_policy(policy!(not_found = throw)))
        .recommended()
        .build()
        .unwrap();
    let explained = agent.explain("refund").unwrap();

    let (key, ladder, layer) = explained.for_kind(ErrorKind::Timeout);
    assert_eq!(key, PolicyKey::Kind(ErrorKind::Timeout));
    assert_eq!(ladder.to_string(), "[retry(3, when_safe), escalate]");
    assert_eq!(layer, PolicyLayer::Recommended);
    assert_eq!(
        explained.source_of(PolicyKey::Kind(ErrorKind::NotFound)),
        Some(PolicyLayer::Tool)
    );
    assert_eq!(
        explained.source_of(PolicyKey::Kind(ErrorKind::Auth)),
        Some(PolicyLayer::Recommended)
    );
    assert!(explained.warnings().is_empty());
    let text = explained.to_string();
    for line in [
        "timeout       = [retry(3, when_safe), escalate]  <- recommended preset",
        "not_found     = throw  <- tool",
        "auth          = throw  <- recommended preset",
        "run_breaker   = remove_tool(per_kind, 3 failures and 60% of the last 10 calls)  <- recommended preset",
        "output_check  = error envelopes, classified by their text  <- recommended preset",
    ] {
        assert!(text.contains(line), "{line}\n{text}");
    }
}

#[test]
fn a_retry_that_can_apply_an_effect_twice_is_warned_about() {
    let agent = Agent::builder("a")
        .model(ScriptedModel::new())
        .tool(echo_tool("refund"))
        .tool(echo_tool("search").idempotent(true))
        .tool(echo_tool("charge").keyed(true))
        .on_any_tool_error(policy!(execution = [retry(3), escalate], quota = retry(2)))
        .on_tool_error("refund", policy!(timeout = [retry(3, when_safe), escalate]))
        .build()
        .unwrap();

    let warnings = agent.registry().warnings();
    let keys: Vec<_> = warnings
        .iter()
        .map(|warning| match warning {
            ConfigWarning::RetryMayRepeatEffect { tool, key, layer } => {
                (tool.as_str(), *key, *layer)
            }
            other => panic!("{other}"),
        })
        .collect();
    assert_eq!(
        keys,
        [("refund", PolicyKey::Execution, PolicyLayer::AgentDefaults)]
    );
    let explained = agent.explain("refund").unwrap().to_string();
    assert!(
        explained.contains("warning: `refund`: `execution = retry(..)`"),
        "{explained}"
    );
    assert!(explained.contains("mark it `keyed`"), "{explained}");
    assert!(agent.explain("search").unwrap().warnings().is_empty());
}

#[test]
fn the_preset_is_one_line_in_every_form() {
    assert_eq!(policy!(recommended), Policy::recommended());
    let tuned = policy!(recommended, timeout = [retry(5, when_safe), escalate]);
    assert!(tuned.uses_recommended());
    let Some(Action::Retry(retry)) = tuned
        .get(PolicyKey::Kind(ErrorKind::Timeout))
        .and_then(|ladder| ladder.actions().first())
    else {
        panic!("a retry");
    };
    assert!(retry.when_safe && retry.max_attempts.get() == 5);

    let by_tool = Agent::builder("a")
        .model(ScriptedModel::new())
        .tool(echo_tool("search").with_policy(policy!(recommended)))
        .tool(echo_tool("plain"))
        .build()
        .unwrap();
    assert!(by_tool.explain("search").unwrap().uses_recommended());
    let plain = by_tool.explain("plain").unwrap();
    assert!(!plain.uses_recommended());
    assert_eq!(plain.for_kind(ErrorKind::Timeout).2, PolicyLayer::BuiltIn);
}

#[tokio::test(start_paused = true)]
async fn without_the_preset_the_default_stays_fail_closed() {
    let search = FaultyTool::new(echo_tool("search").idempotent(true)).fail_times(1, unavailable);
    let model = ScriptedModel::new()
        .tool_call("search", r#"{"text": "a"}"#)
        .text("unreachable");
    let agent = Agent::builder("a")
        .model(model)
        .tool(search.tool())
        .build()
        .unwrap();

    assert!(agent.run("search").await.is_err());
    assert_eq!(search.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_rerun_after_did_not_happen_that_fails_again_is_shown_not_the_end_of_the_run() {
    // A 503 of a tool with effects may have taken effect: its reconciler says it did not, the
    // call runs again and meets another 503, whose ladder the call walked already. Its last
    // rung, `escalate`, shows the model the failure; the run goes on.
    let refund = FaultyTool::new(echo_tool("refund")).fail_times(2, unavailable);
    let check = agent_errors::build::ReconcilerDef::from_fn("check", |_| {
        Ok::<_, io::Error>(agent_errors::call::Reconciled::DidNotHappen)
    });
    let model = ScriptedModel::new()
        .tool_call("refund", r#"{"text": "A-7"}"#)
        .text("told the user");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tool(refund.tool().with_reconcile("check"))
        .reconciler(check)
        .recommended()
        .build()
        .unwrap();

    assert_eq!(agent.run("refund A-7").await.unwrap(), "told the user");

    assert_eq!(refund.calls(), 2, "run again once after \"did not happen\"");
    let said = &shown(&model)[0];
    assert!(
        said.contains("503") || said.contains("unavailable"),
        "{said}"
    );
}
