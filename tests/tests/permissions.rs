//! The permission hook: it sees the run's context values and its denial counts, and a run that
//! keeps asking for what it may not do ends after a budget of denials across every tool.

use std::sync::{Arc, Mutex};

use agent_errors::testing::{ScriptedModel, echo_tool};
use agent_errors::{
    Agent, Limits, Permission, PermissionContext, PermissionHook, RunError, RunOptions,
    TerminationReason, ToolCall,
};

struct Role(&'static str);

/// Denies everyone but admins, and remembers what it was told.
#[derive(Default, Clone)]
struct AdminsOnly {
    seen: Arc<Mutex<Vec<(String, u32, u32)>>>,
}

impl PermissionHook for AdminsOnly {
    fn check(&self, _call: &ToolCall) -> Permission {
        Permission::Deny("no role".into())
    }

    fn check_in(&self, call: &ToolCall, run: &PermissionContext<'_>) -> Permission {
        self.seen
            .lock()
            .unwrap()
            .push((call.name.clone(), run.denials(), run.tool_denials()));
        match run.extensions().get::<Role>() {
            Some(Role("admin")) => Permission::Allow,
            _ => Permission::Deny(format!("`{}` is for admins", call.name)),
        }
    }
}

fn tools() -> Vec<agent_errors::ToolDef> {
    vec![echo_tool("a"), echo_tool("b"), echo_tool("c")]
}

#[tokio::test]
async fn the_hook_reads_the_runs_context() {
    let hook = AdminsOnly::default();
    let model = ScriptedModel::new()
        .tool_call("a", r#"{"text": "hi"}"#)
        .text("done");
    let agent = Agent::builder("a")
        .model(model)
        .tools(tools())
        .permission(hook.clone())
        .build()
        .unwrap();
    let options = RunOptions::new().context(Role("admin"));
    let outcome = agent.run_with("go", options).await;
    assert_eq!(outcome.result.unwrap(), "done");
    assert_eq!(hook.seen.lock().unwrap().as_slice(), [("a".into(), 0, 0)]);
}

#[tokio::test]
async fn denials_across_tools_end_the_run_at_the_budget() {
    let hook = AdminsOnly::default();
    let model = ScriptedModel::new()
        .tool_call("a", r#"{"text": "1"}"#)
        .tool_call("b", r#"{"text": "2"}"#)
        .tool_call("a", r#"{"text": "3"}"#)
        .tool_call("c", r#"{"text": "4"}"#)
        .text("never reached");
    let agent = Agent::builder("a")
        .model(model)
        .tools(tools())
        .permission(hook.clone())
        .limits(Limits::default().with_max_permission_denials(4))
        .build()
        .unwrap();
    let error = agent.run("go").await.unwrap_err();
    let RunError::Terminated(terminated) = error else {
        panic!("expected the budget to end the run: {error:?}");
    };
    assert_eq!(
        terminated.reason,
        TerminationReason::PermissionDenials { denials: 4 }
    );
    // The hook saw the counts grow, per run and per tool.
    assert_eq!(
        hook.seen.lock().unwrap().as_slice(),
        [
            ("a".into(), 0, 0),
            ("b".into(), 1, 0),
            ("a".into(), 2, 1),
            ("c".into(), 3, 0)
        ]
    );
}

#[tokio::test]
async fn a_plain_closure_is_still_a_hook_and_the_default_budget_is_twenty() {
    assert_eq!(Limits::default().max_permission_denials, 20);
    let model = ScriptedModel::new()
        .tool_call("a", r#"{"text": "1"}"#)
        .text("ok");
    let agent = Agent::builder("a")
        .model(model)
        .tools(tools())
        .permission(|call: &ToolCall| Permission::Deny(format!("not {}", call.name)))
        .build()
        .unwrap();
    assert_eq!(agent.run("go").await.unwrap(), "ok");
}
