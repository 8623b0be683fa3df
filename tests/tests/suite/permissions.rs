//! The permission hook: it sees the run's context values and its denial counts, and a run that
//! keeps asking for what it may not do ends after a budget of denials across every tool. Every
//! argument set a tool body would receive is asked about: a fixer's rewrite and a fallback's too.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use agent_errors::testing::{Fault, FaultyTool, ScriptedModel, echo_tool};
use agent_errors::{
    Agent, Fix, FixRequest, HttpError, Limits, Message, RunError, RunOptions, ToolCall,
    build::FixerDef,
    permission::{Permission, PermissionContext, PermissionHook},
    policy::{Action, Policy, PolicyKey},
    run::TerminationReason,
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
            .push((call.name.to_string(), run.denials(), run.tool_denials()));
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

/// Writes a file; counts how often its body ran.
fn write_tool(name: &'static str, runs: Arc<AtomicU32>) -> agent_errors::ToolDef {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Args {
        path: String,
    }
    agent_errors::ToolDef::new(name, "Writes a file.", move |args: Args| {
        runs.fetch_add(1, Ordering::SeqCst);
        async move { Ok::<_, std::io::Error>(format!("wrote {}", args.path)) }
    })
}

/// Allows writes to path `A`, denies path `B`, and remembers what it was asked.
fn only_path_a(asked: Arc<Mutex<Vec<(String, String)>>>) -> impl Fn(&ToolCall) -> Permission {
    move |call: &ToolCall| {
        asked
            .lock()
            .unwrap()
            .push((call.name.to_string(), call.arguments.clone()));
        if call.arguments.contains(r#""B""#) {
            Permission::Deny("path B is off limits".into())
        } else {
            Permission::Allow
        }
    }
}

/// The error results the model was sent, as JSON, in order.
fn error_results(model: &ScriptedModel) -> Vec<serde_json::Value> {
    let request = model.last_request().expect("the model was asked");
    request
        .messages
        .iter()
        .filter_map(|message| match message {
            Message::Tool(result) if result.is_error => {
                Some(serde_json::from_str(&result.content).expect("an error result is JSON"))
            }
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn arguments_a_fixer_rewrites_are_asked_about_again_and_a_denial_stops_the_tool() {
    let runs = Arc::new(AtomicU32::new(0));
    let asked = Arc::new(Mutex::new(Vec::new()));
    let tool = write_tool("write", Arc::clone(&runs))
        .with_policy(Policy::new().on(PolicyKey::InvalidArgs, Action::fix("repair", 1).unwrap()));
    // The "repair" names exactly what the hook denies.
    let fixer = FixerDef::from_fn("repair", |_: FixRequest| Ok(Fix::args(r#"{"path": "B"}"#)));
    let model = ScriptedModel::new()
        .tool_call("write", r#"{"path": "A",}"#)
        .text("done");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tool(tool)
        .fixer(fixer)
        .permission(only_path_a(Arc::clone(&asked)))
        .build()
        .unwrap();
    assert_eq!(agent.run("go").await.unwrap(), "done");

    assert_eq!(runs.load(Ordering::SeqCst), 0, "the tool body never runs");
    assert_eq!(
        asked.lock().unwrap().as_slice(),
        [
            ("write".into(), r#"{"path": "A",}"#.into()),
            ("write".into(), r#"{"path": "B"}"#.into()),
        ]
    );
    let shown = error_results(&model);
    assert_eq!(shown.len(), 1, "{shown:?}");
    assert_eq!(shown[0]["kind"], "auth");
    let message = shown[0]["message"].as_str().unwrap();
    assert!(
        message.contains("permission denied: path B is off limits"),
        "{message}"
    );
}

#[tokio::test]
async fn a_denial_after_a_fix_counts_against_the_runs_budget() {
    let runs = Arc::new(AtomicU32::new(0));
    let tool = write_tool("write", Arc::clone(&runs))
        .with_policy(Policy::new().on(PolicyKey::InvalidArgs, Action::fix("repair", 1).unwrap()));
    let fixer = FixerDef::from_fn("repair", |_: FixRequest| Ok(Fix::args(r#"{"path": "B"}"#)));
    let model = ScriptedModel::new()
        .tool_call("write", r#"{"path": "A",}"#)
        .text("never reached");
    let agent = Agent::builder("a")
        .model(model)
        .tool(tool)
        .fixer(fixer)
        .permission(only_path_a(Arc::default()))
        .limits(Limits::default().with_max_permission_denials(1))
        .build()
        .unwrap();
    let error = agent.run("go").await.unwrap_err();
    let RunError::Terminated(terminated) = error else {
        panic!("expected the denial budget to end the run: {error:?}");
    };
    assert_eq!(
        terminated.reason,
        TerminationReason::PermissionDenials { denials: 1 }
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the tool body never runs");
}

#[tokio::test]
async fn a_fallback_is_asked_about_as_itself_and_a_denial_is_a_denial() {
    let mirror_runs = Arc::new(AtomicU32::new(0));
    let primary = FaultyTool::new(write_tool("write", Arc::default()))
        .then_always(Fault::error(|| HttpError::new(503, "down")));
    let primary = primary
        .tool()
        .with_policy(Policy::new().on(PolicyKey::Execution, Action::fallback("mirror")));
    let asked = Arc::new(Mutex::new(Vec::new()));
    let (hook_asked, denied_tool) = (Arc::clone(&asked), "mirror");
    let hook = move |call: &ToolCall| {
        hook_asked.lock().unwrap().push(call.name.to_string());
        if &*call.name == denied_tool {
            Permission::Deny("the mirror is read-only".into())
        } else {
            Permission::Allow
        }
    };
    let model = ScriptedModel::new()
        .tool_call("write", r#"{"path": "A"}"#)
        .text("done");
    let agent = Agent::builder("a")
        .model(model.clone())
        .tool(primary)
        .tool(write_tool("mirror", Arc::clone(&mirror_runs)))
        .permission(hook)
        .build()
        .unwrap();
    let outcome = agent.run_with_report("go").await;
    assert_eq!(outcome.result.unwrap(), "done");

    assert_eq!(
        mirror_runs.load(Ordering::SeqCst),
        0,
        "the fallback never runs"
    );
    assert_eq!(asked.lock().unwrap().as_slice(), ["write", "mirror"]);
    let shown = error_results(&model);
    assert_eq!(shown.len(), 1, "{shown:?}");
    assert_eq!(shown[0]["kind"], "auth");
    let message = shown[0]["message"].as_str().unwrap();
    assert!(
        message.contains("permission denied: the mirror is read-only"),
        "{message}"
    );
}
