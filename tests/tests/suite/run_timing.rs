//! How a run and its parts are timed: the run's start is also its first model turn's, and a run
//! that ends right after a model turn ends at that turn's end, so each boundary is read off the
//! clock once. The durations must still be those of what happened in between, calls included.

use std::collections::BTreeMap;
use std::time::Duration;

use agent_errors::prelude::*;
use agent_errors::testing::{Reply, ScriptedModel};
use agent_errors::{ChatResponse, HttpError, Limits, ToolCall};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

/// Looks something up in a service that takes two seconds.
#[tool]
async fn slow_lookup() -> Result<String, std::io::Error> {
    tokio::time::sleep(Duration::from_secs(2)).await;
    Ok("found".into())
}

/// Every histogram's samples by name, whatever their labels (a snapshot drains them: take one).
fn histograms(recorder: &DebuggingRecorder) -> BTreeMap<String, Vec<f64>> {
    let mut found = BTreeMap::<String, Vec<f64>>::new();
    for (key, _, _, value) in recorder.snapshotter().snapshot().into_vec() {
        if let DebugValue::Histogram(values) = value {
            let samples = found.entry(key.key().name().to_owned()).or_default();
            samples.extend(values.iter().map(|v| v.0));
        }
    }
    found
}

/// Signs in to a service that takes two seconds to say the credentials expired.
#[tool]
async fn slow_login() -> Result<String, HttpError> {
    tokio::time::sleep(Duration::from_secs(2)).await;
    Err(HttpError::new(401, "credentials expired"))
}

fn one_call_then_text(tool: &str, turns: [u64; 2]) -> ScriptedModel {
    let call = ToolCall::new("call-1", tool, "{}");
    let asks = Reply::response(ChatResponse::tool_calls(vec![call]));
    ScriptedModel::named("timed")
        .reply(asks.after(Duration::from_secs(turns[0])))
        .reply(Reply::text("found it").after(Duration::from_secs(turns[1])))
}

#[tokio::test(start_paused = true)]
async fn a_run_lasts_from_its_first_turn_s_start_to_its_last_turn_s_end_calls_included() {
    let recorder = DebuggingRecorder::new();
    let _guard = metrics::set_default_local_recorder(&recorder);
    let agent = Agent::builder("timed")
        .model(one_call_then_text("slow_lookup", [1, 3]))
        .tools(tools![slow_lookup])
        .build()
        .unwrap();

    assert_eq!(agent.run("look it up").await.unwrap(), "found it");

    let timed = histograms(&recorder);
    assert_eq!(timed["gen_ai.client.operation.duration"], [1.0, 3.0]);
    assert_eq!(timed["gen_ai.execute_tool.duration"], [2.0]);
    assert_eq!(timed["gen_ai.invoke_agent.duration"], [6.0]);
}

#[tokio::test(start_paused = true)]
async fn a_run_its_deadline_stops_mid_call_lasts_until_the_deadline_not_its_turn() {
    let recorder = DebuggingRecorder::new();
    let _guard = metrics::set_default_local_recorder(&recorder);
    let agent = Agent::builder("timed")
        .model(one_call_then_text("slow_lookup", [1, 3]))
        .tools(tools![slow_lookup])
        .limits(Limits::default().with_run_deadline(Duration::from_secs(2)))
        .build()
        .unwrap();

    let outcome = agent.run_with_report("look it up").await;

    assert!(matches!(
        outcome.result,
        Err(RunError::DeadlineExceeded { .. })
    ));
    let timed = histograms(&recorder);
    assert_eq!(timed["gen_ai.client.operation.duration"], [1.0]);
    assert_eq!(timed["gen_ai.invoke_agent.duration"], [2.0]);
}

#[tokio::test(start_paused = true)]
async fn a_run_its_tool_call_ends_lasts_until_the_call_ends_not_its_turn() {
    let recorder = DebuggingRecorder::new();
    let _guard = metrics::set_default_local_recorder(&recorder);
    let agent = Agent::builder("timed")
        .model(one_call_then_text("slow_login", [1, 3]))
        .tools(tools![slow_login])
        .build()
        .unwrap();

    let outcome = agent.run_with_report("sign in").await;

    assert!(matches!(outcome.result, Err(RunError::Terminated(_))));
    let timed = histograms(&recorder);
    assert_eq!(timed["gen_ai.client.operation.duration"], [1.0]);
    assert_eq!(timed["gen_ai.invoke_agent.duration"], [3.0]);
}
