//! Compacting old failures in what the model is sent: after the model called a failing tool
//! again, the earlier failures go as one-line summaries, the latest in full, and the transcript
//! the run hands back keeps everything.

use agent_errors::testing::{Fault, FaultyTool, ScriptedModel, echo_tool, transcript_violations};
use agent_errors::{Agent, HttpError, Message, RunOptions, RunOutcome};

/// The contents of the tool results in `messages`, in order.
fn tool_results(messages: &[Message]) -> Vec<&str> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(result) => Some(result.content.as_str()),
            _ => None,
        })
        .collect()
}

/// A run where `lookup` fails twice with a long error and the model, shown each failure, calls
/// it again and then answers; with the requests the model was sent.
async fn twice_failed(options: RunOptions) -> (RunOutcome, Vec<agent_errors::ChatRequest>) {
    let detail = "the upstream catalogue answered with a long explanation of what went wrong";
    let lookup = FaultyTool::new(echo_tool("lookup")).then_always(Fault::error(move || {
        HttpError::new(404, format!("no such id: {detail}"))
    }));
    let model = ScriptedModel::new()
        .tool_call("lookup", r#"{"text": "1"}"#)
        .tool_call("lookup", r#"{"text": "2"}"#)
        .text("gave up on the lookup");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tool(lookup.tool())
        .build()
        .unwrap();
    let outcome = agent.run_with("go", options).await;
    (outcome, model.requests())
}

#[tokio::test(start_paused = true)]
async fn earlier_failures_of_a_re_asked_call_are_sent_as_one_line_summaries() {
    let (outcome, requests) = twice_failed(RunOptions::new().compact_failures(true)).await;
    let (_, whole) = twice_failed(RunOptions::new()).await;

    assert_eq!(outcome.result.as_deref().unwrap(), "gave up on the lookup");
    assert_eq!(requests.len(), 3);
    let full = tool_results(&whole[2].messages);
    let sent = tool_results(&requests[2].messages);
    assert_eq!(full.len(), 2);
    assert!(sent[0].starts_with("(earlier failure"), "{}", sent[0]);
    assert!(!sent[0].contains('\n'), "one line: {}", sent[0]);
    assert!(sent[0].len() < full[0].len(), "{} vs {}", sent[0], full[0]);
    assert_eq!(sent[1], full[1], "the latest failure is sent in full");
    assert_eq!(
        tool_results(&requests[1].messages),
        tool_results(&whole[1].messages),
        "a single failure is sent as it is"
    );
    assert_eq!(
        tool_results(&outcome.transcript),
        full,
        "the transcript keeps every failure whole"
    );
    assert_eq!(transcript_violations(&requests[2].messages), []);
}

#[tokio::test(start_paused = true)]
async fn without_the_option_every_failure_is_sent_whole() {
    let (outcome, requests) = twice_failed(RunOptions::new()).await;

    let sent = tool_results(&requests[2].messages);
    assert_eq!(sent.len(), 2);
    assert!(
        sent.iter().all(|s| !s.starts_with("(earlier failure")),
        "{sent:?}"
    );
    assert_eq!(tool_results(&outcome.transcript), sent);
    let transcript = &outcome.transcript;
    assert_eq!(requests[2].messages, transcript[..transcript.len() - 1]);
}
