
#[tokio::test(start_paused = true)]
async fn a_rig_chain_remembers_a_model_that_failed_for_good_until_its_probe() {
    use rig_core::driver::Model;
    use rig_core::test_utils::MockScript;

    let run = Arc::new(RunContext::new());
    let (_, primary) = failing([status(503), status(503)], [MockTurn::text("big is back")]);
    let (_, backup) = failing([], [MockTurn::text("one"), MockTurn::text("two")]);
    let model = RecoveringModel::new(
        Model::new(MockScript::new("mock").with_id("big"), primary.clone()),
        RetrySchedule::attempts(2).unwrap(),
    )
    .fallback(Model::new(
        MockScript::new("mock").with_id("small"),
        backup.clone(),
    ))
    .in_run(Arc::clone(&run));
    let agent = rig_agent::AgentBuilder::new(model).build();

    assert_eq!(agent.prompt("hi").await.unwrap().output(), "one");
    assert_eq!(agent.prompt("hi").await.unwrap().output(), "two");
    assert_eq!(
        primary.calls.load(Ordering::SeqCst),
        2,
        "the second prompt did not ask the model that failed for good"
    );
    let triggers: Vec<&str> = run
        .events()
        .snapshot()
        .iter()
        .filter_map(|event| match event {
            agent_errors::Event::LlmFallback { trigger, .. } => Some(*trigger),
            _ => None,
        })
        .collect();
    assert_eq!(triggers, ["outage", "circuit_open"]);

    // After the cooldown one prompt probes it, with one call, and it answers again.
    tokio::time::advance(std::time::Duration::from_secs(30)).await;
    assert_eq!(agent.prompt("hi").await.unwrap().output(), "big is back");
    assert_eq!(primary.calls.load(Ordering::SeqCst), 3);
}
