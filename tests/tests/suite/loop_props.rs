//! Property test of the loop invariant over random scripts and random faults:
//!
//! - every tool call the model makes gets exactly one result (checked on every request the
//!   scripted model was sent, and on the final transcript), and history only grows;
//! - the run ends, within the turn cap, and the report's counts match what the model saw;
//! - no tool is called after its per-run breaker tripped;
//! - an auth failure is never retried: one call per model call of the tool, and the run ends;
//! - a run that ends on a tool outcome gives the model no further turn.
//!
//! Each case runs on a paused clock, so backoff, delays and cancellation take no real time.

use std::fmt;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_errors::call::{ToolFuture, ToolHandler};
use agent_errors::testing::{Fault, FaultyTool, ScriptedModel, echo_tool, transcript_violations};
use agent_errors::{Agent, RunError, RunOptions};
use agent_errors::{
    Cancellation, HttpError, LlmErrorDecision, Message, ToolDef, ToolError,
    policy::{Action, Policy, PolicyKey},
};
use proptest::prelude::*;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};

const TOOLS: [&str; 2] = ["alpha", "beta"];

#[derive(Debug, Clone, Copy)]
enum FaultKind {
    Succeed,
    Transient,
    Quota,
    Timeout,
    Auth,
    NotFound,
    Validation,
    Panic,
    Slow,
}

impl FaultKind {
    fn fault(self) -> Fault {
        match self {
            FaultKind::Succeed => Fault::Delay(Duration::ZERO),
            FaultKind::Transient => Fault::error(|| HttpError::new(503, "busy")),
            FaultKind::Quota => Fault::error(|| HttpError::new(429, "slow down")),
            FaultKind::Timeout => Fault::error(|| io::Error::from(io::ErrorKind::TimedOut)),
            FaultKind::Auth => Fault::error(|| HttpError::new(401, "token expired")),
            FaultKind::NotFound => Fault::error(|| HttpError::new(404, "no such thing")),
            FaultKind::Validation => Fault::error(|| HttpError::new(400, "bad field")),
            FaultKind::Panic => Fault::Panic(INJECTED_PANIC.into()),
            FaultKind::Slow => Fault::Delay(Duration::from_millis(700)),
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum PolicyKind {
    BuiltIn,
    Retry(u32),
    RetryThenEscalate,
}

impl PolicyKind {
    fn policy(self) -> Policy {
        match self {
            PolicyKind::BuiltIn => Policy::new(),
            PolicyKind::Retry(n) => {
                Policy::new().on(PolicyKey::Execution, Action::retry(n).expect("n >= 1"))
            }
            PolicyKind::RetryThenEscalate => Policy::new().on(
                PolicyKey::Execution,
                [Action::retry(2).expect("2 >= 1"), Action::Escalate],
            ),
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Args {
    Valid,
    Broken,
    WrongShape,
}

#[derive(Debug, Clone)]
enum Turn {
    Text,
    Calls(Vec<(usize, Args)>),
    ModelDown,
}

#[derive(Debug, Clone)]
struct Case {
    turns: Vec<Turn>,
    faults: [Vec<FaultKind>; 2],
    policies: [PolicyKind; 2],
    max_turns: u32,
    breaker_threshold: u32,
    cancel_after_ms: Option<u64>,
}

fn fault_kind() -> impl Strategy<Value = FaultKind> {
    prop_oneof![
        Just(FaultKind::Succeed),
        Just(FaultKind::Transient),
        Just(FaultKind::Quota),
        Just(FaultKind::Timeout),
        Just(FaultKind::Auth),
        Just(FaultKind::NotFound),
        Just(FaultKind::Validation),
        Just(FaultKind::Panic),
        Just(FaultKind::Slow),
    ]
}

fn policy_kind() -> impl Strategy<Value = PolicyKind> {
    prop_oneof![
        Just(PolicyKind::BuiltIn),
        (1u32..=3).prop_map(PolicyKind::Retry),
        Just(PolicyKind::RetryThenEscalate),
    ]
}

fn turn() -> impl Strategy<Value = Turn> {
    let args = prop_oneof![
        6 => Just(Args::Valid),
        1 => Just(Args::Broken),
        1 => Just(Args::WrongShape),
    ];
    // Index 2 is a name no tool has.
    let call = (0usize..3, args);
    prop_oneof![
        1 => Just(Turn::Text),
        5 => prop::collection::vec(call, 1..4).prop_map(Turn::Calls),
        1 => Just(Turn::ModelDown),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(turn(), 0..7),
        prop::collection::vec(fault_kind(), 0..6),
        prop::collection::vec(fault_kind(), 0..6),
        (policy_kind(), policy_kind()),
        1u32..6,
        1u32..4,
        prop::option::weighted(0.25, 0u64..3000),
    )
        .prop_map(
            |(turns, fa, fb, (pa, pb), max_turns, breaker_threshold, cancel_after_ms)| Case {
                turns,
                faults: [fa, fb],
                policies: [pa, pb],
                max_turns,
                breaker_threshold,
                cancel_after_ms,
            },
        )
}

/// Tool invocations and breaker trips, in the order they happened.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Logged {
    Call { tool: String, args: String },
    Auth { tool: String, args: String },
    Trip { tool: String },
}

type Log = Arc<Mutex<Vec<Logged>>>;

/// Logs every invocation that reaches the tool, and every auth failure it returns.
struct Logging {
    inner: ToolDef,
    log: Log,
}

impl ToolHandler for Logging {
    fn call(&self, raw_args: &str) -> Result<ToolFuture, ToolError> {
        let running = agent_errors::testing::handler_of(&self.inner).call(raw_args)?;
        let tool = self.inner.name().to_owned();
        let args = raw_args.to_owned();
        self.log.lock().unwrap().push(Logged::Call {
            tool: tool.clone(),
            args: args.clone(),
        });
        let log = Arc::clone(&self.log);
        Ok(Box::pin(async move {
            let result = running.await;
            if let Err(e) = &result {
                if e.downcast_ref::<HttpError>()
                    .is_some_and(|h| h.status() == 401)
                {
                    log.lock().unwrap().push(Logged::Auth { tool, args });
                }
            }
            result
        }))
    }
}

/// Records `breaker_tripped` tracing events into the same log as the invocations.
struct TripRecorder(Log);

#[derive(Default)]
struct Fields {
    event: Option<String>,
    tool: Option<String>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.record_debug(field, &value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let text = format!("{value:?}").trim_matches('"').to_owned();
        match field.name() {
            "event" => self.event = Some(text),
            "tool" => self.tool = Some(text),
            _ => {}
        }
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for TripRecorder {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        if fields.event.as_deref() == Some("breaker_tripped") {
            if let Some(tool) = fields.tool {
                self.0.lock().unwrap().push(Logged::Trip { tool });
            }
        }
    }
}

fn build(case: &Case, log: &Log) -> (Agent, ScriptedModel) {
    let model = ScriptedModel::new();
    let mut call_no = 0;
    for turn in &case.turns {
        match turn {
            Turn::Text => model.push(agent_errors::testing::Reply::text("done")),
            Turn::ModelDown => model.push(agent_errors::testing::Reply::error(io::Error::from(
                io::ErrorKind::ConnectionRefused,
            ))),
            Turn::Calls(calls) => {
                let calls: Vec<(String, String)> = calls
                    .iter()
                    .map(|(tool, args)| {
                        call_no += 1;
                        let name = TOOLS.get(*tool).copied().unwrap_or("no_such_tool");
                        let args = match args {
                            Args::Valid => format!(r#"{{"text": "c{call_no}"}}"#),
                            Args::Broken => "{text: oops".to_owned(),
                            Args::WrongShape => r#"{"txt": 1}"#.to_owned(),
                        };
                        (name.to_owned(), args)
                    })
                    .collect();
                let model = model.clone().tool_calls(calls);
                drop(model);
            }
        }
    }
    let tools = TOOLS.iter().enumerate().map(|(i, name)| {
        let faulty = case.faults[i]
            .iter()
            .fold(FaultyTool::new(echo_tool(*name)), |t, f| t.then(f.fault()))
            .tool();
        ToolDef::from_handler(
            *name,
            faulty.description().to_owned(),
            faulty.parameters().clone(),
            Logging {
                inner: faulty,
                log: Arc::clone(log),
            },
        )
        .with_policy(case.policies[i].policy())
    });
    let agent = Agent::builder("prop")
        .model(model.clone())
        .tools(tools)
        .max_turns(case.max_turns)
        .breaker_threshold(case.breaker_threshold)
        .on_llm_error(|err, _| {
            if err.downcast_ref::<io::Error>().is_some() {
                LlmErrorDecision::retry(2, Duration::from_millis(100))
            } else {
                Ok(LlmErrorDecision::Rethrow)
            }
        })
        .build()
        .expect("a valid configuration");
    (agent, model)
}

/// The injected panics are caught by the executor; keep them out of the test output.
fn quiet_injected_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if info.payload().downcast_ref::<String>().map(String::as_str) != Some(INJECTED_PANIC) {
                default(info);
            }
        }));
    });
}

const INJECTED_PANIC: &str = "injected panic";

fn check(case: &Case) -> Result<(), TestCaseError> {
    quiet_injected_panics();
    let log: Log = Arc::default();
    let (agent, model) = build(case, &log);
    let subscriber = tracing_subscriber::registry().with(TripRecorder(Arc::clone(&log)));
    let _guard = crate::support::subscriber::set_default(subscriber);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime");
    let cancel = Cancellation::new();
    let outcome = runtime.block_on(async {
        if let Some(ms) = case.cancel_after_ms {
            let cancel = cancel.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                cancel.cancel();
            });
        }
        let run = agent.run_with("go", RunOptions::new().cancellation(cancel));
        tokio::time::timeout(Duration::from_secs(24 * 3600), run).await
    });
    let outcome = outcome.map_err(|_| TestCaseError::fail("the run did not end"))?;

    // Every tool call gets exactly one result, in every request and in the transcript; the
    // history the model sees only grows.
    let requests = model.requests();
    for (i, request) in requests.iter().enumerate() {
        let violations = transcript_violations(&request.messages);
        prop_assert!(violations.is_empty(), "request {i}: {violations:?}");
        if let Some(next) = requests.get(i + 1) {
            prop_assert!(next.messages.starts_with(&request.messages));
        }
    }
    let violations = transcript_violations(&outcome.transcript);
    prop_assert!(violations.is_empty(), "transcript: {violations:?}");

    // The run ends within the turn cap, and the report matches what the model saw.
    let report = &outcome.report;
    prop_assert!(report.turns <= case.max_turns);
    prop_assert_eq!(report.model_calls as usize, requests.len());
    let calls_made: usize = outcome
        .transcript
        .iter()
        .map(|m| match m {
            Message::Assistant { tool_calls, .. } => tool_calls.len(),
            _ => 0,
        })
        .sum();
    prop_assert_eq!(report.tool_calls as usize, calls_made);

    let log = log.lock().unwrap().clone();
    for (i, entry) in log.iter().enumerate() {
        match entry {
            // No tool is called after its breaker tripped.
            Logged::Trip { tool } => {
                let later = log[i + 1..]
                    .iter()
                    .any(|e| matches!(e, Logged::Call { tool: t, .. } if t == tool));
                prop_assert!(!later, "`{tool}` called after its breaker tripped: {log:?}");
            }
            // An auth failure is never retried: the same model call is not run again.
            Logged::Auth { tool, args } => {
                let again = log[i + 1..].iter().any(
                    |e| matches!(e, Logged::Call { tool: t, args: a } if t == tool && a == args),
                );
                prop_assert!(!again, "auth failure retried: {log:?}");
            }
            Logged::Call { .. } => {}
        }
    }
    // An auth failure ends the run in code (unless it was cancelled first).
    if log.iter().any(|e| matches!(e, Logged::Auth { .. })) {
        prop_assert!(
            matches!(
                &outcome.result,
                Err(RunError::Terminated(_) | RunError::Cancelled)
            ),
            "auth failure did not end the run: {:?}",
            outcome.result
        );
    }

    // A run ended by a tool outcome gives the model no further turn: the last batch's results
    // were never sent.
    if matches!(
        outcome.result,
        Err(RunError::Terminated(_) | RunError::BreakerTripped { .. })
    ) {
        let last = requests
            .last()
            .expect("a tool outcome needs a model turn first");
        prop_assert!(last.messages.len() < outcome.transcript.len());
        prop_assert!(matches!(outcome.transcript.last(), Some(Message::Tool(_))));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn every_call_gets_one_result_and_runs_stay_bounded(case in case()) {
        check(&case)?;
    }
}
