
/// The `llm_fallback` event of a request the primary's open circuit sent straight to the
/// fallback.
fn circuit_open() -> Event {
    Event::LlmFallback {
        from: "big".into(),
        to: "small".into(),
        trigger: "circuit_open",
        attempts: 0,
        kind: agent_errors::ErrorKind::Transient,
    }
}

#[tokio::test(start_paused = true)]
async fn an_open_circuit_sends_the_next_requests_straight_to_the_fallback_until_a_probe() {
    let primary = Scripted::new(
        "big",
        vec![overloaded(), overloaded(), text("big is back"), text("big again")],
        unexpected,
    );
    let fallback = Scripted::new("small", vec![], || text("from small"));
    let log = Arc::new(EventLog::new());
    let model = FallbackModel::new(primary.clone(), fallback.clone())
        .after(2)
        .unwrap()
        .backoff(no_jitter())
        .event_log(log.clone());
    let request = ask(CallSource::MAIN_AGENT);

    model.chat(&request).await.unwrap();
    assert_eq!((primary.calls(), fallback.calls()), (2, 1));

    // The next requests do not ask the primary, and wait for nothing.
    let before = log.snapshot().len();
    let start = Instant::now();
    for _ in 0..3 {
        let reply = model.chat(&request).await.unwrap();
        assert_eq!(reply.text.as_deref(), Some("from small"));
    }
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!((primary.calls(), fallback.calls()), (2, 4));
    assert_eq!(
        log.snapshot()[before..],
        [circuit_open(), circuit_open(), circuit_open()]
    );

    // After the cooldown one request probes the primary; its answer closes the circuit.
    tokio::time::advance(SECS(30)).await;
    let probe = model.chat(&request).await.unwrap();
    assert_eq!(probe.text.as_deref(), Some("big is back"));
    let after = model.chat(&request).await.unwrap();
    assert_eq!(after.text.as_deref(), Some("big again"));
    assert_eq!((primary.calls(), fallback.calls()), (4, 4));
}

#[tokio::test(start_paused = true)]
async fn a_failed_probe_opens_the_circuit_again_after_one_call() {
    let primary = Scripted::new("big", vec![], overloaded);
    let fallback = Scripted::new("small", vec![], || text("from small"));
    let model = FallbackModel::new(primary.clone(), fallback.clone())
        .after(3)
        .unwrap()
        .backoff(no_jitter());
    let request = ask(CallSource::MAIN_AGENT);
    model.chat(&request).await.unwrap();
    assert_eq!(primary.calls(), 3);

    tokio::time::advance(SECS(30)).await;
    let start = Instant::now();
    model.chat(&request).await.unwrap();
    assert_eq!(primary.calls(), 4, "the probe is one call");
    assert_eq!(start.elapsed(), Duration::ZERO, "and no backoff");

    model.chat(&request).await.unwrap();
    assert_eq!(primary.calls(), 4, "open again: not asked");
    assert_eq!(fallback.calls(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_background_call_that_fell_back_at_once_does_not_open_the_circuit() {
    let primary = Scripted::new("big", vec![overloaded(), text("big")], unexpected);
    let fallback = Scripted::new("small", vec![text("title")], unexpected);
    let model = FallbackModel::new(primary.clone(), fallback.clone())
        .after(3)
        .unwrap();

    model.chat(&ask(CallSource::BACKGROUND)).await.unwrap();
    let reply = model.chat(&ask(CallSource::MAIN_AGENT)).await.unwrap();

    assert_eq!(reply.text.as_deref(), Some("big"), "the primary was not judged");
}

#[tokio::test(start_paused = true)]
async fn a_runs_later_turns_go_straight_to_the_fallback() {
    let primary = Scripted::new("big", vec![], overloaded);
    let fallback = agent_errors::testing::ScriptedModel::named("small")
        .tool_call("echo", r#"{"text": "one"}"#)
        .tool_call("echo", r#"{"text": "two"}"#)
        .text("done");
    let model = FallbackModel::new(primary.clone(), fallback.clone())
        .after(2)
        .unwrap()
        .backoff(no_jitter());
    let agent = agent_errors::Agent::builder("a")
        .model(model)
        .tool(agent_errors::testing::echo_tool("echo"))
        .build()
        .unwrap();

    let start = Instant::now();
    let outcome = agent.run_with_report("hi").await;

    assert_eq!(outcome.result.unwrap(), "done");
    assert_eq!(primary.calls(), 2, "only the first turn asked the primary");
    assert_eq!(fallback.calls(), 3);
    assert_eq!(
        start.elapsed(),
        Duration::from_millis(500),
        "one backoff, in the first turn"
    );
    let triggers: Vec<&str> = outcome
        .report
        .named("llm_fallback")
        .map(|event| match event {
            Event::LlmFallback { trigger, .. } => *trigger,
            _ => unreachable!("named llm_fallback"),
        })
        .collect();
    assert_eq!(triggers, ["overload", "circuit_open", "circuit_open"]);
}

#[tokio::test(start_paused = true)]
async fn wrappers_that_share_a_breaker_remember_together() {
    let circuits = Arc::new(agent_errors::breaker::ServiceBreaker::new(1, SECS(60)).unwrap());
    let primary = Scripted::new("big", vec![overloaded(), overloaded()], unexpected);
    let support = FallbackModel::new(primary.clone(), Scripted::new("small", vec![], || text("s")))
        .after(2)
        .unwrap()
        .backoff(no_jitter())
        .circuit(Arc::clone(&circuits));
    let billing = FallbackModel::new(primary.clone(), Scripted::new("small", vec![], || text("b")))
        .circuit(Arc::clone(&circuits));

    support.chat(&ask(CallSource::MAIN_AGENT)).await.unwrap();
    let reply = billing.chat(&ask(CallSource::MAIN_AGENT)).await.unwrap();

    assert_eq!(reply.text.as_deref(), Some("b"));
    assert_eq!(primary.calls(), 2, "billing did not ask the primary support found down");
    assert_eq!(
        circuits.state("model:big"),
        agent_errors::breaker::BreakerState::Open
    );
}
