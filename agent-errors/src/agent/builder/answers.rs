//! What the builder is told about a run's final answer: what to do with one that does not fit,
//! and the checks every output passes. The rules themselves, and how a run applies them, are
//! the run's (`agent/run/final_answer.rs`).

use std::sync::Arc;

use super::AgentBuilder;
use crate::agent::AgentOutput;
#[cfg(doc)]
use crate::agent::RunError;
use crate::agent::run::{OutputPolicy, OutputValidator};

impl<O: AgentOutput> AgentBuilder<O> {
    /// What a run does with a final answer that does not fit the output (see
    /// [`OutputPolicy`]); by default it asks once more, then ends with
    /// [`RunError::InvalidOutput`].
    ///
    /// ```
    /// use agent_errors::{AgentBuilder, RunError};
    /// use agent_errors::run::{Json, OutputPolicy};
    /// use agent_errors::testing::ScriptedModel;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let model = ScriptedModel::new().text("forty-two");
    /// let agent = AgentBuilder::<Json<u32>>::new("count")
    ///     .model(model)
    ///     .output_policy(OutputPolicy::retry(0))
    ///     .build()?;
    /// assert!(matches!(agent.run("How many?").await, Err(RunError::InvalidOutput { .. })));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn output_policy(mut self, policy: OutputPolicy) -> Self {
        self.answers = self.answers.with_policy(policy);
        self
    }

    /// Adds a check on every output, run after it was read (see [`OutputValidator`]). An
    /// output it refuses is a bad answer like one that does not fit its schema.
    ///
    /// ```
    /// use agent_errors::AgentBuilder;
    /// use agent_errors::run::Json;
    /// use agent_errors::testing::ScriptedModel;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let model = ScriptedModel::new().text("-3").text("3");
    /// let agent = AgentBuilder::<Json<i32>>::new("count")
    ///     .model(model)
    ///     .output_validator(|n: &Json<i32>| match n.0 >= 0 {
    ///         true => Ok(()),
    ///         false => Err("a count cannot be negative".to_owned()),
    ///     })
    ///     .build()?;
    /// assert_eq!(agent.run("How many?").await?.0, 3);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn output_validator(mut self, validator: impl OutputValidator<O>) -> Self {
        self.answers = self.answers.with_validator(Arc::new(validator));
        self
    }
}
