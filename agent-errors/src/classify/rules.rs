//! Classification rules users register for their own error types.

use std::error::Error;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use super::ErrorKind;

type RuleFn = dyn Fn(&(dyn Error + 'static)) -> Option<ErrorKind> + Send + Sync;

/// One rule: a downcast to the user's type, then the user's verdict on it.
#[derive(Clone)]
pub(super) struct Rule(Arc<RuleFn>);

impl Rule {
    pub(super) fn new<E, F>(rule: F) -> Self
    where
        E: Error + 'static,
        F: Fn(&E) -> Option<ErrorKind> + Send + Sync + 'static,
    {
        Rule(Arc::new(move |level: &(dyn Error + 'static)| {
            level.downcast_ref::<E>().and_then(&rule)
        }))
    }

    /// The rule's verdict on `level`; a rule that panics calls it a bug (of the rule, and the
    /// failure is not retried on its word) rather than unwinding through the caller.
    pub(super) fn apply(&self, level: &(dyn Error + 'static)) -> Option<ErrorKind> {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (self.0)(level)))
            .unwrap_or(Some(ErrorKind::Bug))
    }
}

impl fmt::Debug for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Rule")
    }
}

// Classifying must stay cheap when nobody registered anything: one relaxed-enough load, no lock.
static ANY_REGISTERED: AtomicBool = AtomicBool::new(false);
static REGISTERED: RwLock<Option<Arc<[Rule]>>> = RwLock::new(None);

pub(super) fn push(rule: Rule) {
    let mut registered = REGISTERED.write().unwrap_or_else(PoisonError::into_inner);
    let mut rules: Vec<Rule> = registered
        .as_deref()
        .map(<[Rule]>::to_vec)
        .unwrap_or_default();
    rules.push(rule);
    *registered = Some(rules.into());
    ANY_REGISTERED.store(true, Ordering::Release);
}

/// The registered rules, if any. A snapshot: rules run without the lock held, so a rule that
/// registers another rule cannot deadlock.
pub(super) fn snapshot() -> Option<Arc<[Rule]>> {
    if !ANY_REGISTERED.load(Ordering::Acquire) {
        return None;
    }
    REGISTERED
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}
