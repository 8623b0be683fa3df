//! Building an agent: model, tools, fixers, policies and limits, validated at start-up
//! (`build.rs`).

mod answers;
mod build;

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use super::builtins::Builtins;
use super::model_failure::{IntoLlmDecision, LlmErrorHandler, ModelError, erase_handler};
use super::run::AnswerRules;
use super::{AgentOutput, DEFAULT_MAX_TURNS};
use crate::approval::{AnswerKey, Approver};
use crate::breaker::{DEFAULT_THRESHOLD, ServiceBreaker};
use crate::budget::RetryBudget;
use crate::chat::{CallSource, RequestOptions, ToolCall};
use crate::checkpoint::CheckpointStore;
use crate::executor::{Approvals, Limits, PermissionHook};
use crate::fix::FixerDef;
use crate::llm::LlmErrorDecision;
use crate::model::ChatModel;
use crate::policy::Policy;
use crate::registry::{Registry, RegistryBuilder};
use crate::tool::ToolDef;
use crate::usage::UsageLimits;

/// Collects an agent's configuration; [`AgentBuilder::build`] validates it.
///
/// `O` is the output type of the agent's runs: `String` via [`Agent::builder`](super::Agent::builder), anything
/// implementing [`AgentOutput`] via `AgentBuilder::<O>::new`.
///
/// # Examples
///
/// The smallest agent needs a name and a model; everything else has a default:
///
/// ```
/// use agent_errors::{Agent, policy};
/// use agent_errors::testing::{ScriptedModel, echo_tool};
///
/// let agent = Agent::builder("support")
///     .model(ScriptedModel::new())
///     .system_prompt("You help customers with their orders.")
///     .tool(echo_tool("lookup_order"))
///     .on_any_tool_error(policy!(timeout = retry(3)))
///     .max_turns(10)
///     .enable_escalate()
///     .build()?;
/// assert_eq!(agent.max_turns(), 10);
/// # Ok::<(), agent_errors::build::ConfigError>(())
/// ```
pub struct AgentBuilder<O = String> {
    name: String,
    model: Option<Arc<dyn ChatModel>>,
    registry: RegistryBuilder,
    llm_error: Option<LlmErrorHandler<O>>,
    max_turns: u32,
    breaker_threshold: u32,
    service_breaker: Option<Arc<ServiceBreaker>>,
    retry_budget: Option<Arc<RetryBudget>>,
    permission: Option<Arc<dyn PermissionHook>>,
    approvals: Approvals,
    system_prompt: Option<String>,
    builtins: Builtins,
    limits: Limits,
    usage_limits: UsageLimits,
    source: CallSource,
    options: RequestOptions,
    reserved_names_used: Vec<String>,
    checkpoints: Option<Arc<dyn CheckpointStore>>,
    snapshot_every: Option<u32>,
    pub(super) answers: AnswerRules<O>,
    _output: PhantomData<fn() -> O>,
}

impl<O> fmt::Debug for AgentBuilder<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentBuilder")
            .field("name", &self.name)
            .field("registry", &self.registry)
            .field("max_turns", &self.max_turns)
            .field("breaker_threshold", &self.breaker_threshold)
            .finish_non_exhaustive()
    }
}

impl<O: AgentOutput> AgentBuilder<O> {
    /// Starts an agent whose runs return an `O`, read from the model's final text.
    pub fn new(name: impl Into<String>) -> Self {
        AgentBuilder {
            name: name.into(),
            model: None,
            registry: Registry::builder(),
            llm_error: None,
            max_turns: DEFAULT_MAX_TURNS,
            breaker_threshold: DEFAULT_THRESHOLD,
            service_breaker: None,
            retry_budget: None,
            permission: None,
            approvals: Approvals::default(),
            system_prompt: None,
            builtins: Builtins::default(),
            limits: Limits::default(),
            usage_limits: UsageLimits::default(),
            source: CallSource::MAIN_AGENT,
            options: RequestOptions::default(),
            reserved_names_used: Vec::new(),
            checkpoints: None,
            snapshot_every: None,
            answers: AnswerRules::default(),
            _output: PhantomData,
        }
    }

    /// The model the agent talks to (required).
    #[must_use]
    pub fn model(mut self, model: impl ChatModel) -> Self {
        self.model = Some(Arc::new(model));
        self
    }

    /// The model, already shared.
    #[must_use]
    pub fn shared_model(mut self, model: Arc<dyn ChatModel>) -> Self {
        self.model = Some(model);
        self
    }

    /// Adds one tool.
    #[must_use]
    pub fn tool(mut self, tool: ToolDef) -> Self {
        self.note_name(&tool);
        self.registry = self.registry.tool(tool);
        self
    }

    /// Adds tools (`tools![a, b]`).
    #[must_use]
    pub fn tools(self, tools: impl IntoIterator<Item = ToolDef>) -> Self {
        tools.into_iter().fold(self, AgentBuilder::tool)
    }

    fn note_name(&mut self, tool: &ToolDef) {
        if Builtins::is_builtin(tool.name()) {
            self.reserved_names_used.push(tool.name().to_owned());
        }
    }

    /// Adds one fixer.
    #[must_use]
    pub fn fixer(mut self, fixer: FixerDef) -> Self {
        self.registry = self.registry.fixer(fixer);
        self
    }

    /// Adds fixers (`fixers![a, b]`).
    #[must_use]
    pub fn fixers(mut self, fixers: impl IntoIterator<Item = FixerDef>) -> Self {
        self.registry = self.registry.fixers(fixers);
        self
    }

    /// Adds a reconciler, for the tools that name it (`#[tool(reconcile = "name")]`,
    /// [`ToolDef::with_reconcile`](crate::ToolDef::with_reconcile)): asked whether a call took
    /// effect when its outcome is unknown.
    #[must_use]
    pub fn reconciler(mut self, reconciler: crate::reconcile::ReconcilerDef) -> Self {
        self.registry = self.registry.reconciler(reconciler);
        self
    }

    /// Overrides a tool's policy at agent level (below the tool's own attribute, above
    /// [`on_any_tool_error`](AgentBuilder::on_any_tool_error) and crate defaults). Set twice for
    /// one tool, the keys merge and the later entry wins. An entry the tool's own policy always
    /// answers first (its `execution`, or the same key) can never apply, and `build` refuses it.
    #[must_use]
    pub fn on_tool_error(mut self, tool: impl Into<String>, policy: Policy) -> Self {
        self.registry = self.registry.on_tool_error(tool, policy);
        self
    }

    /// Sets the agent's policy for all of its tools: a layer below each tool's own policy and
    /// its [`on_tool_error`](AgentBuilder::on_tool_error), above the crate's `defaults!`
    /// (`explain` shows it as "agent, every tool"). Set twice, the keys merge.
    #[must_use]
    pub fn on_any_tool_error(mut self, policy: Policy) -> Self {
        self.registry = self.registry.on_any_tool_error(policy);
        self
    }

    /// Puts the recommended preset below the agent's policy for every tool: retries only where
    /// a retry cannot apply an effect twice, an unknown outcome otherwise, error envelopes in
    /// successful outputs checked, broken tools taken off the table, auth failures ending the
    /// run; and, unless [`service_breaker`](AgentBuilder::service_breaker) gives one, a
    /// service breaker that opens on a failure rate; and, unless
    /// [`on_llm_error`](AgentBuilder::on_llm_error) says otherwise, a failed model call that
    /// may pass (overloaded, rate-limited, 5xx, timed out) is retried, four calls in all. See
    /// [`Policy::recommended`](crate::policy::Policy::recommended) for each rule and why it is
    /// safe. `explain` shows its entries as the layer "recommended preset"; entries of
    /// [`on_any_tool_error`](AgentBuilder::on_any_tool_error), `on_tool_error` and the tools'
    /// own win key by key. Without it (or `defaults!(recommended)`) the built-in default stays
    /// fail-closed: nothing is retried.
    ///
    /// ```
    /// use agent_errors::{Agent, ErrorKind};
    /// use agent_errors::policy::PolicyLayer;
    /// use agent_errors::testing::{ScriptedModel, echo_tool};
    ///
    /// let agent = Agent::builder("a")
    ///     .model(ScriptedModel::new())
    ///     .tool(echo_tool("search"))
    ///     .recommended()
    ///     .build()?;
    /// let explained = agent.explain("search").expect("registered");
    /// let (_, ladder, layer) = explained.for_kind(ErrorKind::Timeout);
    /// assert_eq!((ladder.to_string().as_str(), layer), ("[retry(3, when_safe), escalate]", PolicyLayer::Recommended));
    /// # Ok::<(), agent_errors::build::ConfigError>(())
    /// ```
    #[must_use]
    pub fn recommended(mut self) -> Self {
        self.registry = self.registry.recommended();
        if self.llm_error.is_none() {
            // A model call applies no effect: a failure that may pass is retried, four calls
            // in all (one more than a tool's), from 500 ms with jitter and the server's
            // `Retry-After`. Providers' overloads come in bursts; the run's retry allowance
            // still bounds the total.
            self.llm_error = Some(erase_handler(|_: &ModelError, _| {
                LlmErrorDecision::<O>::retry(4, std::time::Duration::from_millis(500))
            }));
        }
        self
    }

    /// Classifies this agent's tool failures with `classifier`'s rules before the process-wide
    /// ones, so your own error types get their kinds (and `not_found = ...` entries fire)
    /// without a global registration.
    #[must_use]
    pub fn classifier(mut self, classifier: crate::classify::Classifier) -> Self {
        self.registry = self.registry.classifier(classifier);
        self
    }

    /// Decides what to do when a model call fails. The handler gets the model's own error
    /// (downcast it to branch on its type) and the attempt that failed within the current turn
    /// (1-based). Without a handler every failure is rethrown unchanged.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use agent_errors::Agent;
    /// # use agent_errors::LlmErrorDecision;
    /// # use agent_errors::testing::ScriptedModel;
    /// let agent = Agent::builder("a")
    ///     .model(ScriptedModel::new())
    ///     .on_llm_error(|err, _attempt| {
    ///         if err.downcast_ref::<std::io::Error>().is_some() {
    ///             LlmErrorDecision::retry(3, Duration::from_millis(500))
    ///         } else {
    ///             Ok(LlmErrorDecision::RespondWith("the model is unavailable".to_owned()))
    ///         }
    ///     })
    ///     .build();
    /// assert!(agent.is_ok());
    /// ```
    #[must_use]
    pub fn on_llm_error<F, R>(mut self, handler: F) -> Self
    where
        F: Fn(&ModelError, u32) -> R + Send + Sync + 'static,
        R: IntoLlmDecision<O>,
    {
        self.llm_error = Some(erase_handler(handler));
        self
    }

    /// The cap on model turns per run (default 20). Retries of a failed model call do not count.
    #[must_use]
    pub fn max_turns(mut self, max_turns: u32) -> Self {
        self.max_turns = max_turns;
        self
    }

    /// Consecutive failures of one tool that end a run (default 3).
    #[must_use]
    pub fn breaker_threshold(mut self, threshold: u32) -> Self {
        self.breaker_threshold = threshold;
        self
    }

    /// Shares this service breaker (with other agents, say). By default each agent has its own,
    /// shared by all its runs.
    #[must_use]
    pub fn service_breaker(mut self, breaker: Arc<ServiceBreaker>) -> Self {
        self.service_breaker = Some(breaker);
        self
    }

    /// Pays every tool retry of every run from this budget (shared with other agents, or with
    /// other processes through a shared store): a retry it refuses is not made and the ladder
    /// goes on. By default retries are not budgeted.
    #[must_use]
    pub fn retry_budget(mut self, budget: Arc<RetryBudget>) -> Self {
        self.retry_budget = Some(budget);
        self
    }

    /// Asks `hook` before every tool call; a denied call gets an error result and never runs.
    /// The hook sees the run's context values and denial counts
    /// ([`PermissionHook::check_in`]); after [`Limits::max_permission_denials`] denials across
    /// every tool (default 20) the run ends with
    /// [`TerminationReason::PermissionDenials`](crate::run::TerminationReason::PermissionDenials).
    #[must_use]
    pub fn permission(mut self, hook: impl PermissionHook) -> Self {
        self.permission = Some(Arc::new(hook));
        self
    }

    /// Asks `approver` whenever a call needs a person (its tool
    /// [requires approval](ToolDef::requires_approval), the
    /// [`require_approval`](AgentBuilder::require_approval) rule says so, or an `ask_person`
    /// rung hands it a failure). Without one, every such call waits: a checkpointed run ends
    /// with [`RunError::WaitingForPerson`](crate::RunError::WaitingForPerson) until it is resumed
    /// with the answers. See [`approval`](crate::approval).
    ///
    /// ```
    /// use agent_errors::{Agent, approval::{Decision, PendingApproval}};
    /// use agent_errors::testing::ScriptedModel;
    ///
    /// let agent = Agent::builder("clerk")
    ///     .model(ScriptedModel::new().text("done"))
    ///     .approver(|pending: &PendingApproval| {
    ///         if pending.tool == "refund" { Decision::Later } else { Decision::Approve }
    ///     })
    ///     .build();
    /// assert!(agent.is_ok());
    /// ```
    #[must_use]
    pub fn approver(mut self, approver: impl Approver) -> Self {
        self.approvals.approver = Some(Arc::new(approver));
        self
    }

    /// Takes only answers signed with `key`: every answer given to a run
    /// ([`RunOptions::answered`](crate::RunOptions::answered), [`answer_to`](crate::RunOptions::answer_to),
    /// [`answer`](crate::RunOptions::answer)) and every answer an approver relays with
    /// [`ApprovalContext::accept`](crate::approval::ApprovalContext::accept) (Restate's
    /// awakeable answers included) must carry a signature `key` made over its question's
    /// digest, its decision and its expiry ([`Answer::signed`](crate::approval::Answer::signed)).
    /// An unsigned or badly signed answer is refused like an answer for another question: a
    /// [`PersonAsked`](crate::Event::PersonAsked) event answered `refused`, a warning, and the
    /// call is asked again. Answers an approver decides itself, in code, are not checked.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::Agent;
    /// use agent_errors::approval::AnswerKey;
    /// use agent_errors::testing::ScriptedModel;
    ///
    /// let key = AnswerKey::new([42u8; 32])?;
    /// let agent = Agent::builder("payments")
    ///     .model(ScriptedModel::new().text("nothing to do"))
    ///     .answer_key(key)
    ///     .build();
    /// assert!(agent.is_ok());
    /// # Ok::<(), agent_errors::approval::AnswerError>(())
    /// ```
    pub fn answer_key(mut self, key: AnswerKey) -> Self {
        self.approvals.key = Some(key);
        self
    }

    /// Calls for which `rule` answers true need a person's approval before they run, whatever
    /// their tool: the agent-wide rule beside each tool's own
    /// [`requires_approval`](ToolDef::requires_approval).
    ///
    /// ```
    /// use agent_errors::{Agent, ToolCall};
    /// use agent_errors::testing::ScriptedModel;
    ///
    /// let agent = Agent::builder("clerk")
    ///     .model(ScriptedModel::new().text("done"))
    ///     // Every call whose name starts with `delete_` waits for a person...
    ///     .require_approval(|call: &ToolCall| call.name.starts_with("delete_"))
    ///     // ...who answers later: the run waits from its checkpoint. (Without an approver or a
    ///     // checkpoint store nobody could ever answer, and `build` says so.)
    ///     .checkpoints(agent_errors::checkpoint::MemoryCheckpoints::new())
    ///     .build();
    /// assert!(agent.is_ok());
    /// ```
    #[must_use]
    pub fn require_approval(
        mut self,
        rule: impl Fn(&ToolCall) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.approvals.rule = Some(Arc::new(rule));
        self
    }

    /// Instructions sent first in every run.
    #[must_use]
    pub fn system_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.system_prompt = Some(prompt.into());
        self
    }

    /// Offers the built-in `escalate(reason, severity)` tool to the model.
    ///
    /// In an agent used as a fixer ([`Agent::into_fixer`](crate::Agent::into_fixer)) a call becomes
    /// `FixerError::Escalate` and the reason goes back to the parent model. A top-level agent has
    /// no parent, so its run ends with `RunError::Escalated` carrying the reason.
    #[must_use]
    pub fn enable_escalate(mut self) -> Self {
        self.builtins.escalate = true;
        self
    }

    /// Offers the built-in `throw_exception(reason)` tool to the model.
    #[must_use]
    pub fn enable_throw_exception(mut self) -> Self {
        self.builtins.throw_exception = true;
        self
    }

    /// Offers both built-in tools.
    #[must_use]
    pub fn enable_builtin_tools(self) -> Self {
        self.enable_escalate().enable_throw_exception()
    }

    /// Bounds on recovery work per call.
    #[must_use]
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Caps each run's usage: model requests, tokens, tool calls (per run, per turn, per tool)
    /// and cost. By default only a turn's tool calls are capped
    /// ([`DEFAULT_MAX_TOOL_CALLS_PER_TURN`](crate::run::DEFAULT_MAX_TOOL_CALLS_PER_TURN)); a
    /// run's [`RunOptions::usage_limits`](crate::RunOptions::usage_limits) replaces these.
    ///
    /// ```
    /// use agent_errors::Agent;
    /// use agent_errors::run::UsageLimits;
    /// use agent_errors::testing::ScriptedModel;
    ///
    /// let agent = Agent::builder("capped")
    ///     .model(ScriptedModel::new().text("hi"))
    ///     .usage_limits(UsageLimits::new().max_requests(5).max_total_tokens(20_000))
    ///     .build()
    ///     .unwrap();
    /// # let _ = agent;
    /// ```
    #[must_use]
    pub fn usage_limits(mut self, limits: UsageLimits) -> Self {
        self.usage_limits = limits;
        self
    }

    /// Makes every run durable: its state is saved to `store` after each model turn (before any
    /// tool of that turn runs) and after each tool result, so [`Agent::resume`](super::Agent::resume) can go on with it
    /// in another process after this one dies. See [`checkpoint`](crate::checkpoint).
    #[must_use]
    pub fn checkpoints(self, store: impl CheckpointStore) -> Self {
        self.shared_checkpoints(Arc::new(store))
    }

    /// Like [`checkpoints`](AgentBuilder::checkpoints), with a store already shared.
    #[must_use]
    pub fn shared_checkpoints(mut self, store: Arc<dyn CheckpointStore>) -> Self {
        self.checkpoints = Some(store);
        self
    }

    /// The most steps a durable run appends to its journal between two snapshots of its whole
    /// state (at least 1; unbounded unless set).
    ///
    /// Without a bound, a run writes a snapshot when the steps appended since the last one would
    /// outgrow it: the snapshots come further apart as the state grows, they write about as much
    /// as the journal itself, and a save costs the same whether the run is short or long. A
    /// resume reads the latest snapshot and records no bigger than it together.
    ///
    /// A bound also caps how many records a resume reads, but once the state outgrows that many
    /// steps the run snapshots more often than it needs to: the bytes written per call grow
    /// with the run again. Set one only when a resume must read few records, and the runs are
    /// short. A store that keeps no journal is sent a snapshot at every save whatever this is.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::Agent;
    /// use agent_errors::checkpoint::MemoryCheckpoints;
    /// use agent_errors::testing::ScriptedModel;
    ///
    /// let agent = Agent::builder("a")
    ///     .model(ScriptedModel::new())
    ///     .checkpoints(MemoryCheckpoints::new())
    ///     .snapshot_every(64)
    ///     .build();
    /// assert!(agent.is_ok());
    /// ```
    #[must_use]
    pub fn snapshot_every(mut self, steps: u32) -> Self {
        self.snapshot_every = Some(steps.max(1));
        self
    }

    /// Who waits for this agent's model calls (the main agent by default).
    #[must_use]
    pub fn call_source(mut self, source: CallSource) -> Self {
        self.source = source;
        self
    }

    /// Sampling, tool choice and output format for every model request of this agent's runs.
    /// A fixer agent ([`Agent::into_fixer`](crate::Agent::into_fixer)) sends its own options,
    /// not those of the agent it repairs calls for.
    ///
    /// Without a `response_format` here, the output type's
    /// [`AgentOutput::response_format`] applies: a [`Json<T>`](crate::run::Json) agent asks for `T`'s
    /// schema.
    ///
    /// ```
    /// use agent_errors::{Agent, llm::{RequestOptions, ToolChoice}};
    /// use agent_errors::testing::ScriptedModel;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let model = ScriptedModel::new().text("hi");
    /// let agent = Agent::builder("greeter")
    ///     .model(model.clone())
    ///     .request_options(RequestOptions::new().temperature(0.0).seed(42))
    ///     .build()?;
    /// agent.run("say hi").await?;
    /// assert_eq!(model.last_request().expect("asked once").options.seed, Some(42));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn request_options(mut self, options: RequestOptions) -> Self {
        self.options = options;
        self
    }
}
