//! What a run calls out to around its tool calls: the service breaker, the shared retry budget,
//! the permission hook, the classifier, the run's journal, and who answers calls that need a
//! person.

use std::sync::{Arc, OnceLock};

use crate::breaker::ServiceBreaker;
use crate::budget::RetryBudget;
use crate::classify::Classifier;

use super::super::journal::Held;
use super::super::permission::PermissionHook;
use super::approvals::Approvals;

/// The run's hooks; each is absent (or a no-op) unless the run was given one.
pub(crate) struct Hooks {
    pub(super) service: Option<Arc<ServiceBreaker>>,
    pub(super) retry_budget: Option<Arc<RetryBudget>>,
    pub(super) permission: Option<Arc<dyn PermissionHook>>,
    /// Set by the caller, or taken from the registry on the first call.
    pub(super) classifier: OnceLock<Arc<Classifier>>,
    /// Where the run records its steps, waits and saves: its checkpoint store's journal, an
    /// engine's, or one that records nothing.
    pub(super) journal: Held,
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

    /// Where this run records its steps, waits and saves.
    pub(crate) fn journal(&self) -> &Held {
        &self.journal
    }
}
