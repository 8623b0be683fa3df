//! What a model wrapper remembers of a model it falls back from: a circuit kept in a
//! [`ServiceBreaker`], so that while the model keeps failing, requests go straight to the
//! fallback without a call or a backoff spent on it.

use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::breaker::{Admission, BreakerState, Change, MemoryStore, ServiceBreaker};
use crate::classify::ErrorKind;
use crate::events::Event;

/// How long a primary's circuit stays open before one probe call goes to it.
pub(crate) const DEFAULT_COOLDOWN: Duration = Duration::from_secs(30);

/// The circuit on one model, under the key `model:<name>` of its breaker (so a breaker shared
/// with tools keeps it apart from theirs).
#[derive(Debug)]
pub(crate) struct ModelCircuit {
    breaker: Arc<ServiceBreaker>,
    key: String,
    model: String,
    /// The kind of the last failure this process counted, named when a request skips the
    /// model; `unknown` until then (another process of a fleet opened it).
    last_kind: Mutex<ErrorKind>,
}

/// Whether a request may call the model, as its circuit says.
#[derive(Debug)]
pub(crate) enum Pass<'a> {
    /// Closed: call it.
    Closed,
    /// Half-open: this request's first call is the one probe. Dropped unrecorded (the call was
    /// cancelled), the probe is given back.
    Probe(Probe<'a>),
    /// Open: go to the fallback; the kind of the failure that opened it.
    Open(ErrorKind),
}

/// A half-open probe held by a request until its outcome is recorded.
#[derive(Debug)]
pub(crate) struct Probe<'a> {
    circuit: &'a ModelCircuit,
    recorded: bool,
}

impl Drop for Probe<'_> {
    fn drop(&mut self) {
        if !self.recorded {
            self.circuit.breaker.release_probe(&self.circuit.key);
        }
    }
}

impl ModelCircuit {
    /// A circuit in this process's memory: opens after `threshold` failures in a row, lets a
    /// probe through after `cooldown`.
    pub(crate) fn local(model: &str, threshold: NonZeroU32, cooldown: Duration) -> Self {
        let store = MemoryStore::new(threshold, cooldown);
        ModelCircuit::in_breaker(model, Arc::new(ServiceBreaker::with_store(store)))
    }

    /// A circuit kept in `breaker` (its store's threshold and cooldown), shared with whatever
    /// else uses it: other wrappers, other processes of a fleet.
    pub(crate) fn in_breaker(model: &str, breaker: Arc<ServiceBreaker>) -> Self {
        ModelCircuit {
            breaker,
            key: format!("model:{model}"),
            model: model.to_owned(),
            last_kind: Mutex::new(ErrorKind::Unknown),
        }
    }

    /// Asks whether a request may call the model now; a probe taken is announced on `emit`.
    pub(crate) async fn admit(&self, emit: impl FnOnce(Event)) -> Pass<'_> {
        match self.breaker.admit(&self.key).await {
            Admission::Allowed => Pass::Closed,
            Admission::Probe => {
                emit(self.event(BreakerState::HalfOpen));
                Pass::Probe(Probe {
                    circuit: self,
                    recorded: false,
                })
            }
            Admission::Rejected => Pass::Open(*self.lock_kind()),
        }
    }

    /// Records how a call went: `failed` with the kind of a failure that sends requests to the
    /// fallback, `None` when the model answered (an error that is the request's own counts as
    /// an answer). A change of the circuit is announced on `emit`; a probe held is spent.
    pub(crate) fn record(
        &self,
        failed: Option<ErrorKind>,
        probe: Option<Probe<'_>>,
        emit: impl FnOnce(Event),
    ) {
        if let Some(mut probe) = probe {
            probe.recorded = true;
        }
        if let Some(kind) = failed {
            *self.lock_kind() = kind;
        }
        let change = self.breaker.record_change(&self.key, failed.is_none());
        match change {
            Some(Change::Opened) => emit(self.event(BreakerState::Open)),
            Some(Change::Closed) => emit(self.event(BreakerState::Closed)),
            Some(Change::HalfOpened) | None => {}
        }
    }

    /// Whether the circuit is closed now, as the breaker knows without waiting: a request
    /// calls the model again only then.
    pub(crate) fn is_closed(&self) -> bool {
        self.state() == BreakerState::Closed
    }

    /// The circuit's state now, as the breaker knows without waiting.
    pub(crate) fn state(&self) -> BreakerState {
        self.breaker.state(&self.key)
    }

    fn event(&self, state: BreakerState) -> Event {
        Event::LlmCircuit {
            model: self.model.clone(),
            state,
        }
    }

    fn lock_kind(&self) -> std::sync::MutexGuard<'_, ErrorKind> {
        // A write of one `Copy` value: a panic cannot tear it.
        self.last_kind.lock().unwrap_or_else(|p| p.into_inner())
    }
}
