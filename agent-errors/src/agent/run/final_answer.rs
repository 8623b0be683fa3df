//! The model's final answer made the run's output: read as the output type, checked against the
//! schema it was asked in and by the agent's validators, and, when it does not fit, shown its
//! problems and asked again under the agent's [`OutputPolicy`].

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use super::Run;
use crate::agent::{AgentInner, AgentOutput, RunError};
use crate::chat::{Message, ResponseFormat};
use crate::error::BoxError;
use crate::events::Event;
use crate::model::ChatModel;
use crate::structured::{AnswerProblem, AnswerSchema, InvalidAnswer};

/// A check of the user's on a run's output, after it was read (and, for [`Json<T>`](crate::agent::Json),
/// checked against its JSON Schema): `Err` holds what the model is told to fix, and the model
/// is asked again under the agent's [`OutputPolicy`]. A closure `Fn(&O) -> Result<(), String>`
/// is one.
///
/// # Examples
///
/// ```
/// use agent_errors::run::{Json, OutputValidator};
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Invoice {
///     lines: Vec<u32>,
///     total: u32,
/// }
///
/// /// The total is the sum of the lines.
/// struct Adds;
///
/// impl OutputValidator<Json<Invoice>> for Adds {
///     fn validate(&self, invoice: &Json<Invoice>) -> Result<(), String> {
///         let sum: u32 = invoice.0.lines.iter().sum();
///         match sum == invoice.0.total {
///             true => Ok(()),
///             false => Err(format!("`total` is {}, but the lines add up to {sum}", invoice.0.total)),
///         }
///     }
/// }
///
/// let wrong = Json(Invoice { lines: vec![1, 2], total: 4 });
/// assert_eq!(Adds.validate(&wrong).unwrap_err(), "`total` is 4, but the lines add up to 3");
/// ```
pub trait OutputValidator<O>: Send + Sync + 'static {
    /// `Ok` when `output` will do; else what is wrong with it, for the model.
    fn validate(&self, output: &O) -> Result<(), String>;
}

impl<O, F> OutputValidator<O> for F
where
    F: Fn(&O) -> Result<(), String> + Send + Sync + 'static,
{
    fn validate(&self, output: &O) -> Result<(), String> {
        self(output)
    }
}

/// What a run does with a final answer that does not fit its output: ask again up to a number
/// of times, showing the model what is wrong, then end with
/// [`RunError::InvalidOutput`] (the default), return the best effort, or ask a fallback model.
///
/// Each re-ask is a model request like any other: it counts against the run's turn cap, usage
/// limits and [retry allowance](crate::Limits::with_max_retries) (a run whose allowance
/// is spent asks no more), and is reported as an [`Event::OutputReask`].
///
/// The default asks once more, then ends with `InvalidOutput`.
///
/// # Examples
///
/// ```
/// use agent_errors::AgentBuilder;
/// use agent_errors::run::{Json, OutputPolicy};
/// use agent_errors::testing::ScriptedModel;
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Answer {
///     city: String,
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let model = ScriptedModel::new()
///     .text(r#"{"town": "Oslo"}"#) // no `city`: shown its problem and asked again
///     .text(r#"{"city": "Oslo"}"#);
/// let agent = AgentBuilder::<Json<Answer>>::new("geo")
///     .model(model.clone())
///     .output_policy(OutputPolicy::retry(2))
///     .build()?;
/// assert_eq!(agent.run("Where is the Munch museum?").await?.0.city, "Oslo");
/// assert_eq!(model.calls(), 2);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct OutputPolicy {
    retries: u32,
    then: AfterRetries,
}

/// What happens once the re-asks are spent.
#[derive(Clone)]
enum AfterRetries {
    Fail,
    BestEffort,
    Fallback(Arc<dyn ChatModel>),
}

impl OutputPolicy {
    /// Asks again up to `times` times (`0`: never), then ends with
    /// [`RunError::InvalidOutput`].
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::run::OutputPolicy;
    ///
    /// let policy = OutputPolicy::retry(3);
    /// assert_eq!(policy.retries(), 3);
    /// ```
    pub fn retry(times: u32) -> Self {
        OutputPolicy {
            retries: times,
            then: AfterRetries::Fail,
        }
    }

    /// Once the re-asks are spent, returns the latest answer that could be read as the output
    /// type even though its schema or a validator refused it; with none, ends with
    /// [`RunError::InvalidOutput`].
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::run::OutputPolicy;
    ///
    /// let policy = OutputPolicy::retry(1).then_best_effort();
    /// assert_eq!(policy.retries(), 1);
    /// ```
    #[must_use]
    pub fn then_best_effort(mut self) -> Self {
        self.then = AfterRetries::BestEffort;
        self
    }

    /// Once the re-asks are spent, asks `model` once, with the problems of the last answer;
    /// it answers the rest of the run. Reported as an [`Event::LlmFallback`].
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::run::OutputPolicy;
    /// use agent_errors::testing::ScriptedModel;
    ///
    /// let policy = OutputPolicy::retry(1).then_fallback(ScriptedModel::named("big-model"));
    /// assert_eq!(policy.retries(), 1);
    /// ```
    #[must_use]
    pub fn then_fallback(mut self, model: impl ChatModel) -> Self {
        self.then = AfterRetries::Fallback(Arc::new(model));
        self
    }

    /// How many times the model is asked again.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::run::OutputPolicy;
    ///
    /// assert_eq!(OutputPolicy::default().retries(), 1);
    /// ```
    pub fn retries(&self) -> u32 {
        self.retries
    }
}

impl Default for OutputPolicy {
    fn default() -> Self {
        OutputPolicy::retry(1)
    }
}

impl fmt::Debug for OutputPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let then = match &self.then {
            AfterRetries::Fail => "fail".to_owned(),
            AfterRetries::BestEffort => "best effort".to_owned(),
            AfterRetries::Fallback(model) => format!("fallback to {}", model.name()),
        };
        f.debug_struct("OutputPolicy")
            .field("retries", &self.retries)
            .field("then", &then)
            .finish()
    }
}

/// How an agent's final answers are judged: its output policy, validators and compiled schema.
pub(crate) struct AnswerRules<O> {
    policy: OutputPolicy,
    validators: Vec<Arc<dyn OutputValidator<O>>>,
    schema: Option<Arc<AnswerSchema>>,
}

impl<O> Default for AnswerRules<O> {
    fn default() -> Self {
        AnswerRules {
            policy: OutputPolicy::default(),
            validators: Vec::new(),
            schema: None,
        }
    }
}

impl<O> Clone for AnswerRules<O> {
    fn clone(&self) -> Self {
        AnswerRules {
            policy: self.policy.clone(),
            validators: self.validators.clone(),
            schema: self.schema.clone(),
        }
    }
}

impl<O> AnswerRules<O> {
    /// The rules, with the schema of the format every request asks for compiled once.
    pub(crate) fn compiled(mut self, format: Option<&ResponseFormat>) -> Self {
        self.schema = format.map(|format| Arc::new(AnswerSchema::of(format)));
        self
    }

    /// The rules with `policy` for answers that do not fit.
    pub(crate) fn with_policy(mut self, policy: OutputPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The rules with `validator` added after the others.
    pub(crate) fn with_validator(mut self, validator: Arc<dyn OutputValidator<O>>) -> Self {
        self.validators.push(validator);
        self
    }

    /// The model a refused answer falls back to, when the output policy names one.
    pub(crate) fn fallback_model(&self) -> Option<&dyn ChatModel> {
        match &self.policy.then {
            AfterRetries::Fallback(model) => Some(model.as_ref()),
            _ => None,
        }
    }
}

/// An answer that did not fit: why (the run's error if it ends here), what the model is told,
/// and the output it could still be read as.
pub(in crate::agent) struct Refused<O> {
    error: BoxError,
    problems: Vec<AnswerProblem>,
    readable: Option<O>,
    /// The output type or a validator panicked: the run ends with this, asking nothing again.
    panicked: Option<RunError>,
}

/// What the loop does with a final answer.
pub(in crate::agent) enum Verdict<O> {
    /// The run ends with this.
    Done(Result<O, RunError>),
    /// The model was told what to fix; ask it again.
    AskAgain,
}

/// What one run's re-asks have used, and the best answer seen so far.
pub(in crate::agent) struct Reasks<O> {
    asked: u32,
    fell_back: bool,
    best: Option<O>,
}

impl<O> Default for Reasks<O> {
    fn default() -> Self {
        Reasks {
            asked: 0,
            fell_back: false,
            best: None,
        }
    }
}

impl<O: AgentOutput> AgentInner<O> {
    /// Reads `text` as the output: its schema first (every problem, with its path, is what the
    /// model is told), then the output type, then the validators. The run's error is the
    /// output type's own when the answer could not be read, else the problems.
    pub(in crate::agent) fn read_answer(&self, text: &str) -> Result<O, Refused<O>> {
        let rules = &self.answers;
        let problems = match &rules.schema {
            Some(schema) => schema.problems(text),
            None => Vec::new(),
        };
        let read = catch_unwind(AssertUnwindSafe(|| O::from_final_text(text.to_owned())));
        let output = match read {
            Ok(Ok(output)) if problems.is_empty() => output,
            Ok(Ok(readable)) => return Err(Refused::of(problems, Some(readable))),
            Ok(Err(error)) => {
                let problems = match problems.is_empty() {
                    true => vec![AnswerProblem::new("", error.to_string())],
                    false => problems,
                };
                return Err(Refused {
                    error: redacted(error),
                    problems,
                    readable: None,
                    panicked: None,
                });
            }
            Err(panic) => return Err(Refused::panicked("AgentOutput::from_final_text", panic)),
        };
        let validated = catch_unwind(AssertUnwindSafe(|| {
            let refusals = (rules.validators.iter()).filter_map(|v| v.validate(&output).err());
            refusals.collect::<Vec<_>>()
        }));
        let refusals = match validated {
            Ok(refusals) => refusals,
            Err(panic) => return Err(Refused::panicked("OutputValidator::validate", panic)),
        };
        let problems: Vec<_> = (refusals.into_iter())
            .map(|m| AnswerProblem::new("", m))
            .collect();
        match problems.is_empty() {
            true => Ok(output),
            false => Err(Refused::of(problems, Some(output))),
        }
    }

    /// How a run ends on an answer it asks no more about: the best effort when the policy
    /// takes one and there is one, else [`RunError::InvalidOutput`].
    pub(in crate::agent) fn give_up(
        &self,
        reasks: &mut Reasks<O>,
        refused: Refused<O>,
        text: &str,
    ) -> Result<O, RunError> {
        if let Some(panicked) = refused.panicked {
            return Err(panicked);
        }
        if let AfterRetries::BestEffort = self.answers.policy.then {
            if let Some(best) = refused.readable.or(reasks.best.take()) {
                tracing::info!("the output policy returned the best effort");
                return Ok(best);
            }
        }
        Err(RunError::InvalidOutput {
            text: crate::redact::redact(text).into_owned(),
            error: refused.error,
        })
    }
}

impl<O: AgentOutput> Run<'_, O> {
    /// The run's output from the model's final `text`, or, when it does not fit and the output
    /// policy allows, the problems told to the model to ask it again.
    pub(super) fn final_answer(&mut self, text: String) -> Verdict<O> {
        let (agent, ctx, request, reasks) =
            (self.agent, &self.ctx, &mut self.request, &mut self.reasks);
        let refused = match agent.read_answer(&text) {
            Ok(output) => {
                let answer = Message::assistant(Some(text), Vec::new());
                request.messages.push(answer);
                return Verdict::Done(Ok(output));
            }
            Err(refused) => refused,
        };
        if let Some(panicked) = refused.panicked {
            return Verdict::Done(Err(panicked));
        }
        let answer = Message::assistant(Some(text.clone()), Vec::new());
        request.messages.push(answer);
        let policy = &agent.answers.policy;
        let attempt = reasks.asked + 1;
        let fallback = match &policy.then {
            AfterRetries::Fallback(model) if !reasks.fell_back => Some(model),
            _ => None,
        };
        let again = reasks.asked < policy.retries || fallback.is_some();
        if !again || !ctx.retries().try_spend() {
            return Verdict::Done(agent.give_up(reasks, refused, &text));
        }
        let problems: Vec<String> = refused.problems.iter().map(ToString::to_string).collect();
        ctx.events().emit(Event::OutputReask {
            attempt,
            reason: problems.join("; "),
        });
        if reasks.asked >= policy.retries {
            if let Some(model) = fallback {
                let from = self.fallback.as_ref().unwrap_or(&agent.model);
                let from = from.name().to_owned();
                let to = model.name().to_owned();
                ctx.events().emit(Event::LlmFallback {
                    from,
                    to,
                    trigger: "invalid_output",
                    attempts: attempt,
                    kind: crate::classify::ErrorKind::Validation,
                });
                self.fallback = Some(Arc::clone(model));
                reasks.fell_back = true;
            }
        }
        reasks.asked += 1;
        reasks.best = refused.readable.or(reasks.best.take());
        request
            .messages
            .push(Message::user(correction(&refused.problems)));
        Verdict::AskAgain
    }
}

impl<O> Refused<O> {
    fn of(problems: Vec<AnswerProblem>, readable: Option<O>) -> Self {
        Refused {
            error: Box::new(InvalidAnswer::new(problems.clone())),
            problems,
            readable,
            panicked: None,
        }
    }

    /// The output type or a validator of yours (`callback`) panicked on the answer.
    fn panicked(callback: &'static str, payload: Box<dyn std::any::Any + Send>) -> Self {
        Refused {
            error: Box::new(InvalidAnswer::new(Vec::new())),
            problems: Vec::new(),
            readable: None,
            panicked: Some(RunError::CallbackPanicked {
                callback,
                message: crate::sanitize::scrub(
                    &crate::executor::ToolPanic::from_payload(payload).message,
                    crate::sanitize::DEFAULT_MAX_CHARS,
                ),
            }),
        }
    }
}

/// The output type's error as the run's error holds it: where a level of it says a secret (a
/// parser's message quotes the answer, a bearer token where a number goes), its words are
/// redacted, and its type kept when it is serde_json's (the usual `Json<T>`), else named by a
/// [`RedactedError`](crate::classify::RedactedError). An error with nothing to redact is kept
/// as it is, to downcast.
fn redacted(error: BoxError) -> BoxError {
    let says_secret = |level: &(dyn std::error::Error + 'static)| {
        let text = level.to_string();
        *crate::redact::redact(&text) != *text
    };
    if !crate::classify::chain(&*error).any(says_secret) {
        return error;
    }
    if error.is::<serde_json::Error>() {
        let text = crate::redact::redact(&error.to_string()).into_owned();
        return Box::new(<serde_json::Error as serde::de::Error>::custom(text));
    }
    crate::classify::RedactedError::chain_of(&*error)
}

/// What the model is told about its answer: every problem (bounded, sanitized, with its path).
fn correction(problems: &[AnswerProblem]) -> String {
    let mut text = String::from("Your answer does not fit the output asked for:\n");
    for problem in problems.iter().take(crate::structured::MAX_PROBLEMS) {
        text.push_str("- ");
        text.push_str(&problem.to_string());
        text.push('\n');
    }
    text.push_str("Answer again with the corrected output alone.");
    text
}
