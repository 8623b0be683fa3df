//! A fallback model that remembers: once its primary has failed over to the fallback, the
//! primary's circuit is open and requests skip it until the cooldown ends, when one probe
//! decides. Under paused time: backoffs and cooldowns are exact and take no time.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use agent_errors::breaker::{BreakerState, BreakerStore, MemoryStore, ServiceBreaker};
use agent_errors::classify::classify;
use agent_errors::llm::{CallSource, FallbackModel};
use agent_errors::observe::EventLog;
use agent_errors::retry::RetrySchedule;
use agent_errors::testing::{Reply, ScriptedModel};
use agent_errors::{Agent, ChatModel, ChatRequest, Event, HttpError, Message};
use futures_util::StreamExt;
use tokio::time::{Instant, advance};

const COOLDOWN: Duration = Duration::from_secs(30);

fn overload() -> HttpError {
    HttpError::new(529, "Overloaded")
}

fn overloaded_kind() -> agent_errors::ErrorKind {
    classify(&overload()).kind
}

fn ask() -> ChatRequest {
    ChatRequest::new(vec![Message::user("hi")], vec![]).with_source(CallSource::MAIN_AGENT)
}

fn no_jitter() -> RetrySchedule {
    RetrySchedule::default().with_jitter(0.0)
}

/// A primary overloaded 3 times, then answering `then` forever; a fallback answering "small".
fn models(then: &[&str]) -> (ScriptedModel, ScriptedModel) {
    let mut primary = ScriptedModel::named("big").errors(3, overload);
    for text in then {
        primary = primary.text(*text);
    }
    let fallback = ScriptedModel::named("small");
    for _ in 0..10 {
        fallback.push(Reply::text("small"));
    }
    (primary, fallback)
}

fn wrap(
    primary: &ScriptedModel,
    fallback: &ScriptedModel,
) -> FallbackModel<ScriptedModel, ScriptedModel> {
    FallbackModel::new(primary.clone(), fallback.clone()).backoff(no_jitter())
}

async fn text_of(model: &impl ChatModel) -> String {
    let answer = model.chat(&ask()).await.expect("an answer");
    answer.text.unwrap_or_default()
}

fn circuit(state: BreakerState) -> Event {
    Event::LlmCircuit {
        model: "big".into(),
        state,
    }
}

fn skipped() -> Event {
    Event::LlmFallback {
        from: "big".into(),
        to: "small".into(),
        trigger: "circuit_open",
        attempts: 0,
        kind: overloaded_kind(),
    }
}

fn names(log: &EventLog) -> Vec<&'static str> {
    log.snapshot().iter().map(Event::name).collect()
}

#[tokio::test(start_paused = true)]
async fn an_overloaded_primary_is_skipped_until_its_cooldown_then_a_probe_closes_it() {
    let (primary, fallback) = models(&["big again", "big still"]);
    let log = Arc::new(EventLog::new());
    let model = wrap(&primary, &fallback).event_log(Arc::clone(&log));

    let start = Instant::now();
    assert_eq!(text_of(&model).await, "small");
    assert_eq!((primary.calls(), fallback.calls()), (3, 1));
    assert_eq!(start.elapsed(), Duration::from_millis(1500), "two backoffs");
    assert_eq!(model.circuit_state(), BreakerState::Open);
    assert_eq!(
        names(&log),
        ["llm_retry", "llm_retry", "llm_circuit", "llm_fallback"],
        "the third overload opened the circuit, then the request fell back"
    );
    assert_eq!(log.snapshot()[2], circuit(BreakerState::Open));

    // The next turn: straight to the fallback, no call and no backoff spent on the primary.
    let log = Arc::new(EventLog::new());
    let model = model.event_log(Arc::clone(&log));
    let start = Instant::now();
    assert_eq!(text_of(&model).await, "small");
    assert_eq!((primary.calls(), fallback.calls()), (3, 2));
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(log.snapshot(), [skipped()]);

    advance(COOLDOWN).await;
    assert_eq!(model.circuit_state(), BreakerState::HalfOpen);
    let log = Arc::new(EventLog::new());
    let model = model.event_log(Arc::clone(&log));
    assert_eq!(
        text_of(&model).await,
        "big again",
        "the probe reached the primary"
    );
    assert_eq!((primary.calls(), fallback.calls()), (4, 2));
    assert_eq!(
        log.snapshot(),
        [
            circuit(BreakerState::HalfOpen),
            circuit(BreakerState::Closed)
        ]
    );
    assert_eq!(model.circuit_state(), BreakerState::Closed);

    assert_eq!(
        text_of(&model).await,
        "big still",
        "closed: the primary answers"
    );
    assert_eq!((primary.calls(), fallback.calls()), (5, 2));
}

#[tokio::test(start_paused = true)]
async fn with_its_circuit_open_the_primary_is_asked_once_when_the_fallback_fails_too() {
    let primary = ScriptedModel::named("big")
        .errors(3, overload)
        .text("big")
        .text("big again");
    let fallback = ScriptedModel::named("small")
        .text("small")
        .errors(1, overload);
    let model = wrap(&primary, &fallback);
    assert_eq!(text_of(&model).await, "small");
    assert_eq!(model.circuit_state(), BreakerState::Open);

    // The fallback is overloaded too: the primary, skipped first, gets one call and answers,
    // which closes its circuit.
    let start = Instant::now();
    assert_eq!(text_of(&model).await, "big");
    assert_eq!((primary.calls(), fallback.calls()), (4, 2));
    assert_eq!(
        start.elapsed(),
        Duration::ZERO,
        "no backoff on either model"
    );
    assert_eq!(model.circuit_state(), BreakerState::Closed);
    assert_eq!(text_of(&model).await, "big again");
    assert_eq!((primary.calls(), fallback.calls()), (5, 2));
}

#[tokio::test(start_paused = true)]
async fn with_both_models_failing_an_open_circuit_costs_one_call_of_each() {
    let primary = ScriptedModel::named("big").errors(4, overload);
    let fallback = ScriptedModel::named("small").errors(2, overload);
    let model = wrap(&primary, &fallback);
    assert!(model.chat(&ask()).await.is_err());
    assert_eq!((primary.calls(), fallback.calls()), (3, 1));
    assert_eq!(model.circuit_state(), BreakerState::Open);

    let start = Instant::now();
    let failed = model.chat(&ask()).await.expect_err("both overloaded");
    assert_eq!(classify(&*failed).kind, overloaded_kind());
    assert_eq!(
        (primary.calls(), fallback.calls()),
        (4, 2),
        "one call each, no retry"
    );
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(
        model.circuit_state(),
        BreakerState::Open,
        "the primary failed again"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_probe_reopens_the_circuit_for_another_cooldown() {
    let primary = ScriptedModel::named("big")
        .errors(4, overload)
        .text("recovered");
    let (_, fallback) = models(&[]);
    let model = wrap(&primary, &fallback);
    assert_eq!(text_of(&model).await, "small");
    advance(COOLDOWN).await;

    let log = Arc::new(EventLog::new());
    let model = model.event_log(Arc::clone(&log));
    let start = Instant::now();
    assert_eq!(text_of(&model).await, "small");
    assert_eq!(
        primary.calls(),
        4,
        "one probe call, not another round of retries"
    );
    assert_eq!(
        start.elapsed(),
        Duration::ZERO,
        "no backoff after a failed probe"
    );
    assert_eq!(
        log.snapshot(),
        [
            circuit(BreakerState::HalfOpen),
            circuit(BreakerState::Open),
            Event::LlmFallback {
                from: "big".into(),
                to: "small".into(),
                trigger: "overload",
                attempts: 1,
                kind: overloaded_kind(),
            },
        ]
    );

    advance(COOLDOWN - Duration::from_secs(1)).await;
    assert_eq!(text_of(&model).await, "small");
    assert_eq!(primary.calls(), 4, "open again for a whole cooldown");
    advance(Duration::from_secs(1)).await;
    assert_eq!(text_of(&model).await, "recovered");
    assert_eq!(primary.calls(), 5);
}

#[tokio::test(start_paused = true)]
async fn clones_share_the_circuit() {
    let (primary, fallback) = models(&[]);
    let model = wrap(&primary, &fallback);
    let clone = model.clone();
    assert_eq!(text_of(&model).await, "small");
    assert_eq!(text_of(&clone).await, "small");
    assert_eq!(primary.calls(), 3, "the clone skipped the primary");
    assert_eq!(clone.circuit_state(), BreakerState::Open);
}

#[tokio::test(start_paused = true)]
async fn the_runs_of_an_agent_share_the_circuit() {
    let (primary, fallback) = models(&[]);
    let agent = Agent::builder("a")
        .model(wrap(&primary, &fallback))
        .build()
        .unwrap();

    let first = agent.run_with_report("one").await;
    assert_eq!(first.result.unwrap(), "small");
    assert_eq!(primary.calls(), 3);

    let start = Instant::now();
    let second = agent.run_with_report("two").await;
    assert_eq!(second.result.unwrap(), "small");
    assert_eq!(
        primary.calls(),
        3,
        "the second run went straight to the fallback"
    );
    assert_eq!(start.elapsed(), Duration::ZERO);
    let fallbacks: Vec<&Event> = (second.report.events.iter())
        .filter(|event| event.name() == "llm_fallback")
        .collect();
    assert_eq!(fallbacks, [&skipped()]);
}

#[tokio::test(start_paused = true)]
async fn fallback_models_over_one_shared_store_share_the_circuit() {
    // Two processes of a fleet, each with its own breaker over the store they share.
    let store: Arc<dyn BreakerStore> =
        Arc::new(MemoryStore::new(NonZeroU32::new(3).unwrap(), COOLDOWN));
    let breaker = || Arc::new(ServiceBreaker::with_shared_store(Arc::clone(&store)));
    let (primary_a, fallback_a) = models(&[]);
    let (primary_b, fallback_b) = models(&["b's answer"]);
    let a = wrap(&primary_a, &fallback_a).service_breaker(breaker());
    let log = Arc::new(EventLog::new());
    let b = wrap(&primary_b, &fallback_b)
        .service_breaker(breaker())
        .event_log(Arc::clone(&log));

    assert_eq!(text_of(&a).await, "small");
    assert_eq!(store.state("model:big"), BreakerState::Open);
    assert_eq!(b.circuit_state(), BreakerState::Open);
    assert_eq!(text_of(&b).await, "small");
    assert_eq!(
        primary_b.calls(),
        0,
        "b never called the primary a found overloaded"
    );
    let Some(Event::LlmFallback {
        trigger, attempts, ..
    }) = log.snapshot().pop()
    else {
        panic!("a fallback event");
    };
    assert_eq!((trigger, attempts), ("circuit_open", 0));
}

#[tokio::test(start_paused = true)]
async fn remember_sets_the_cooldown_and_forget_asks_the_primary_every_time() {
    let (primary, fallback) = models(&["big"]);
    let model = wrap(&primary, &fallback).remember(Duration::from_secs(120));
    assert_eq!(text_of(&model).await, "small");
    advance(Duration::from_secs(60)).await;
    assert_eq!(text_of(&model).await, "small");
    assert_eq!(primary.calls(), 3, "still open after 60 s");
    advance(Duration::from_secs(60)).await;
    assert_eq!(text_of(&model).await, "big");

    let primary = ScriptedModel::named("big").errors(6, overload);
    let model = wrap(&primary, &fallback).forget();
    assert_eq!(text_of(&model).await, "small");
    assert_eq!(text_of(&model).await, "small");
    assert_eq!(primary.calls(), 6, "each request asked the primary again");
    assert_eq!(model.circuit_state(), BreakerState::Closed);
}

#[tokio::test(start_paused = true)]
async fn the_circuit_opens_after_the_fallback_threshold() {
    let primary = ScriptedModel::named("big").errors(2, overload).text("big");
    let (_, fallback) = models(&[]);
    let model = wrap(&primary, &fallback).after(2).unwrap();
    assert_eq!(text_of(&model).await, "small");
    assert_eq!(primary.calls(), 2);
    assert_eq!(
        model.circuit_state(),
        BreakerState::Open,
        "opened with `after(2)`"
    );

    // Failures that do not send a request to the fallback leave the circuit closed.
    let primary = ScriptedModel::named("big")
        .errors(4, || HttpError::new(400, "bad request"))
        .text("big");
    let model = wrap(&primary, &fallback).after(2).unwrap();
    for _ in 0..4 {
        model.chat(&ask()).await.unwrap_err();
    }
    assert_eq!(model.circuit_state(), BreakerState::Closed);
    assert_eq!(text_of(&model).await, "big");
}

#[tokio::test(start_paused = true)]
async fn a_stream_skips_an_open_circuit_too() {
    let (primary, fallback) = models(&[]);
    let model = wrap(&primary, &fallback);
    assert_eq!(text_of(&model).await, "small");
    let request = ask();
    let mut stream = model.chat_stream(&request).await.expect("a stream");
    while let Some(event) = stream.next().await {
        event.expect("a whole stream");
    }
    assert_eq!((primary.calls(), fallback.calls()), (3, 2));
}

#[tokio::test(start_paused = true)]
async fn while_the_probe_is_out_other_requests_fall_back_and_a_cancelled_probe_is_given_back() {
    let primary = ScriptedModel::named("big").errors(3, overload);
    primary.push(Reply::text("slow").after(Duration::from_secs(10)));
    primary.push(Reply::text("probe again"));
    let (_, fallback) = models(&[]);
    let model = wrap(&primary, &fallback);
    assert_eq!(text_of(&model).await, "small");
    advance(COOLDOWN).await;

    let probe = tokio::time::timeout(Duration::from_secs(1), text_of(&model));
    let other = async {
        tokio::task::yield_now().await;
        text_of(&model).await
    };
    let (probe, other) = tokio::join!(probe, other);
    assert!(probe.is_err(), "the probe was cancelled by its timeout");
    assert_eq!(
        other, "small",
        "the probe was out: the other request fell back"
    );
    assert_eq!(primary.calls(), 4);

    assert_eq!(model.circuit_state(), BreakerState::HalfOpen);
    assert_eq!(
        text_of(&model).await,
        "probe again",
        "the probe was given back"
    );
    assert_eq!(model.circuit_state(), BreakerState::Closed);
}

mod rig_chain {
    //! The same memory in a rig `RecoveringModel` chain, under rig's own loop.

    use std::sync::Arc;
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    use agent_errors::breaker::ServiceBreaker;
    use agent_errors::retry::RetrySchedule;
    use agent_errors::rig::RecoveringModel;
    use agent_errors::{Event, RunContext};
    use rig_core::test_utils::MockTurn;
    use tokio::time::advance;

    use crate::rig::{failing, failing_as, status};

    fn turns(n: usize) -> Vec<MockTurn> {
        (0..n).map(|_| MockTurn::text("from the backup")).collect()
    }

    fn fallbacks(run: &RunContext) -> Vec<(&'static str, u32)> {
        let events = run.events().snapshot();
        (events.iter())
            .filter_map(|event| match event {
                Event::LlmFallback {
                    trigger, attempts, ..
                } => Some((*trigger, *attempts)),
                _ => None,
            })
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_model_that_failed_for_good_is_skipped_until_a_probe_finds_it_answering() {
        let run = Arc::new(RunContext::new());
        let (primary, primary_calls) =
            failing([status(529), status(529)], [MockTurn::text("primary")]);
        let (backup, backup_calls) = failing([], turns(3));
        let schedule = RetrySchedule::attempts(2).unwrap().with_jitter(0.0);
        let model = RecoveringModel::new(primary, schedule, Arc::clone(&run)).fallback(backup);
        let agent = rig_agent::AgentBuilder::new(model).build();

        for _ in 0..2 {
            let answer = agent.prompt("hi").await.unwrap();
            assert_eq!(answer.output(), "from the backup");
        }
        assert_eq!(
            primary_calls.calls.load(Ordering::SeqCst),
            2,
            "skipped the second time"
        );
        assert_eq!(fallbacks(&run), [("overload", 2), ("circuit_open", 0)]);

        advance(Duration::from_secs(30)).await;
        let answer = agent.prompt("hi").await.unwrap();
        assert_eq!(answer.output(), "primary", "the probe closed the circuit");
        assert_eq!(primary_calls.calls.load(Ordering::SeqCst), 3);
        assert_eq!(backup_calls.calls.load(Ordering::SeqCst), 2);
        let circuits: Vec<_> = (run.events().snapshot().into_iter())
            .filter(|event| event.name() == "llm_circuit")
            .collect();
        assert_eq!(circuits.len(), 3, "open, half open, closed: {circuits:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_skipped_model_gets_one_call_when_the_rest_of_the_chain_fails() {
        let run = Arc::new(RunContext::new());
        let (primary, primary_calls) = failing(
            [status(529), status(529)],
            [MockTurn::text("primary, once asked")],
        );
        let (backup, backup_calls) =
            failing_as([None, Some(status(529)), Some(status(529))], turns(1));
        let schedule = RetrySchedule::attempts(2).unwrap().with_jitter(0.0);
        let model = RecoveringModel::new(primary, schedule, Arc::clone(&run)).fallback(backup);
        let agent = rig_agent::AgentBuilder::new(model).build();
        let answer = agent.prompt("hi").await.unwrap();
        assert_eq!(answer.output(), "from the backup");

        // The primary's circuit is open and the backup is overloaded now: after the backup's
        // two calls, the skipped primary gets one, which answers.
        let answer = agent.prompt("hi").await.unwrap();
        assert_eq!(answer.output(), "primary, once asked");
        assert_eq!(
            primary_calls.calls.load(Ordering::SeqCst),
            3,
            "two, then one"
        );
        assert_eq!(backup_calls.calls.load(Ordering::SeqCst), 3);
        assert_eq!(fallbacks(&run), [("overload", 2), ("circuit_open", 0)]);
    }

    #[tokio::test(start_paused = true)]
    async fn runs_given_one_breaker_share_what_they_learn_and_a_failed_probe_reopens() {
        let breaker = Arc::new(ServiceBreaker::new(2, Duration::from_secs(30)).unwrap());
        let (primary, primary_calls) = failing([status(503), status(503), status(503)], []);
        let (backup, _) = failing([], turns(4));
        let schedule = RetrySchedule::attempts(2).unwrap().with_jitter(0.0);
        let mut runs = Vec::new();
        for _ in 0..2 {
            let run = Arc::new(RunContext::new());
            let model = RecoveringModel::new(primary.clone(), schedule.clone(), Arc::clone(&run))
                .fallback(backup.clone())
                .service_breaker(Arc::clone(&breaker));
            let answer = rig_agent::AgentBuilder::new(model)
                .build()
                .prompt("hi")
                .await;
            assert_eq!(answer.unwrap().output(), "from the backup");
            runs.push(run);
        }
        assert_eq!(
            primary_calls.calls.load(Ordering::SeqCst),
            2,
            "the second run skipped it"
        );
        assert_eq!(fallbacks(&runs[1]), [("circuit_open", 0)]);

        advance(Duration::from_secs(30)).await;
        let run = Arc::new(RunContext::new());
        let model = RecoveringModel::new(primary.clone(), schedule, Arc::clone(&run))
            .fallback(backup.clone())
            .service_breaker(Arc::clone(&breaker));
        let agent = rig_agent::AgentBuilder::new(model).build();
        assert_eq!(
            agent.prompt("hi").await.unwrap().output(),
            "from the backup"
        );
        assert_eq!(
            primary_calls.calls.load(Ordering::SeqCst),
            3,
            "one probe, no retry"
        );
        assert_eq!(fallbacks(&run), [("outage", 1)]);
        agent.prompt("hi").await.unwrap();
        assert_eq!(primary_calls.calls.load(Ordering::SeqCst), 3, "open again");
    }
}
