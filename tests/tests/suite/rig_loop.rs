//! rig's own agent loop wired by this library: no wrong wiring fails silently, a stop belongs to
//! its run, and what a rig tool keeps for operators never reaches the model. On rig 0.44's own
//! test kit (its scripted model), offline.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use agent_errors::build::ConfigProblem;
use agent_errors::retry::RetrySchedule;
use agent_errors::rig::{GuardedTool, RecoveringModel, RigGuard};
use agent_errors::run::{OnExceed, UsageLimit, UsageLimits};
use agent_errors::testing::{FaultyTool, ScriptedModel, echo_tool};
use agent_errors::{Agent, HttpError, Limits, Registry, RunContext, ToolDef};

use super::rig::{failing, status};
use rig_core::test_utils::{MockCompletionModel, MockTurn};
use rig_core::tool::{Tool, ToolContext, ToolExecutionError};

/// What the operator reads and the model must not.
const INTERNALS: &str = "pg connect to db-internal.corp.example:5432 as admin failed";

/// A rig tool whose failure keeps its internals for operators, as rig intends.
struct Ledger {
    /// The error is built as `ToolExecutionError::from_error` builds it, else with explicit
    /// model feedback.
    from_error: bool,
}

impl Tool for Ledger {
    const NAME: &'static str = "ledger";
    type Args = serde_json::Value;
    type Output = String;
    type Error = ToolExecutionError;

    fn description(&self) -> String {
        "Reads the ledger.".into()
    }

    fn parameters(&self) -> serde_json::Value {
        serde_json::json!({"type": "object"})
    }

    async fn call(
        &self,
        _: &mut ToolContext,
        _: serde_json::Value,
    ) -> Result<String, ToolExecutionError> {
        let cause = std::io::Error::other(INTERNALS);
        Err(match self.from_error {
            true => ToolExecutionError::from_error(cause),
            false => ToolExecutionError::from_error(cause)
                .with_model_feedback("the ledger is unavailable, try later"),
        })
    }
}

#[tokio::test(start_paused = true)]
async fn in_our_loop_the_model_sees_a_rig_tools_feedback_never_its_operator_message() {
    for from_error in [true, false] {
        let model = ScriptedModel::new().tool_call("ledger", "{}").text("sorry");
        let agent = Agent::builder("a")
            .model(model.clone())
            .tool(ToolDef::from_rig(Ledger { from_error }))
            .build()
            .unwrap();
        agent.run("balance?").await.unwrap();
        let seen = format!("{:?}", model.last_request().unwrap().messages);
        assert!(!seen.contains("db-internal"), "{seen}");
        if !from_error {
            assert!(
                seen.contains("the ledger is unavailable, try later"),
                "{seen}"
            );
        }
    }
}

#[tokio::test(start_paused = true)]
async fn in_rigs_loop_the_model_sees_a_rig_tools_feedback_never_its_operator_message() {
    let registry = Registry::builder()
        .tool(ToolDef::from_rig(Ledger { from_error: false }))
        .build()
        .unwrap();
    let guard = RigGuard::new(Arc::new(registry), Arc::new(RunContext::new()));
    let model = MockCompletionModel::from_turns([
        MockTurn::tool_call("call-1", "ledger", serde_json::json!({})),
        MockTurn::text("sorry"),
    ]);
    let agent = guard.agent(model.clone()).default_max_turns(3).build();
    agent.prompt("balance?").await.unwrap();
    let seen = serde_json::to_string(&model.requests()[1].chat_history).unwrap();
    assert!(!seen.contains("db-internal"), "{seen}");
    assert!(
        seen.contains("the ledger is unavailable, try later"),
        "{seen}"
    );
}

/// A CRM whose token is revoked on its first call, and an echo that always answers.
fn revoked_crm() -> FaultyTool {
    FaultyTool::new(echo_tool("crm")).fail_times(1, || HttpError::new(401, "token revoked"))
}

fn crm_call(id: &str) -> MockTurn {
    MockTurn::tool_call(id, "crm", serde_json::json!({"text": "acme"}))
}

/// An echo tool of its own name, as a rig tool for the typed guard.
macro_rules! rig_echo {
    ($ty:ident, $name:literal) => {
        struct $ty;
        impl Tool for $ty {
            const NAME: &'static str = $name;
            type Args = serde_json::Value;
            type Output = String;
            type Error = ToolExecutionError;
            fn description(&self) -> String {
                "Echoes.".into()
            }
            fn parameters(&self) -> serde_json::Value {
                serde_json::json!({"type": "object"})
            }
            async fn call(
                &self,
                _: &mut ToolContext,
                _: serde_json::Value,
            ) -> Result<String, ToolExecutionError> {
                Ok("echoed".into())
            }
        }
    };
}

rig_echo!(Crm, "crm");
rig_echo!(Notes, "notes");

#[tokio::test(start_paused = true)]
async fn without_the_hook_a_guarded_tool_refuses_every_call_after_its_run_was_told_to_end() {
    let crm = revoked_crm();
    let registry = Arc::new(Registry::builder().tool(crm.tool()).build().unwrap());
    let guarded = GuardedTool::<Crm>::new(registry, Arc::new(RunContext::new())).unwrap();
    let model = MockCompletionModel::from_turns([
        crm_call("call-1"),
        crm_call("call-2"),
        MockTurn::text("done"),
    ]);
    // The hook is forgotten.
    let agent = rig_agent::AgentBuilder::new(model.clone())
        .default_max_turns(4)
        .tool(guarded.clone())
        .build();
    let _ = agent.prompt("look up acme").await;
    assert_eq!(
        crm.calls(),
        1,
        "the tool never runs again after its run was told to end"
    );
    let seen = serde_json::to_string(&model.requests()[2].chat_history).unwrap();
    assert!(
        seen.contains("stop_hook"),
        "the refusal names the hook: {seen}"
    );
}

#[tokio::test(start_paused = true)]
async fn one_guard_per_tool_with_the_hook_of_only_the_first_still_ends_the_run() {
    let crm = revoked_crm();
    let registry = Arc::new(
        Registry::builder()
            .tool(crm.tool())
            .tool(echo_tool("notes"))
            .build()
            .unwrap(),
    );
    let run = Arc::new(RunContext::new());
    let notes = GuardedTool::<Notes>::new(Arc::clone(&registry), Arc::clone(&run)).unwrap();
    let crm_tool = GuardedTool::<Crm>::new(registry, run).unwrap();
    let model = MockCompletionModel::from_turns([
        crm_call("call-1"),
        crm_call("call-2"),
        MockTurn::text("done"),
    ]);
    let agent = rig_agent::AgentBuilder::new(model.clone())
        .default_max_turns(4)
        .tool(notes.clone())
        .tool(crm_tool)
        .add_hook(notes.stop_hook())
        .build();
    let error = agent.prompt("look up acme").await.unwrap_err();
    assert!(
        error.to_string().contains("`crm` ended the run: Auth"),
        "{error}"
    );
    assert_eq!(model.request_count(), 1);
    assert_eq!(crm.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_agent_built_once_serves_a_new_prompt_after_a_stopped_run() {
    // The typed guard and its hook, and the registry guard: both serve the second prompt.
    for typed in [true, false] {
        let crm = revoked_crm();
        let registry = Arc::new(Registry::builder().tool(crm.tool()).build().unwrap());
        let model = MockCompletionModel::from_turns([
            crm_call("call-1"),
            crm_call("call-2"),
            MockTurn::text("acme is a customer"),
        ]);
        let run = Arc::new(RunContext::new());
        let agent = match typed {
            true => {
                let guarded = GuardedTool::<Crm>::new(registry, run).unwrap();
                rig_agent::AgentBuilder::new(model.clone())
                    .default_max_turns(3)
                    .tool(guarded.clone())
                    .add_hook(guarded.stop_hook())
                    .build()
            }
            false => RigGuard::new(registry, run)
                .agent(model.clone())
                .default_max_turns(3)
                .build(),
        };
        agent.prompt("look up acme").await.unwrap_err();
        assert_eq!(model.request_count(), 1);

        let answer = agent.prompt("look up acme again").await.unwrap();
        assert_eq!(answer.output(), "acme is a customer");
        assert_eq!(model.request_count(), 3, "the second run asked the model");
        assert_eq!(crm.calls(), 2);
    }
}

#[tokio::test(start_paused = true)]
async fn with_no_approver_a_call_needing_approval_ends_waiting_for_a_person() {
    let transfer = echo_tool("transfer").requires_approval(true);
    let registry = Arc::new(Registry::builder().tool(transfer).build().unwrap());
    let guard = RigGuard::new(registry, Arc::new(RunContext::new()));
    let model = MockCompletionModel::from_turns([
        MockTurn::tool_call("call-1", "transfer", serde_json::json!({"text": "9000"})),
        MockTurn::text("never asked"),
    ]);
    let agent = guard.agent(model.clone()).default_max_turns(3).build();
    let error = agent.prompt("pay acme").await.unwrap_err();
    assert!(
        error
            .to_string()
            .contains("`transfer` ended the run: WaitingForPerson"),
        "{error}"
    );
    assert_eq!(model.request_count(), 1);
}

/// How many events of this name the run recorded.
fn count(run: &RunContext, name: &str) -> usize {
    let events = run.events().snapshot();
    events.iter().filter(|event| event.name() == name).count()
}

#[tokio::test(start_paused = true)]
async fn a_recovering_models_retries_spend_the_runs_retry_allowance_and_are_on_its_report() {
    let run = Arc::new(RunContext::new().with_limits(Limits::default().with_max_retries(1)));
    let registry = Arc::new(Registry::builder().build().unwrap());
    let guard = RigGuard::new(registry, Arc::clone(&run));
    let (model, transport) = failing(
        [status(503), status(503), status(503)],
        [MockTurn::text("hello")],
    );
    let schedule = RetrySchedule::attempts(5).unwrap();
    let agent = guard.agent(guard.recovering(model, schedule)).build();
    agent.prompt("hi").await.unwrap_err();
    assert_eq!(
        transport.calls.load(Ordering::SeqCst),
        2,
        "one retry: the run's allowance, not the schedule's four"
    );
    assert_eq!(count(&run, "llm_retry"), 1);
}

#[tokio::test(start_paused = true)]
async fn a_fallback_chain_over_rig_models_answers_from_the_next_once_one_failed_for_good() {
    let run = Arc::new(RunContext::new());
    let (primary, primary_calls) = failing([status(503), status(503)], []);
    let (backup, _) = failing([status(529)], [MockTurn::text("hello from the backup")]);
    let schedule = RetrySchedule::attempts(2).unwrap();
    let model = RecoveringModel::new(primary, schedule, Arc::clone(&run)).fallback(backup);
    let agent = rig_agent::AgentBuilder::new(model).build();
    let answer = agent.prompt("hi").await.unwrap();
    assert_eq!(answer.output(), "hello from the backup");
    assert_eq!(primary_calls.calls.load(Ordering::SeqCst), 2);
    assert_eq!(count(&run, "llm_fallback"), 1);
    assert_eq!(count(&run, "llm_retry"), 2, "one on each model");

    // An invalid request is no other model's to serve.
    let (primary, _) = failing([status(400)], []);
    let (backup, backup_calls) = failing([], [MockTurn::text("never asked")]);
    let schedule = RetrySchedule::attempts(2).unwrap();
    let model = RecoveringModel::new(primary, schedule, Arc::clone(&run)).fallback(backup);
    let agent = rig_agent::AgentBuilder::new(model).build();
    agent.prompt("hi").await.unwrap_err();
    assert_eq!(backup_calls.calls.load(Ordering::SeqCst), 0);
}

fn search(id: &str) -> MockTurn {
    MockTurn::tool_call(id, "search", serde_json::json!({"text": "rust"}))
}

/// A guard over an echo tool named `search`, capped by `limits`.
fn capped(limits: UsageLimits) -> (RigGuard, Arc<RunContext>) {
    let registry = Arc::new(
        Registry::builder()
            .tool(echo_tool("search"))
            .build()
            .unwrap(),
    );
    let run = Arc::new(RunContext::new());
    let guard = RigGuard::new(registry, Arc::clone(&run))
        .with_usage_limits(limits)
        .unwrap();
    (guard, run)
}

#[tokio::test(start_paused = true)]
async fn in_rigs_loop_a_run_ends_at_its_request_cap_and_each_prompt_is_a_run_of_its_own() {
    let (guard, _) = capped(UsageLimits::new().max_requests(2));
    let model = MockCompletionModel::from_turns([
        search("call-1"),
        search("call-2"),
        // The first run ends before asking again; the second prompt is answered from here.
        search("call-3"),
        MockTurn::text("the second prompt's answer"),
    ]);
    let agent = guard.agent(model.clone()).default_max_turns(10).build();
    let error = agent.prompt("search a lot").await.unwrap_err();
    assert!(
        error.to_string().contains("limit on model requests"),
        "{error}"
    );
    assert_eq!(model.request_count(), 2);

    // The next prompt has its own two requests.
    let answer = agent.prompt("search once").await.unwrap();
    assert_eq!(answer.output(), "the second prompt's answer");
    assert_eq!(model.request_count(), 4);
}

#[tokio::test(start_paused = true)]
async fn in_rigs_loop_a_token_cap_ends_the_run() {
    let (guard, _) = capped(UsageLimits::new().max_total_tokens(10));
    let usage = rig_core::completion::Usage::new()
        .input_tokens(40)
        .output_tokens(5);
    let turn = search("call-1").with_usage(usage);
    let model = MockCompletionModel::from_turns([turn, MockTurn::text("never asked")]);
    let agent = guard.agent(model.clone()).default_max_turns(5).build();
    let error = agent.prompt("search").await.unwrap_err();
    assert!(
        error.to_string().contains("limit on total tokens"),
        "{error}"
    );
    assert_eq!(model.request_count(), 1);
}

#[tokio::test(start_paused = true)]
async fn in_rigs_loop_a_tool_call_cap_asks_for_a_final_answer_without_running_the_extra_calls() {
    let limits = UsageLimits::new()
        .max_tool_calls(1)
        .on_exceed(UsageLimit::ToolCalls, OnExceed::FinalAnswer);
    let (guard, run) = capped(limits);
    let model = MockCompletionModel::from_turns([
        search("call-1"),
        search("call-2"),
        MockTurn::text("from one search"),
    ]);
    let agent = guard.agent(model.clone()).default_max_turns(5).build();
    let answer = agent.prompt("what is rust?").await.unwrap();
    assert_eq!(answer.output(), "from one search");
    let last = &model.requests()[2];
    assert!(last.tools.is_empty(), "the final request offers no tools");
    let history = serde_json::to_string(&last.chat_history).unwrap();
    assert!(
        history.contains("not run: the run reached its usage limit"),
        "{history}"
    );
    assert_eq!(count(&run, "usage_limit_reached"), 1);
}

#[tokio::test(start_paused = true)]
async fn a_capped_guard_whose_hook_never_runs_refuses_its_tools_instead_of_capping_nothing() {
    let ran = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let counter = Arc::clone(&ran);
    let counted = ToolDef::new("search", "Searches.", move |_: serde_json::Value| {
        counter.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, std::io::Error>("found".to_owned()) }
    });
    let registry = Arc::new(Registry::builder().tool(counted).build().unwrap());
    let limits = UsageLimits::new().max_tool_calls(1);
    let guard = RigGuard::new(registry, Arc::new(RunContext::new()))
        .with_usage_limits(limits)
        .unwrap();
    let model = MockCompletionModel::from_turns([
        search("call-1"),
        search("call-2"),
        MockTurn::text("done"),
    ]);
    // The guard's tools, without its hook: nothing would count a request or a call.
    let agent = rig_agent::AgentBuilder::new(model.clone())
        .default_max_turns(4)
        .dynamic_tools(guard.tools())
        .build();
    let _ = agent.prompt("search twice").await;
    assert_eq!(ran.load(Ordering::SeqCst), 0, "no call runs uncapped");
    let seen = serde_json::to_string(&model.requests()[1].chat_history).unwrap();
    assert!(seen.contains("hook"), "the refusal names the hook: {seen}");
}

#[test]
fn a_guard_refuses_usage_limits_that_could_never_apply_as_the_agent_builder_does() {
    let registry = Arc::new(
        Registry::builder()
            .tool(echo_tool("search"))
            .build()
            .unwrap(),
    );
    let limits = UsageLimits::new()
        .max_requests(5)
        .on_exceed(UsageLimit::ToolCalls, OnExceed::FinalAnswer)
        .max_calls_of("serach", 2);
    let guard = RigGuard::new(Arc::clone(&registry), Arc::new(RunContext::new()));
    let error = guard.with_usage_limits(limits).unwrap_err();
    let problems = error.problems();
    assert!(
        problems.contains(&ConfigProblem::FinalAnswerForUnsetCap {
            limit: UsageLimit::ToolCalls
        }),
        "{error}"
    );
    assert!(
        problems.contains(&ConfigProblem::UnknownCappedTool {
            tool: "serach".into(),
            did_you_mean: Some("search".into()),
        }),
        "{error}"
    );
    assert_eq!(problems.len(), 2, "{error}");
    // Set, the cap may stop gracefully.
    let set = UsageLimits::new()
        .max_tool_calls(3)
        .on_exceed(UsageLimit::ToolCalls, OnExceed::FinalAnswer);
    let guard = RigGuard::new(registry, Arc::new(RunContext::new()));
    assert!(guard.with_usage_limits(set).is_ok());
}

/// A `search` that fails once with a 503 and is retried, so its first call runs its body
/// twice; and the handle counting those runs.
fn flaky_search() -> (FaultyTool, ToolDef) {
    let flaky =
        FaultyTool::new(echo_tool("search")).fail_times(1, || HttpError::new(503, "overloaded"));
    let tool = flaky
        .tool()
        .with_policy(agent_errors::policy!(execution = retry(3)));
    (flaky, tool)
}

#[tokio::test(start_paused = true)]
async fn max_tool_calls_counts_calls_asked_for_in_rigs_loop_and_tool_body_runs_in_ours() {
    // Two calls asked for, the first retried once: three runs of the tool's body.
    let limits = || UsageLimits::new().max_tool_calls(2);

    // rig's loop: the guard's hook sees the two calls rig dispatches; the retry inside the
    // first is not a call of rig's, and the run ends with its answer.
    let (flaky, tool) = flaky_search();
    let registry = Arc::new(Registry::builder().tool(tool).build().unwrap());
    let guard = RigGuard::new(registry, Arc::new(RunContext::new()))
        .with_usage_limits(limits())
        .unwrap();
    let model = MockCompletionModel::from_turns([
        search("call-1"),
        search("call-2"),
        MockTurn::text("searched twice"),
    ]);
    let agent = guard.agent(model).default_max_turns(5).build();
    let answer = agent.prompt("search twice").await.unwrap();
    assert_eq!(answer.output(), "searched twice");
    assert_eq!(flaky.calls(), 3, "the retry ran, uncounted");
    assert!(guard.stopped().is_none());

    // Our loop: every run of the body counts, the retry included, so the second call would be
    // a third and is not run.
    let (flaky, tool) = flaky_search();
    let model = ScriptedModel::new()
        .tool_call("search", r#"{"text": "a"}"#)
        .tool_call("search", r#"{"text": "b"}"#)
        .text("searched twice");
    let agent = Agent::builder("capped")
        .model(model)
        .tool(tool)
        .usage_limits(limits())
        .build()
        .unwrap();
    match agent.run("search twice").await {
        Err(agent_errors::RunError::UsageLimit(exceeded)) => {
            assert_eq!(exceeded.limit, UsageLimit::ToolCalls);
            assert_eq!(exceeded.usage.tool_calls, 2);
        }
        other => panic!("expected the tool-call cap, got {other:?}"),
    }
    assert_eq!(flaky.calls(), 2, "the second call's body never ran");
}

#[tokio::test(start_paused = true)]
async fn in_rigs_loop_a_stop_is_typed_a_waiting_call_keeps_its_question_and_a_cap_its_limit() {
    use agent_errors::RunError;
    use agent_errors::approval::WaitReason;
    use agent_errors::rig::RigStop;
    let refund = echo_tool("refund").requires_approval(true);
    let registry = Arc::new(Registry::builder().tool(refund).build().unwrap());
    let guard = RigGuard::new(registry, Arc::new(RunContext::new().with_run_id("run-5")));
    let model = MockCompletionModel::from_turns([
        MockTurn::tool_call("call-1", "refund", serde_json::json!({"text": "order 7"})),
        MockTurn::text("never asked"),
    ]);
    let agent = guard.agent(model).default_max_turns(3).build();
    let error = agent.prompt("refund order 7").await.unwrap_err();
    let stop = guard.stopped().expect("the guard ended the run");
    assert!(error.to_string().contains(&stop.to_string()), "{error}");
    let pending = stop.pending_approval().expect("the question");
    assert_eq!(pending.tool, "refund");
    assert_eq!(pending.reason, WaitReason::ApprovalRequired);
    assert!(pending.arguments.contains("order 7"), "{pending:?}");
    match stop.clone().into_run_error() {
        RunError::WaitingForPerson { pending: asked } => assert_eq!(&asked[0], pending),
        other => panic!("{other:?}"),
    }

    let (capped, _) = capped(UsageLimits::new().max_requests(1));
    let model = MockCompletionModel::from_turns([search("call-1"), MockTurn::text("late")]);
    let agent = capped.agent(model).default_max_turns(5).build();
    agent.prompt("search").await.unwrap_err();
    match capped.stopped() {
        Some(RigStop::UsageLimit(exceeded)) => assert_eq!(exceeded.limit, UsageLimit::Requests),
        other => panic!("{other:?}"),
    }
}

#[test]
fn in_rigs_loop_a_runtime_without_its_timer_is_a_typed_stop_not_a_panic() {
    use agent_errors::rig::RigStop;
    let untimed = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let policy = agent_errors::policy!(execution = retry(3));
    let registry = Registry::builder().tool(echo_tool("search").with_policy(policy));
    let registry = Arc::new(registry.build().unwrap());
    let guard = RigGuard::new(Arc::clone(&registry), Arc::new(RunContext::new()));
    let model = MockCompletionModel::from_turns([search("call-1"), MockTurn::text("found")]);
    let agent = guard.agent(model.clone()).default_max_turns(3).build();
    let error = untimed
        .block_on(async { agent.prompt("search").await })
        .unwrap_err();
    assert!(error.to_string().contains("enable_time()"), "{error}");
    assert!(matches!(guard.stopped(), Some(RigStop::NoTimer)));
    assert_eq!(model.request_count(), 0, "the run did not start");

    // The guard's tools without its hook: the call does not run, and the stop is typed.
    let guard = RigGuard::new(registry, Arc::new(RunContext::new()));
    let model = MockCompletionModel::from_turns([search("call-1"), MockTurn::text("found")]);
    let agent = rig_agent::AgentBuilder::new(model)
        .default_max_turns(3)
        .dynamic_tools(guard.tools())
        .build();
    let _ = untimed.block_on(async { agent.prompt("search").await });
    assert!(matches!(guard.stopped(), Some(RigStop::NoTimer)));
}
