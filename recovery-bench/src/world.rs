//! The outside world of one task run: the services behind the tools, what they did (effects
//! applied, calls answered with a permanent failure) and the switch that kills the process.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use agent_errors::call::{Extensions, IdempotencyKey, ToolFuture, ToolHandler};
use agent_errors::testing::{Fault, FaultyTool};
use agent_errors::{HttpError, ToolDef, ToolError};
use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::Notify;

use crate::faults::{CANARY, FaultPlan};
use crate::tasks::{Task, WRITES, output_of};

#[derive(Default)]
struct Ledger {
    /// Calls that reached the service, per step and tool (a fallback tool is another try,
    /// not a retry).
    calls: HashMap<(usize, &'static str), u32>,
    /// Effects applied, per write step.
    effects: HashMap<usize, u32>,
    /// Answers already given, per idempotency key.
    answered_keys: HashMap<String, String>,
    /// Writes answered from `answered_keys` instead of applied again.
    repeats_answered: u32,
}

/// The process dying: armed on one step, fired once, waited on by whoever runs the agent.
#[derive(Default)]
pub(crate) struct CrashSwitch {
    fired: AtomicBool,
    notify: Notify,
}

impl CrashSwitch {
    /// Waits until the process "dies".
    pub(crate) async fn fired(&self) {
        self.notify.notified().await;
    }

    fn fire_once(&self) -> bool {
        let first = !self.fired.swap(true, Ordering::SeqCst);
        if first {
            self.notify.notify_one();
        }
        first
    }
}

/// The services one task run talks to.
pub(crate) struct World {
    task: Arc<Task>,
    plan: FaultPlan,
    ledger: Mutex<Ledger>,
    pub(crate) crash: CrashSwitch,
    crash_step: Option<usize>,
}

impl World {
    pub(crate) fn new(task: Arc<Task>, plan: FaultPlan) -> Arc<Self> {
        let crash_step = plan.crash_step(task.steps.len());
        Arc::new(World {
            task,
            plan,
            ledger: Mutex::new(Ledger::default()),
            crash: CrashSwitch::default(),
            crash_step,
        })
    }

    fn ledger(&self) -> MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Effects applied more than once: a write's second (third, ...) application.
    pub(crate) fn duplicate_effects(&self) -> u32 {
        self.ledger()
            .effects
            .values()
            .map(|n| n.saturating_sub(1))
            .sum()
    }

    /// Writes the service answered from its record by a key it had seen, not applied again.
    pub(crate) fn repeats_answered(&self) -> u32 {
        self.ledger().repeats_answered
    }

    /// Calls of one tool for a step with a permanent failure, after the first: they could never
    /// succeed.
    pub(crate) fn wasted_calls(&self) -> u32 {
        let ledger = self.ledger();
        ledger
            .calls
            .iter()
            .filter(|((step, _), _)| self.plan.permanent(*step).is_some())
            .map(|(_, n)| n.saturating_sub(1))
            .sum()
    }

    fn step_of(&self, tool: &str, args: &Value) -> Option<usize> {
        let raw = args.to_string();
        self.task
            .steps
            .iter()
            .position(|s| s.is_called_by(tool, &raw))
    }

    /// One call reaching a service, with its parsed arguments and (when the caller has one)
    /// its idempotency key.
    async fn serve(
        self: Arc<Self>,
        tool: &'static str,
        args: Value,
        key: Option<IdempotencyKey>,
    ) -> Result<String, HttpError> {
        let output = output_of(tool, &args);
        let Some(step) = self.step_of(tool, &args) else {
            return Err(HttpError::new(404, "no such record"));
        };
        let nth_call = {
            let mut ledger = self.ledger();
            let calls = ledger.calls.entry((step, tool)).or_default();
            *calls += 1;
            *calls
        };
        if let Some(permanent) = self.plan.permanent(step) {
            return Err(permanent.error());
        }
        let write = WRITES.contains(&tool);
        if write {
            let key = key.map(|k| k.to_string());
            let mut ledger = self.ledger();
            if let Some(answer) = key.as_ref().and_then(|k| ledger.answered_keys.get(k)) {
                let answer = answer.clone();
                ledger.repeats_answered += 1;
                return Ok(answer);
            }
            *ledger.effects.entry(step).or_default() += 1;
            if let Some(key) = key {
                ledger.answered_keys.insert(key, output.clone());
            }
        }
        if self.crash_step == Some(step) && self.crash.fire_once() {
            // The effect (if any) is applied; the process dies before anyone hears of it.
            std::future::pending::<()>().await;
        }
        if write && self.plan.ack_lost(step, nth_call) {
            return Err(HttpError::new(
                504,
                format!("gateway timeout after the write (Authorization: Bearer {CANARY})"),
            ));
        }
        Ok(output)
    }

    /// The tools of this task run, each behind a fault-injecting wrapper with this run's
    /// planned faults, and the wrappers (to count their calls).
    pub(crate) fn tools(self: &Arc<Self>) -> Vec<FaultyTool> {
        let down = self
            .plan
            .service_down(self.task.steps.len())
            .map(|step| self.task.steps[step].tool);
        let defs = [
            self.tool::<FetchArgs>("fetch_page", "Fetches a web page and returns its text."),
            self.tool::<SearchArgs>("search", "Searches the web; returns the top hit."),
            self.tool::<SearchArgs>("cached_search", "Searches yesterday's index of the web."),
            self.tool::<CustomerArgs>("lookup_customer", "Looks a customer up by id."),
            self.tool::<OrderArgs>("get_order", "Reads an order's status."),
            self.tool::<AddArgs>("add", "Adds two integers."),
            self.tool::<TicketArgs>("create_ticket", "Opens a support ticket (once per call)."),
            self.tool::<EmailArgs>("send_email", "Sends an email (once per call)."),
        ];
        defs.into_iter()
            .map(|def| {
                let name = def.name().to_owned();
                let faulty = FaultyTool::new(def);
                if Some(name.as_str()) == down || Some(name.as_str()) == self.task.always_down {
                    return faulty.then_always(Fault::error(|| {
                        HttpError::new(503, format!("service down (api_key={CANARY})"))
                    }));
                }
                self.plan
                    .tool_faults(&name)
                    .into_iter()
                    .fold(faulty, FaultyTool::then)
            })
            .collect()
    }

    fn tool<A>(self: &Arc<Self>, name: &'static str, description: &'static str) -> ToolDef
    where
        A: DeserializeOwned + JsonSchema + 'static,
    {
        // `ToolDef::new` gives the schema from the argument type; the service does the work.
        ToolDef::new(name, description, |_: A| async {
            Ok::<_, Infallible>(String::new())
        })
        .with_handler(Service::<A> {
            world: Arc::clone(self),
            tool: name,
            args: std::marker::PhantomData,
        })
    }
}

/// A tool's handler: parses the arguments as the tool's type, then calls the service with the
/// call's idempotency key when the run has one (a write's effect key if the run asks for it).
struct Service<A> {
    world: Arc<World>,
    tool: &'static str,
    args: std::marker::PhantomData<fn() -> A>,
}

impl<A: DeserializeOwned + 'static> ToolHandler for Service<A> {
    fn call(&self, raw_args: &str) -> Result<ToolFuture, ToolError> {
        self.call_with(raw_args, &Extensions::new())
    }

    fn call_with(&self, raw_args: &str, extensions: &Extensions) -> Result<ToolFuture, ToolError> {
        serde_json::from_str::<A>(raw_args).map_err(|e| ToolError::invalid_args(raw_args, e))?;
        let args: Value =
            serde_json::from_str(raw_args).map_err(|e| ToolError::invalid_args(raw_args, e))?;
        let call_key = extensions
            .get::<IdempotencyKey>()
            .or_else(|| extensions.get::<HeldKey>().map(|held| &held.0))
            .cloned();
        let by_effect =
            extensions.get::<KeyWritesByEffect>().is_some() && WRITES.contains(&self.tool);
        let world = Arc::clone(&self.world);
        let tool = self.tool;
        Ok(Box::pin(async move {
            let key = match call_key {
                Some(key) if by_effect => Some(key.for_effect(tool, &args)?),
                key => key,
            };
            Ok(world.serve(tool, args, key).await?)
        }))
    }
}

/// Given to a call as a context value by a tool that was handed its call's key another way (a
/// rig tool reads it from rig's `ToolContext`): the key the service is sent, as the run's own
/// call key would be.
pub(crate) struct HeldKey(pub(crate) IdempotencyKey);

/// Given to a run as a context value, the write tools send their service the key of their
/// effect (`IdempotencyKey::for_effect` of the tool's name and arguments) instead of the call's:
/// what a tool whose effect must happen once whatever the model re-asks does.
pub(crate) struct KeyWritesByEffect;

#[derive(Deserialize, JsonSchema)]
#[allow(dead_code)] // Read only to check the model's arguments.
struct FetchArgs {
    url: String,
}

#[derive(Deserialize, JsonSchema)]
#[allow(dead_code)]
struct SearchArgs {
    query: String,
}

#[derive(Deserialize, JsonSchema)]
#[allow(dead_code)]
struct CustomerArgs {
    id: u64,
}

#[derive(Deserialize, JsonSchema)]
#[allow(dead_code)]
struct OrderArgs {
    order_id: u64,
}

#[derive(Deserialize, JsonSchema)]
#[allow(dead_code)]
struct AddArgs {
    x: i64,
    y: i64,
}

#[derive(Deserialize, JsonSchema)]
#[allow(dead_code)]
struct TicketArgs {
    customer_id: u64,
    summary: String,
}

#[derive(Deserialize, JsonSchema)]
#[allow(dead_code)]
struct EmailArgs {
    to: String,
    body: String,
}
