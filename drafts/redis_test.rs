
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_model_one_process_found_down_is_not_asked_by_another() {
    use std::sync::Arc;

    use agent_errors::llm::{CallSource, FallbackModel};
    use agent_errors::testing::ScriptedModel;
    use agent_errors::{ChatModel, ChatRequest, HttpError, Message};

    let server = RedisServer::start();
    let breaker = async |server: &RedisServer| {
        let store = RedisStore::builder(server.url())
            .prefix("models")
            .threshold(NonZeroU32::MIN)
            .cooldown(Duration::from_secs(60))
            .cache_ttl(CACHE_TTL)
            .command_timeout(PATIENT)
            .connect()
            .await
            .expect("valid settings");
        Arc::new(ServiceBreaker::with_store(store))
    };
    let (one, two) = (breaker(&server).await, breaker(&server).await);
    let primary = ScriptedModel::named("big").error(HttpError::new(529, "Overloaded"));
    let fallback = ScriptedModel::named("small").text("first").text("second");
    let in_process = |breaker: &Arc<ServiceBreaker>| {
        FallbackModel::new(primary.clone(), fallback.clone())
            .after(1)
            .expect("1 is not zero")
            .circuit(Arc::clone(breaker))
    };
    let (first, second) = (in_process(&one), in_process(&two));
    let request = ChatRequest::new(vec![Message::user("hi")], vec![]).with_source(CallSource::MAIN_AGENT);

    let answer = first.chat(&request).await.unwrap();
    assert_eq!(answer.text.as_deref(), Some("first"));
    eventually(Duration::from_secs(5), "the primary's circuit is open on Redis", async || {
        two.current_state("model:big").await == BreakerState::Open
    })
    .await;
    tokio::time::sleep(CACHE_TTL).await;

    let answer = second.chat(&request).await.unwrap();
    assert_eq!(answer.text.as_deref(), Some("second"));
    assert_eq!(primary.calls(), 1, "the other process did not ask the primary");
}
