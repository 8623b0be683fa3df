//! The benchmark's tools as rig `Tool`s: each one calls the same fault-injecting tool, over the
//! same services, that the other strategies call, so its faults land at the same calls and its
//! calls and effects are counted the same way.

use std::marker::PhantomData;

use agent_errors::call::{Extensions, IdempotencyKey};
use agent_errors::testing::FaultyTool;
use agent_errors::{BoxError, HttpError, ToolDef};
use rig_core::tool::{Tool, ToolContext, ToolErrorKind, ToolExecutionError};

use crate::world::{HeldKey, KeyWritesByEffect};

/// A tool's name, as a type: rig names a `Tool` by an associated constant.
pub(crate) trait Named: Send + Sync + 'static {
    const NAME: &'static str;
}

macro_rules! tool_names {
    ($($ty:ident => $name:literal),+ $(,)?) => {
        $(
            pub(crate) struct $ty;
            impl Named for $ty {
                const NAME: &'static str = $name;
            }
        )+
    };
}

tool_names! {
    FetchPage => "fetch_page",
    Search => "search",
    CachedSearch => "cached_search",
    LookupCustomer => "lookup_customer",
    GetOrder => "get_order",
    Add => "add",
    CreateTicket => "create_ticket",
    SendEmail => "send_email",
}

/// `$each!(FetchPage, Search, ...)`: every tool's name type, in the order `World::tools` lists
/// the tools.
macro_rules! every_tool {
    ($each:ident) => {
        $each!(
            FetchPage,
            Search,
            CachedSearch,
            LookupCustomer,
            GetOrder,
            Add,
            CreateTicket,
            SendEmail
        )
    };
}
pub(crate) use every_tool;

/// The task run has no tool of this name.
#[derive(Debug, thiserror::Error)]
#[error("the task run has no tool named `{0}`")]
pub(crate) struct MissingTool(&'static str);

/// One of the benchmark's tools, written for rig: its arguments as JSON (the service parses
/// them as the tool's type, as it does for every strategy), its failures mapped to rig's error
/// kinds by their HTTP status, with their text as the model's feedback, the way a rig tool
/// over an HTTP service is written. When its `ToolContext` holds the call's idempotency key
/// (a `GuardedTool` puts it there), it sends it, a write's by its effect as the tuned
/// strategy's tools do; rig's own loop gives it none.
pub(crate) struct BenchTool<N> {
    tool: ToolDef,
    name: PhantomData<fn() -> N>,
}

impl<N: Named> BenchTool<N> {
    /// The tool named `N` among a task run's fault-injecting tools.
    pub(crate) fn of(tools: &[FaultyTool]) -> Result<Self, MissingTool> {
        let tool = tools
            .iter()
            .map(FaultyTool::tool)
            .find(|t| t.name() == N::NAME)
            .ok_or(MissingTool(N::NAME))?;
        Ok(BenchTool {
            tool,
            name: PhantomData,
        })
    }
}

impl<N: Named> Tool for BenchTool<N> {
    const NAME: &'static str = N::NAME;
    type Args = serde_json::Value;
    type Output = String;
    type Error = ToolExecutionError;

    fn description(&self) -> String {
        self.tool.description().to_owned()
    }

    fn parameters(&self) -> serde_json::Value {
        self.tool.parameters().clone()
    }

    async fn call(
        &self,
        context: &mut ToolContext,
        args: serde_json::Value,
    ) -> Result<String, ToolExecutionError> {
        let sent = match context.get::<IdempotencyKey>()? {
            Some(key) => Extensions::new().with(HeldKey(key)).with(KeyWritesByEffect),
            None => Extensions::new(),
        };
        // rig's own loop calls the tool as it is written, with none of the executor's checks:
        // that is what this baseline measures.
        let running = agent_errors::testing::handler_of(&self.tool)
            .call_with(&args.to_string(), &sent)
            .map_err(|refused| ToolExecutionError::invalid_args(refused.to_string()))?;
        running.await.map_err(|failure| execution_error(&failure))
    }
}

/// A service's failure as rig's: the kind its status names, the status itself, and its text
/// as what the model is shown (rig's explicit constructors show the message).
fn execution_error(failure: &BoxError) -> ToolExecutionError {
    let text = failure.to_string();
    let Some(http) = failure.downcast_ref::<HttpError>() else {
        return ToolExecutionError::other(text);
    };
    let status = http.status();
    let error = match status {
        401 | 403 => ToolExecutionError::permission_denied(text),
        404 => ToolExecutionError::not_found(text),
        408 | 504 => ToolExecutionError::timeout(text),
        429 => ToolExecutionError::rate_limited(text),
        500..=599 => ToolExecutionError::provider(text).with_retryable(status != 501),
        _ => ToolExecutionError::new(ToolErrorKind::Other, text).with_retryable(false),
    };
    error.with_http_status(status)
}
