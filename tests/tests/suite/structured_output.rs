//! Structured answers that recover: a final answer that does not fit the output's JSON Schema
//! (or a validator) is shown its problems and asked again, under the agent's output policy.

use agent_errors::run::{InvalidAnswer, Json, OutputPolicy};
use agent_errors::testing::ScriptedModel;
use agent_errors::{AgentBuilder, Event, Limits, Message, RunError};

#[derive(Debug, PartialEq, serde::Deserialize, schemars::JsonSchema)]
struct Order {
    id: String,
    customer: Customer,
}

#[derive(Debug, PartialEq, serde::Deserialize, schemars::JsonSchema)]
struct Customer {
    name: String,
    address: Address,
}

#[derive(Debug, PartialEq, serde::Deserialize, schemars::JsonSchema)]
struct Address {
    city: String,
    zip: u32,
}

const GOOD: &str =
    r#"{"id": "o-1", "customer": {"name": "Ada", "address": {"city": "Oslo", "zip": 150}}}"#;
const NO_ID: &str = r#"{"customer": {"name": "Ada", "address": {"city": "Oslo", "zip": 150}}}"#;
const DEEP_WRONG_TYPE: &str =
    r#"{"id": "o-1", "customer": {"name": "Ada", "address": {"city": "Oslo", "zip": "0150"}}}"#;

/// The user messages the model was sent after its first, in the last request.
fn corrections(model: &ScriptedModel) -> Vec<String> {
    let last = model.last_request().expect("asked");
    (last.messages.iter().skip(2))
        .filter_map(|m| match m {
            Message::User { content } => Some(content.clone()),
            _ => None,
        })
        .collect()
}

fn retries(events: &[Event]) -> Vec<(u32, String)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::OutputReask { attempt, reason } => Some((*attempt, reason.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_missing_field_is_shown_to_the_model_and_fixed_on_the_second_try() {
    let model = ScriptedModel::new().text(NO_ID).text(GOOD);
    let agent = AgentBuilder::<Json<Order>>::new("orders")
        .model(model.clone())
        .build()
        .unwrap();

    let outcome = agent.run_with_report("the order?").await;

    assert_eq!(outcome.result.unwrap().0.id, "o-1");
    assert_eq!(model.calls(), 2);
    assert_eq!(outcome.report.model_calls, 2);
    let told = corrections(&model);
    assert_eq!(told.len(), 1);
    assert!(
        told[0].contains("\"id\" is a required property"),
        "{}",
        told[0]
    );
    let retries = retries(&outcome.report.events);
    assert_eq!(retries.len(), 1);
    assert_eq!(retries[0].0, 1);
}

#[tokio::test(start_paused = true)]
async fn a_wrong_type_two_levels_down_is_caught_with_its_path() {
    let model = ScriptedModel::new().text(DEEP_WRONG_TYPE).text(GOOD);
    let agent = AgentBuilder::<Json<Order>>::new("orders")
        .model(model.clone())
        .build()
        .unwrap();

    let order = agent.run("the order?").await.unwrap().0;

    assert_eq!(order.customer.address.zip, 150);
    let told = corrections(&model);
    assert!(
        told[0].contains("at `/customer/address/zip`"),
        "{}",
        told[0]
    );
    assert!(
        told[0].contains("is not of type \"integer\""),
        "{}",
        told[0]
    );
}

#[tokio::test(start_paused = true)]
async fn an_answer_that_never_fits_ends_the_run_after_exactly_the_allowed_requests() {
    let model = ScriptedModel::new().then_fail_forever(|| std::io::Error::other("unused"));
    for _ in 0..5 {
        model.push(agent_errors::testing::Reply::text(NO_ID));
    }
    let agent = AgentBuilder::<Json<Order>>::new("orders")
        .model(model.clone())
        .output_policy(OutputPolicy::retry(2))
        .build()
        .unwrap();

    let outcome = agent.run_with_report("the order?").await;

    let Err(RunError::InvalidOutput { error, .. }) = outcome.result else {
        panic!("expected InvalidOutput, got {:?}", outcome.result)
    };
    // The answer could not be read as an `Order`: the error is serde's, as it was.
    assert!(
        error.downcast_ref::<serde_json::Error>().is_some(),
        "{error}"
    );
    assert_eq!(model.calls(), 3);
    let retries = retries(&outcome.report.events);
    assert_eq!(retries.iter().map(|r| r.0).collect::<Vec<_>>(), vec![1, 2]);
    assert!(retries[1].1.contains("\"id\" is a required property"));
}

#[tokio::test(start_paused = true)]
async fn a_validator_refusal_ends_the_run_with_the_problems() {
    let model = ScriptedModel::new().text("3").text("4");
    let agent = AgentBuilder::<Json<u32>>::new("count")
        .model(model.clone())
        .output_validator(|n: &Json<u32>| Err(format!("{} is not what I want", n.0)))
        .build()
        .unwrap();

    let result = agent.run("how many?").await;

    let Err(RunError::InvalidOutput { error, text }) = result else {
        panic!("expected InvalidOutput, got {result:?}")
    };
    assert_eq!(text, "4");
    let invalid = error
        .downcast_ref::<InvalidAnswer>()
        .expect("the validator's problems");
    assert_eq!(invalid.problems()[0].message(), "4 is not what I want");
    assert_eq!(model.calls(), 2, "the default policy asks once more");
}

#[tokio::test(start_paused = true)]
async fn the_best_effort_is_the_last_answer_that_could_be_read() {
    let model = ScriptedModel::new().text("7").text("-2").text("-1");
    let agent = AgentBuilder::<Json<i64>>::new("count")
        .model(model.clone())
        .output_validator(|n: &Json<i64>| match n.0 >= 10 {
            true => Ok(()),
            false => Err(format!("{} is below 10", n.0)),
        })
        .output_policy(OutputPolicy::retry(2).then_best_effort())
        .build()
        .unwrap();

    assert_eq!(agent.run("how many?").await.unwrap().0, -1);
    assert_eq!(model.calls(), 3);
    assert!(corrections(&model)[0].contains("7 is below 10"));
}

#[tokio::test(start_paused = true)]
async fn a_fallback_model_answers_once_the_retries_are_spent() {
    let primary = ScriptedModel::named("small").text(NO_ID).text(NO_ID);
    let fallback = ScriptedModel::named("large").text(GOOD);
    let agent = AgentBuilder::<Json<Order>>::new("orders")
        .model(primary.clone())
        .output_policy(OutputPolicy::retry(1).then_fallback(fallback.clone()))
        .build()
        .unwrap();

    let outcome = agent.run_with_report("the order?").await;

    assert_eq!(outcome.result.unwrap().0.id, "o-1");
    assert_eq!((primary.calls(), fallback.calls()), (2, 1));
    assert!(outcome.report.events.iter().any(|e| matches!(
        e,
        Event::LlmFallback { from, to, trigger, .. }
            if from == "small" && to == "large" && *trigger == "invalid_output"
    )));
}

#[tokio::test(start_paused = true)]
async fn re_asks_spend_the_runs_retry_allowance() {
    let model = ScriptedModel::new().text(NO_ID).text(NO_ID).text(GOOD);
    let agent = AgentBuilder::<Json<Order>>::new("orders")
        .model(model.clone())
        .output_policy(OutputPolicy::retry(5))
        .limits(Limits::default().with_max_retries(1))
        .build()
        .unwrap();

    let result = agent.run("the order?").await;

    assert!(
        matches!(result, Err(RunError::InvalidOutput { .. })),
        "{result:?}"
    );
    assert_eq!(model.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_streaming_run_checks_its_final_answer_the_same_way() {
    let model = ScriptedModel::new().text(DEEP_WRONG_TYPE).text(GOOD);
    let agent = AgentBuilder::<Json<Order>>::new("orders")
        .model(model.clone())
        .build()
        .unwrap();

    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    let outcome = agent
        .run_with("the order?", agent_errors::RunOptions::new().stream_to(tx))
        .await;
    while rx.try_recv().is_ok() {}

    assert_eq!(outcome.result.unwrap().0.customer.address.zip, 150);
    assert_eq!(model.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_fallback_model_on_bad_answers_checks_the_whole_schema() {
    use agent_errors::llm::{FallbackModel, FallbackOn};
    let primary = ScriptedModel::named("small").text(DEEP_WRONG_TYPE);
    let backup = ScriptedModel::named("large").text(GOOD);
    let model = FallbackModel::new(primary.clone(), backup.clone()).on([FallbackOn::BadAnswer]);
    let agent = AgentBuilder::<Json<Order>>::new("orders")
        .model(model)
        .output_policy(OutputPolicy::retry(0))
        .build()
        .unwrap();

    let order = agent.run("the order?").await.unwrap().0;

    assert_eq!(order.customer.address.zip, 150);
    assert_eq!((primary.calls(), backup.calls()), (1, 1));
}

/// A run's error logged with its causes says no secret: where serde cannot read the answer (a
/// bearer token where a number goes), the source serde's message quoted is redacted, and it is
/// still serde_json's error to downcast.
#[tokio::test(start_paused = true)]
async fn an_unreadable_answer_s_error_source_quotes_no_secret() {
    let secret = "sk9f8e7d6c5b4a3928172635445362718";
    let answer = format!(r#"{{"city": "Oslo", "zip": "Bearer {secret}"}}"#);
    let model = ScriptedModel::new().text(answer);
    let agent = AgentBuilder::<Json<Address>>::new("where")
        .model(model)
        .output_policy(OutputPolicy::retry(0))
        .build()
        .unwrap();

    let result = agent.run("where?").await;

    let Err(error @ RunError::InvalidOutput { .. }) = &result else {
        panic!("expected InvalidOutput, got {result:?}")
    };
    let mut chain = Vec::new();
    let mut level: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = level {
        chain.push(e.to_string());
        level = e.source();
    }
    assert!(chain.len() >= 2, "{chain:?}");
    assert!(!chain.iter().any(|text| text.contains(secret)), "{chain:?}");
    assert!(chain[1].contains("expected u32"), "{chain:?}");
    let RunError::InvalidOutput { error, text } = error else {
        unreachable!()
    };
    assert!(error.downcast_ref::<serde_json::Error>().is_some());
    assert!(!text.contains(secret), "{text}");
}

/// A validator of yours that panics ends the run with an error naming it; it does not unwind
/// out of the run.
#[tokio::test(start_paused = true)]
async fn a_validator_that_panics_ends_the_run_with_an_error_naming_it() {
    let model = ScriptedModel::new().text("3");
    let agent = AgentBuilder::<Json<u32>>::new("count")
        .model(model)
        .output_validator(|_: &Json<u32>| -> Result<(), String> { panic!("validator bug") })
        .build()
        .unwrap();

    let outcome = agent.run_with_report("how many?").await;

    match outcome.result {
        Err(RunError::CallbackPanicked { callback, message }) => {
            assert_eq!(callback, "OutputValidator::validate");
            assert!(message.contains("validator bug"), "{message}");
        }
        other => panic!("expected the panic caught, got {other:?}"),
    }
}
