//! A person in the loop: calls that wait for a person's answer before their tool runs, and the
//! [`Approver`] a run asks for that answer.
//!
//! A call needs a person when its tool requires approval
//! ([`ToolDef::requires_approval`](crate::ToolDef::requires_approval), `#[tool(approval =
//! required)]`), when the agent's rule says so
//! ([`AgentBuilder::require_approval`](crate::AgentBuilder::require_approval)), or when its
//! policy hands a failure to a person (the `ask_person` action). The run asks its approver,
//! which answers now ([`Decision::Approve`], [`Decision::ApproveWith`] edited arguments,
//! [`Decision::Deny`]) or later ([`Decision::Later`]).
//!
//! An approved argument set passes the same checks as any other before the tool body gets it
//! (the tool is available, no key is given twice, the permission hook allows it). A denial is
//! counted like a permission denial and the model is told; the tool never runs.
//!
//! An answer is bound to its question: [`RunOptions::answer_to`](crate::RunOptions::answer_to)
//! names a [`PendingApproval`] by its [`digest`](PendingApproval::digest) (the tool, the whole
//! arguments it would receive and why it asks), and is used once. A later call that reuses the
//! call id with other arguments, another tool or another reason is asked again; the answer is
//! refused for it, reported as a [`PersonAsked`](crate::events::Event::PersonAsked) event
//! answered `refused`.
//!
//! A person sees what they approve: [`PendingApproval::arguments`] is the whole argument set as
//! the tool receives it, character for character, up to [`MAX_SHOWN_CHARS`], with two
//! exceptions the question owns up to. A character a screen shows as nothing or that moves
//! text (zero-width, bidirectional controls, control characters, whitespace other than a space,
//! tab or line break) is written as its escape, `\u{200d}`, and a value that looks like a
//! secret as `[REDACTED]`: either sets [`PendingApproval::arguments_altered`]. A longer set is
//! shown cut, and the question says so ([`PendingApproval::arguments_cut`]). A plain
//! [`Decision::Approve`] of a question that is cut or altered is refused (the call is denied):
//! running what a person could not read as it is takes [`Decision::ApproveUnseen`], or
//! [`Decision::ApproveWith`] of the whole arguments.
//!
//! "Later" holds no process: a checkpointed run ends with
//! [`RunError::WaitingForPerson`](crate::RunError::WaitingForPerson), naming the calls that wait,
//! and [`Agent::resume`](crate::Agent::resume) with the answers
//! ([`RunOptions::answer`](crate::RunOptions::answer)) goes on with it, in this process or
//! another. Nothing is spent while it waits: the retries the run had spent stay spent, and no
//! more are drawn.

use std::fmt;

use std::sync::atomic::{AtomicBool, Ordering};

mod answer;
mod digest;
mod ledger;
mod shown;
mod token;

pub use answer::{Answer, AnswerError, AnswerKey, MAX_ANSWER_BYTES};
pub(crate) use answer::{AnswerClock, OTHER_QUESTION, Taken, Verdict, judge};
use digest::digest;
pub(crate) use shown::{Shown, shown};

use serde::{Deserialize, Serialize};

use crate::chat::ToolCall;
use crate::classify::ErrorKind;
use crate::error::BoxFuture;
use crate::escapes::Visible;
use crate::events::{Event, EventLog};
use crate::extensions::Extensions;

/// A person's answer to a call that waits for one.
///
/// # Examples
///
/// ```
/// use agent_errors::approval::Decision;
///
/// fn describe(decision: &Decision) -> String {
///     match decision {
///         Decision::Approve => "run it as the model wrote it".into(),
///         Decision::ApproveWith(arguments) => format!("run it with {arguments}"),
///         Decision::ApproveUnseen => "run it, though I was shown it cut".into(),
///         Decision::Deny(reason) => format!("do not run it: {reason}"),
///         Decision::Later => "nobody has answered yet".into(),
///         Decision::Expired => "the answer came too late".into(),
///         _ => "something newer".into(),
///     }
/// }
///
/// assert_eq!(describe(&Decision::Deny("too much".into())), "do not run it: too much");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Decision {
    /// Run the call with its arguments as they are.
    Approve,
    /// Run the call with its arguments as they are, though the question did not show them
    /// character for character: cut ([`PendingApproval::arguments_cut`]) or altered
    /// ([`PendingApproval::arguments_altered`], a value redacted or a character escaped). The
    /// only approval such a question takes; on a question shown whole it is
    /// [`Decision::Approve`].
    ApproveUnseen,
    /// Run the call with these arguments (JSON text) instead: a person edited them. They pass
    /// the same checks as the model's would, the permission hook included.
    ApproveWith(String),
    /// Do not run the call; the reason goes to the model, and the denial is counted like a
    /// permission denial.
    Deny(String),
    /// Nobody has answered yet: the run waits without holding a process (a checkpointed run
    /// ends with [`RunError::WaitingForPerson`](crate::RunError::WaitingForPerson)).
    Later,
    /// The person's answer expired before the run reached the call ([`Answer::expires_at`]):
    /// the call does not run, and the model is told the approval expired, in other words than
    /// a denial (and not counted as one), so it can ask again or tell the user. What a run
    /// makes of an expired answer it was given, and what an approver relaying answers returns
    /// for one ([`ApprovalContext::accept`] does).
    Expired,
}

/// Why a call waits for a person.
///
/// # Examples
///
/// ```
/// use agent_errors::approval::WaitReason;
///
/// fn headline(reason: &WaitReason) -> String {
///     match reason {
///         WaitReason::ApprovalRequired => "needs your approval".into(),
///         WaitReason::Failure { kind, message } => format!("failed ({kind}): {message}"),
///         _ => "needs you".into(),
///     }
/// }
///
/// assert_eq!(headline(&WaitReason::ApprovalRequired), "needs your approval");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum WaitReason {
    /// The tool (or the agent's rule) requires a person's approval before it runs.
    ApprovalRequired,
    /// The call failed and its policy handed the failure to a person (`ask_person`): approving
    /// calls the tool again (with edited arguments, if given), denying tells the model.
    Failure {
        /// The failure's kind.
        kind: ErrorKind,
        /// Its message, redacted and bounded.
        message: String,
    },
}

/// A call waiting for a person: what an [`Approver`] is asked about, and what
/// [`RunError::WaitingForPerson`](crate::RunError::WaitingForPerson) names.
///
/// # Examples
///
/// ```
/// use agent_errors::approval::{PendingApproval, WaitReason};
///
/// let pending = PendingApproval::new("call-1", "transfer", r#"{"amount": 900}"#, WaitReason::ApprovalRequired);
/// assert_eq!(pending.tool, "transfer");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PendingApproval {
    /// The call's id, as the provider or the model wrote it (ids repeat: an answer is bound to
    /// [`digest`](Self::digest), not to this).
    pub call_id: String,
    /// The tool it calls.
    pub tool: String,
    /// Its arguments as shown to a person: the whole set as the tool receives it, up to
    /// [`MAX_SHOWN_CHARS`] characters, past that cut ([`arguments_cut`](Self::arguments_cut)),
    /// with invisible and text-moving characters escaped (`\u{200d}`) and values that look
    /// like secrets redacted ([`arguments_altered`](Self::arguments_altered)).
    /// Approving runs the call with its own arguments; to change them, answer
    /// [`Decision::ApproveWith`].
    pub arguments: String,
    /// Whether [`arguments`](Self::arguments) is cut: a plain [`Decision::Approve`] is then
    /// refused (the call is denied), and only [`Decision::ApproveUnseen`] runs the call as it
    /// is, or [`Decision::ApproveWith`] its whole arguments as an edit.
    #[serde(default)]
    pub arguments_cut: bool,
    /// Whether [`arguments`](Self::arguments) differs from what the tool receives in the part
    /// shown: a value that looks like a secret is shown as `[REDACTED]`, or a character a
    /// screen would not show is written as its escape (`\u{200d}` for a zero-width joiner). A
    /// plain [`Decision::Approve`] is then refused (the call is denied), as for a cut question:
    /// [`Decision::ApproveUnseen`] runs the call as it is, [`Decision::ApproveWith`] runs the
    /// arguments a person wrote.
    #[serde(default)]
    pub arguments_altered: bool,
    /// Why it waits.
    pub reason: WaitReason,
    /// What the question is: a SHA-256 (hex) of the tool, the whole arguments it would receive
    /// and the reason. An answer given with
    /// [`RunOptions::answer_to`](crate::RunOptions::answer_to) is used only for a call whose
    /// question has this digest. Empty for a question saved before digests existed.
    #[serde(default)]
    pub digest: String,
}

/// A call whose person's answer had expired when the run reached it: it did not run
/// ([`RunOutcome::expired_approvals`](crate::RunOutcome::expired_approvals)).
///
/// # Examples
///
/// ```
/// use agent_errors::approval::ExpiredApproval;
///
/// fn line(expired: &ExpiredApproval) -> String {
///     format!("your approval of `{}` ({}) expired: approve it again", expired.tool, expired.call_id)
/// }
/// # let _ = line;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExpiredApproval {
    /// The call's id.
    pub call_id: String,
    /// The tool it calls.
    pub tool: String,
    /// The digest of its question ([`PendingApproval::digest`], [`Answer::digest`]).
    pub digest: String,
}

/// The most characters of a call's arguments a [`PendingApproval`] shows; a longer argument set
/// is shown cut, and the question says so.
///
/// # Examples
///
/// ```
/// assert!(agent_errors::approval::MAX_SHOWN_CHARS >= 64 * 1024);
/// ```
pub const MAX_SHOWN_CHARS: usize = 64 * 1024;

impl PendingApproval {
    /// A pending call shown whole: for an [`Approver`] of your own to be tested with.
    pub fn new(
        call_id: impl Into<String>,
        tool: impl Into<String>,
        arguments: impl Into<String>,
        reason: WaitReason,
    ) -> Self {
        let (tool, arguments) = (tool.into(), arguments.into());
        let digest = digest(&tool, &arguments, &reason);
        PendingApproval {
            call_id: call_id.into(),
            tool,
            arguments,
            arguments_cut: false,
            arguments_altered: false,
            reason,
            digest,
        }
    }

    /// The question for a call sending `sent` to `tool`, shown as `shown`: the digest covers
    /// what the tool would receive, not what was shown.
    pub(crate) fn asked(
        call_id: &str,
        tool: &str,
        sent: &str,
        shown: Shown,
        reason: WaitReason,
    ) -> Self {
        PendingApproval {
            call_id: call_id.to_owned(),
            tool: tool.to_owned(),
            arguments: shown.text,
            arguments_cut: shown.cut,
            arguments_altered: shown.altered,
            digest: digest(tool, sent, &reason),
            reason,
        }
    }
}

/// An answer given to a run: for the question with its digest when it names one, else for the
/// question the run saved under its call id; used once.
#[derive(Debug)]
pub(crate) struct GivenAnswer {
    pub(crate) answer: Answer,
    used: AtomicBool,
}

impl GivenAnswer {
    pub(crate) fn new(answer: Answer) -> Self {
        GivenAnswer {
            answer,
            used: AtomicBool::new(false),
        }
    }

    /// An answer by call id alone, for the question the run saved under it.
    pub(crate) fn by_call_id(call_id: String, decision: Decision) -> Self {
        GivenAnswer::new(Answer::by_call_id(call_id, decision))
    }

    /// Takes the answer for its one use: false when it was used already.
    pub(crate) fn take(&self) -> bool {
        !self.used.swap(true, Ordering::AcqRel)
    }

    /// Whether it was used.
    pub(crate) fn is_used(&self) -> bool {
        self.used.load(Ordering::Acquire)
    }
}

impl Clone for GivenAnswer {
    fn clone(&self) -> Self {
        GivenAnswer {
            answer: self.answer.clone(),
            used: AtomicBool::new(self.is_used()),
        }
    }
}

impl fmt::Display for PendingApproval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}` (call {})", self.tool, self.call_id)
    }
}

/// What an [`Approver`] knows about the run asking.
///
/// # Examples
///
/// ```
/// use agent_errors::approval::{ApprovalContext, Approver, Decision, PendingApproval};
/// use agent_errors::call::BoxFuture;
///
/// /// Who is asking, as the run was given it with `RunOptions::context`.
/// struct Role(&'static str);
///
/// /// Managers approve their own calls; everyone else's wait for one.
/// struct Managers;
///
/// impl Approver for Managers {
///     fn decide<'a>(
///         &'a self,
///         _pending: &'a PendingApproval,
///         run: ApprovalContext<'a>,
///     ) -> BoxFuture<'a, Decision> {
///         let decision = match run.extensions().get::<Role>() {
///             Some(Role("manager")) => Decision::Approve,
///             _ => Decision::Later,
///         };
///         Box::pin(async move { decision })
///     }
/// }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ApprovalContext<'a> {
    pub(crate) run_id: Option<&'a str>,
    pub(crate) extensions: &'a Extensions,
    /// The key answers must be signed with, when the agent has one.
    pub(crate) key: Option<&'a AnswerKey>,
    /// The run's wall clock, for answers' expiry.
    pub(crate) clock: &'a AnswerClock,
    /// The run's events, for an answer refused.
    pub(crate) events: &'a EventLog,
    /// The answers taken so far, each once.
    pub(crate) taken: &'a Taken,
}

impl ApprovalContext<'_> {
    /// The run's id, when it has one (every agent run does): with the call's id, a key that
    /// names this question across processes and restarts.
    pub fn run_id(&self) -> Option<&str> {
        self.run_id
    }

    /// The values the run was given ([`RunOptions::context`](crate::RunOptions::context)).
    pub fn extensions(&self) -> &Extensions {
        self.extensions
    }

    /// Checks `answer`, which a person sent for `pending` through a channel of the approver's
    /// (a queue, a chat, a webhook), as the run checks an answer it is given: it must name
    /// `pending`'s digest, be signed with the agent's
    /// [answer key](crate::AgentBuilder::answer_key) when it has one, not have expired, and not
    /// have been taken before in this run (a copy delivered again is refused). Gives the
    /// decision to return ([`Decision::Expired`] for an expired answer), or `None`
    /// for an answer refused (for another question, unsigned or badly signed, used), which is
    /// reported as a [`PersonAsked`](crate::Event::PersonAsked) event answered `refused` and a
    /// warning: ask the person again.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_errors::approval::{Answer, ApprovalContext, Approver, Decision, PendingApproval};
    /// use agent_errors::call::BoxFuture;
    ///
    /// /// Answers arrive as text from a web form the user's browser posts.
    /// struct FromForm(tokio::sync::Mutex<tokio::sync::mpsc::Receiver<String>>);
    ///
    /// impl Approver for FromForm {
    ///     fn decide<'a>(&'a self, pending: &'a PendingApproval, run: ApprovalContext<'a>) -> BoxFuture<'a, Decision> {
    ///         Box::pin(async move {
    ///             while let Some(text) = self.0.lock().await.recv().await {
    ///                 let Ok(answer) = Answer::from_token(&text) else { continue };
    ///                 if let Some(decision) = run.accept(pending, &answer) {
    ///                     return decision;
    ///                 }
    ///             }
    ///             Decision::Later
    ///         })
    ///     }
    /// }
    /// ```
    pub fn accept(&self, pending: &PendingApproval, answer: &Answer) -> Option<Decision> {
        let question = (&*pending.call_id, &*pending.digest);
        let verdict = match judge(answer, question, self.key, self.clock.now()) {
            Verdict::Refused(why) => Verdict::Refused(why),
            _ if !self.taken.first_use(answer) => Verdict::Refused(answer::USED),
            verdict => verdict,
        };
        match verdict {
            Verdict::Use(decision) => Some(decision),
            Verdict::Expired => Some(Decision::Expired),
            Verdict::Refused(why) => {
                refused(self.events, pending, why);
                None
            }
        }
    }
}

/// Reports an answer refused for `pending` (`why` says why), which is asked again.
pub(crate) fn refused(events: &EventLog, pending: &PendingApproval, why: &str) {
    tracing::warn!(
        tool = %Visible::of(&pending.tool),
        call_id = %Visible::of(&pending.call_id),
        "an answer given for call {} {why}: refused, the call is asked again",
        Visible::of(&pending.call_id),
    );
    let tool = pending.tool.clone();
    events.emit(Event::PersonAsked {
        tool,
        answer: "refused",
    });
}

/// Asked when a call needs a person: answers now, or [`Decision::Later`].
///
/// Any `Fn(&PendingApproval) -> Decision` is one (a policy written in code, a test). An approver
/// that waits for a person inside the run (a chat message, a durable engine's promise) returns
/// a future that completes with the answer; one that cannot wait answers
/// [`Decision::Later`], and a checkpointed run then ends until it is resumed with the answer.
/// A run with no approver answers every such call `Later`. An approver that panics has denied
/// the call.
///
/// # Examples
///
/// ```
/// use agent_errors::approval::{ApprovalContext, Approver, Decision, PendingApproval};
/// use agent_errors::call::BoxFuture;
///
/// /// Small transfers go through; the rest wait for a person.
/// struct SmallOnly;
///
/// impl Approver for SmallOnly {
///     fn decide<'a>(
///         &'a self,
///         pending: &'a PendingApproval,
///         _run: ApprovalContext<'a>,
///     ) -> BoxFuture<'a, Decision> {
///         Box::pin(async move {
///             let args: serde_json::Value =
///                 serde_json::from_str(&pending.arguments).unwrap_or_default();
///             match args["amount"].as_u64() {
///                 Some(amount) if amount <= 100 => Decision::Approve,
///                 _ => Decision::Later,
///             }
///         })
///     }
/// }
/// ```
pub trait Approver: Send + Sync + 'static {
    /// The answer for `pending`, a call of the run `run` describes.
    fn decide<'a>(
        &'a self,
        pending: &'a PendingApproval,
        run: ApprovalContext<'a>,
    ) -> BoxFuture<'a, Decision>;
}

impl<F> Approver for F
where
    F: Fn(&PendingApproval) -> Decision + Send + Sync + 'static,
{
    fn decide<'a>(
        &'a self,
        pending: &'a PendingApproval,
        _: ApprovalContext<'a>,
    ) -> BoxFuture<'a, Decision> {
        // Answered inside the future, so a closure that panics is caught with the future.
        Box::pin(async move { self(pending) })
    }
}

/// Which calls need a person before their tool runs, beyond the tools that require it: the
/// agent's rule ([`AgentBuilder::require_approval`](crate::AgentBuilder::require_approval)).
pub(crate) type ApprovalRule = dyn Fn(&ToolCall) -> bool + Send + Sync + 'static;
