//! What a run calls out to around its tool calls: the service breaker, the shared retry budget,
//! the permission hook, the classifier, the recorder of a durable run, the journal of a run on a
//! durable-execution engine, and who answers calls that need a person.

use std::sync::{Arc, OnceLock};

use crate::breaker::ServiceBreaker;
use crate::budget::RetryBudget;
use crate::classify::Classifier;
use crate::journal::RunJournal;

use super::super::permission::PermissionHook;
use super::super::record::CallRecorder;
use super::approvals::Approvals;

/// The run's hooks; each is absent (or a no-op) unless the run was given one.
pub(crate) struct Hooks {
    pub(super) service: Option<Arc<ServiceBreaker>>,
    pub(super) retry_budget: Option<Arc<RetryBudget>>,
    pub(super) permission: Option<Arc<dyn PermissionHook>>,
    /// Set by the caller, or taken from the registry on the first call.
    pub(super) classifier: OnceLock<Arc<Classifier>>,
    /// Where a durable run records how its calls get on; records nothing when not durable.
    pub(super) recorder: Arc<dyn CallRecorder>,
    /// The engine journal a run on a durable-execution engine steps through, when it has one.
    pub(super) journal: Option<RunJournal>,
    /// Who answers calls that need a person, when anyone can.
    pub(super) approvals: Option<Arc<Approvals>>,
}

impl Hooks {
    pub(crate) fn service_breaker(&self) -> Option<&ServiceBreaker> {
        self.service.as_deref()
    }

    pub(crate) fn retry_budget(&self) -> Option<&RetryBudget> {
        self.retry_budget.as_deref()
    }

    pub(crate) fn permission(&self) -> Option<&dyn PermissionHook> {
        self.permission.as_deref()
    }

    pub(crate) fn classifier(&self) -> Option<&Classifier> {
        self.classifier.get().map(Arc::as_ref)
    }

    /// Uses the registry's classifier unless the run already has one.
    pub(crate) fn adopt_classifier(&self, classifier: Option<&Arc<Classifier>>) {
        if let (None, Some(classifier)) = (self.classifier.get(), classifier) {
            let _ = self.classifier.set(Arc::clone(classifier));
        }
    }

    /// Where this run records how its calls get on.
    pub(crate) fn recorder(&self) -> &dyn CallRecorder {
        &*self.recorder
    }
}
