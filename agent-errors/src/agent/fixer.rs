//! An agent as a fixer: a model that repairs a failed call, answering with corrected arguments,
//! or calling `escalate` (soft) or `throw_exception` (hard).

use std::fmt::Write as _;
use std::sync::Arc;

use futures_util::future::BoxFuture;

use super::{Agent, RunError, RunOptions};
use crate::chat::CallSource;
use crate::executor::TerminationReason;
use crate::fix::{Fix, FixRequest, Fixer, FixerDef, FixerError};
use crate::structured::strip_code_fence;

impl Agent<String> {
    /// Registers this agent as a fixer under `name`, usable wherever a fixer name is
    /// (`fix(agent = "name")`).
    ///
    /// The agent is asked with a prompt that shows the tool, the failure and the raw arguments; its calls are made with
    /// [`CallSource::FIXER`] and both built-in tools are offered. A final answer that parses as
    /// JSON becomes [`Fix::Args`]; `escalate` becomes [`FixerError::Escalate`]; `throw_exception`
    /// (or any other failure that ends the fixer's run in code) becomes [`FixerError::Throw`];
    /// anything else (an answer that is not JSON, a model error) is [`FixerError::Other`] and uses
    /// up one of the fixer's retries.
    pub fn into_fixer(self, name: impl Into<std::borrow::Cow<'static, str>>) -> FixerDef {
        let mut inner = (*self.inner).clone();
        inner.builtins.escalate = true;
        inner.builtins.throw_exception = true;
        inner.source = CallSource::FIXER;
        inner.offered = super::offer(&inner.registry, inner.builtins);
        FixerDef::new(
            name,
            AgentFixer {
                agent: Agent {
                    inner: Arc::new(inner),
                },
            },
        )
    }
}

struct AgentFixer {
    agent: Agent<String>,
}

/// The fixer agent answered in text that is not JSON.
///
/// # Examples
///
/// A fixer agent that answers in prose fails that try of the fixer with this error:
///
/// ```
/// use agent_errors::{Agent, FixRequest, FixerError};
/// use agent_errors::run::NotJsonArguments;
/// use agent_errors::testing::ScriptedModel;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let chatty = Agent::builder("json_fixer")
///     .model(ScriptedModel::new().text("Sure! The fixed arguments are below."))
///     .build()?
///     .into_fixer("json_fixer");
/// let failed = chatty.fix(FixRequest::new("search", "{q: cats}", "not JSON")).await.unwrap_err();
/// let FixerError::Other(error) = failed else { unreachable!() };
/// let prose = error.downcast_ref::<NotJsonArguments>().expect("an answer that is not JSON");
/// assert!(prose.answer.starts_with("Sure!"));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[error("the fixer agent's answer is not JSON arguments: {error}")]
pub struct NotJsonArguments {
    /// The answer.
    pub answer: String,
    /// What the JSON parser said.
    #[source]
    pub error: serde_json::Error,
}

impl Fixer for AgentFixer {
    fn fix(&self, request: FixRequest) -> BoxFuture<'_, Result<Fix, FixerError>> {
        Box::pin(async move {
            // The fixer's run is the failed call's run's too: it counts on that run's meter.
            let options = RunOptions {
                caller_meter: request.meter.clone(),
                ..RunOptions::default()
            };
            let run = self.agent.run_with(fix_prompt(&request), options);
            match run.await.result {
                Ok(answer) => {
                    match serde_json::from_str::<serde_json::Value>(strip_code_fence(&answer)) {
                        Ok(value) => Ok(Fix::args_value(&value)),
                        Err(error) => Err(FixerError::other(NotJsonArguments { answer, error })),
                    }
                }
                Err(RunError::Escalated { reason, severity }) => {
                    Err(FixerError::Escalate { reason, severity })
                }
                Err(RunError::Terminated(terminated)) => {
                    Err(FixerError::Throw(match &terminated.reason {
                        TerminationReason::Thrown(reason) => reason.clone(),
                        _ => terminated.user_message.to_owned(),
                    }))
                }
                Err(other) => Err(FixerError::other(other)),
            }
        })
    }
}

/// The task a fixer agent is given for one failed call.
pub(crate) fn fix_prompt(request: &FixRequest) -> String {
    let mut prompt = String::with_capacity(256 + request.raw_args.len() + request.failure.len());
    let _ = write!(
        prompt,
        "A call to the tool `{}` failed ({}, {}), attempt {}.\nFailure: {}\nArguments as sent: {}\n\n",
        request.tool, request.key, request.kind, request.attempt, request.failure, request.raw_args
    );
    prompt.push_str(
        "Answer with the corrected arguments as one JSON object and nothing else. \
         If you cannot correct them, call `escalate` with a reason the caller can act on \
         (include corrected data when you have it). If the call must not be attempted again, \
         call `throw_exception`.",
    );
    prompt
}
