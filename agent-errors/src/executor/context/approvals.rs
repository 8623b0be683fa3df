//! Who answers a run's calls that need a person, which calls need one beyond their tools' own
//! rule, and the answers the run was given.

use std::sync::Arc;

use crate::approval::{ApprovalRule, Approver, Decision};

/// Who answers the calls of an agent's runs that need a person, which calls need one beyond
/// their tools' own rule, and the answers a run was given.
#[derive(Clone, Default)]
pub(crate) struct Approvals {
    pub(crate) approver: Option<Arc<dyn Approver>>,
    pub(crate) rule: Option<Arc<ApprovalRule>>,
    /// A person's answers given to one run, by call id.
    pub(crate) answers: Vec<(String, Decision)>,
}

impl Approvals {
    /// The approvals of one run given `answers`; `None` when there is nothing to ask or answer
    /// with, so a run without a person in the loop carries nothing.
    pub(crate) fn for_run(&self, answers: Vec<(String, Decision)>) -> Option<Arc<Approvals>> {
        if answers.is_empty() && self.approver.is_none() && self.rule.is_none() {
            return None;
        }
        Some(Arc::new(Approvals {
            approver: self.approver.clone(),
            rule: self.rule.clone(),
            answers,
        }))
    }
}
