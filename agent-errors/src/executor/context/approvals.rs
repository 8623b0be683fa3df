//! Who answers a run's calls that need a person, which calls need one beyond their tools' own
//! rule, and the answers the run was given.

use std::sync::Arc;

use crate::approval::{AnswerClock, AnswerKey, ApprovalRule, Approver, GivenAnswer, Taken};

/// Who answers the calls of an agent's runs that need a person, which calls need one beyond
/// their tools' own rule, and the answers a run was given.
#[derive(Clone, Default)]
pub(crate) struct Approvals {
    pub(crate) approver: Option<Arc<dyn Approver>>,
    pub(crate) rule: Option<Arc<ApprovalRule>>,
    /// The key every answer given to a run must be signed with, when the agent has one.
    pub(crate) key: Option<AnswerKey>,
    /// A person's answers given to one run, each bound to its question and used once.
    pub(crate) answers: Vec<GivenAnswer>,
    /// The run's wall clock, which answers' expiry is read against.
    pub(crate) clock: AnswerClock,
    /// The answers an approver relayed and the run took, each once.
    pub(crate) taken: Arc<Taken>,
}

impl Approvals {
    /// The approvals of one run given `answers`; `None` when there is nothing to ask or answer
    /// with, so a run without a person in the loop carries nothing.
    pub(crate) fn for_run(&self, answers: Vec<GivenAnswer>) -> Option<Arc<Approvals>> {
        if answers.is_empty() && self.approver.is_none() && self.rule.is_none() {
            return None;
        }
        Some(Arc::new(Approvals {
            approver: self.approver.clone(),
            rule: self.rule.clone(),
            key: self.key.clone(),
            answers,
            clock: AnswerClock::start(),
            taken: Arc::default(),
        }))
    }
}
