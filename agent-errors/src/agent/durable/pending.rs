//! A waiting run's questions, read back from the checkpoint store by run id:
//! [`Agent::pending_approvals`].

use super::saved_run::{ResumeError, SavedRun};
use crate::agent::{Agent, AgentOutput, RunError};
use crate::approval::PendingApproval;

impl<O: AgentOutput> Agent<O> {
    /// The questions the run `run_id` waits on, read from the agent's checkpoint store exactly
    /// as the run saved them (the tool, the whole arguments as shown, why it asks, the
    /// digest an answer must name), in the order the model made the calls; empty when the run
    /// waits on nobody. An approval screen shows these and builds its answers from them
    /// ([`Answer::to`](crate::approval::Answer::to)), so nothing a browser sends back can
    /// change what a person is asked or what their answer approves.
    ///
    /// Fails as [`resume`](Agent::resume) would for a run it cannot go on with: no store
    /// ([`ResumeError::NoStore`]), no such run ([`ResumeError::NotFound`]), a run that
    /// finished ([`ResumeError::Finished`]), or a checkpoint that cannot be read
    /// ([`RunError::Checkpoint`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::{Agent, RunOptions, ToolDef};
    /// use agent_errors::approval::{Answer, Decision};
    /// use agent_errors::checkpoint::MemoryCheckpoints;
    /// use agent_errors::testing::{ScriptedModel, echo_tool};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let model = ScriptedModel::new().tool_call("refund", r#"{"text": "order 7"}"#).text("refunded");
    /// let agent = Agent::builder("support")
    ///     .model(model)
    ///     .tool(echo_tool("refund").requires_approval(true))
    ///     .checkpoints(MemoryCheckpoints::new())
    ///     .build()?;
    /// agent.run_with("refund order 7", RunOptions::new().run_id("refund-7")).await;
    ///
    /// // Later, in the approval endpoint: the question comes from the store.
    /// let pending = agent.pending_approvals("refund-7").await?;
    /// assert_eq!(pending[0].tool, "refund");
    /// let answer = Answer::to(&pending[0], Decision::Approve);
    /// let outcome = agent.resume("refund-7", RunOptions::new().answered(answer)).await;
    /// assert_eq!(outcome.result?, "refunded");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn pending_approvals(&self, run_id: &str) -> Result<Vec<PendingApproval>, RunError> {
        let run_id = run_id.to_owned();
        let Some(store) = &self.inner.checkpoints else {
            return Err(RunError::Resume(ResumeError::NoStore));
        };
        let stored = match store.load_journal(&run_id).await {
            Ok(Some(stored)) => stored,
            Ok(None) => return Err(RunError::Resume(ResumeError::NotFound { run_id }).redacted()),
            Err(error) => return Err(RunError::Checkpoint(error).redacted()),
        };
        let (saved, _) = SavedRun::from_journal(&run_id, &stored)
            .map_err(|e| RunError::Checkpoint(e).redacted())?;
        if let Some(outcome) = saved.finished {
            return Err(RunError::Resume(ResumeError::Finished { run_id, outcome }).redacted());
        }
        let waiting = saved
            .pending
            .into_iter()
            .filter_map(|call| call.progress.waiting);
        Ok(waiting.map(|waiting| waiting.pending).collect())
    }
}
