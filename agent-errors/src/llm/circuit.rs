//! A circuit per model, for the wrappers that fall back: once a model failed for good, the next
//! requests go straight to the next model, until a probe after the cooldown finds it well.
//!
//! The circuits are a [`ServiceBreaker`]'s, keyed by the model's name: in this process by
//! default, or in a store a fleet shares (Redis) when the breaker given says so.

use std::sync::Arc;
use std::time::Duration;

use crate::breaker::{Admission, ServiceBreaker};

/// How long a model's circuit stays open by default before a probe may ask it again.
pub(crate) const DEFAULT_COOLDOWN: Duration = Duration::from_secs(30);

/// The key of a model's circuit: its name, apart from the tools' keys of a shared breaker.
pub(crate) fn circuit_key(model: &str) -> String {
    format!("model:{model}")
}

/// The circuits of the models a wrapper falls back between.
#[derive(Debug, Clone)]
pub(crate) struct ModelCircuits {
    breaker: Arc<ServiceBreaker>,
}

impl Default for ModelCircuits {
    /// In this process: open after one request the model failed for good, a probe after
    /// [`DEFAULT_COOLDOWN`].
    fn default() -> Self {
        let breaker = ServiceBreaker::new(1, DEFAULT_COOLDOWN).expect("1 and 30 s are in range");
        ModelCircuits {
            breaker: Arc::new(breaker),
        }
    }
}

/// Whether a model may be asked now.
pub(crate) enum Asked<'a> {
    /// Its circuit is closed.
    Yes,
    /// Its circuit was open and cooled down: this request is the probe, asked once.
    Probe(ProbeHeld<'a>),
    /// Its circuit is open: not asked.
    No,
}

impl ModelCircuits {
    /// Circuits kept by `breaker`.
    pub(crate) fn new(breaker: Arc<ServiceBreaker>) -> Self {
        ModelCircuits { breaker }
    }

    /// May the model whose circuit `key` names be asked now?
    pub(crate) async fn ask<'a>(&'a self, key: &'a str) -> Asked<'a> {
        match self.breaker.admit(key).await {
            Admission::Allowed => Asked::Yes,
            Admission::Rejected => Asked::No,
            Admission::Probe => Asked::Probe(ProbeHeld {
                breaker: &self.breaker,
                key,
                recorded: false,
            }),
        }
    }

    /// How an admitted request went: `well` when the model answered (or failed in a way that
    /// says nothing of its health), false when it failed for good.
    pub(crate) fn record(&self, key: &str, well: bool) {
        self.breaker.record(key, well);
    }
}

/// A half-open circuit's probe, held until its outcome is recorded; dropped unrecorded (the
/// request was cancelled), it is given back so a later request may probe.
pub(crate) struct ProbeHeld<'a> {
    breaker: &'a ServiceBreaker,
    key: &'a str,
    recorded: bool,
}

impl ProbeHeld<'_> {
    /// Records the probe's outcome.
    pub(crate) fn record(mut self, well: bool) {
        self.recorded = true;
        self.breaker.record(self.key, well);
    }
}

impl Drop for ProbeHeld<'_> {
    fn drop(&mut self) {
        if !self.recorded {
            self.breaker.release_probe(self.key);
        }
    }
}
