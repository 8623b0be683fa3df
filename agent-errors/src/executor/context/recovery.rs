//! What a run has learnt about its tools: the tools `degrade` dropped, the per-run breaker's
//! counts and trip, the turn being answered, permission denials. Saved with a durable run's
//! checkpoint and restored when it resumes.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};

use serde::{Deserialize, Serialize};

use crate::breaker::{RunBreaker, per_kind_key};
use crate::classify::ErrorKind;
use crate::policy::{OnTrip, RunBreakerRule};

/// What the per-run breaker did when a call's failure tripped it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Trip {
    /// The run stops.
    Stop { failures: u32 },
    /// The tool was taken off the table; the run goes on.
    Removed { failures: u32 },
}

/// The state behind the lock.
#[derive(Debug, Default, Clone)]
struct Learnt {
    degraded: HashSet<String>,
    breaker: RunBreaker,
    tripped: Option<(String, u32)>,
    /// The model turn being answered; 0 outside [`Registry::execute_turn`](crate::Registry).
    turn: u64,
    /// The last turn in which a failure of each tool was counted.
    counted: HashMap<String, u64>,
    /// Permission denials per tool.
    denied: HashMap<String, u32>,
    /// The calls whose outcome is unknown, so that a repeat of one is not run.
    unknown: Vec<UnknownCall>,
}

/// A call of a tool that is not idempotent whose outcome is unknown (it may or may not have
/// taken effect): a later call of the same tool with the same arguments is a repeat of it, and
/// is not run. Saved with the run's recovery state, so the record outlives a crash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct UnknownCall {
    pub(crate) tool: String,
    /// The effect the call asked for: the hash of its tool and arguments as canonical JSON (the
    /// same as its effect key's), in hex.
    pub(crate) effect: String,
    /// The call's id.
    pub(crate) call_id: String,
    /// What left its outcome unknown, scrubbed.
    pub(crate) reason: String,
}

/// The per-run recovery state a durable run saves: the per-run breaker's counts and trip, the
/// tools `degrade` dropped, permission denials.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RecoveryState {
    degraded: Vec<String>,
    failures: HashMap<String, u32>,
    tripped: Option<(String, u32)>,
    turn: u64,
    counted: HashMap<String, u64>,
    denied: HashMap<String, u32>,
    denials: u32,
    /// The per-run breaker's failure-rate windows, per tool.
    #[serde(default)]
    windows: HashMap<String, VecDeque<Option<String>>>,
    /// Retries the run had spent, at every layer.
    #[serde(default)]
    pub(super) retries_spent: u32,
    /// The calls whose outcome is unknown.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    unknown: Vec<UnknownCall>,
}

/// What the run has learnt, behind one lock that the happy path never takes: until something
/// fails (or is denied) the answers come from two atomics.
#[derive(Debug)]
pub(crate) struct Recovery {
    state: Mutex<Learnt>,
    /// Set once anything has failed in this run; until then the happy path takes no lock.
    troubled: AtomicBool,
    /// Permission denials in this run; outside the lock so a hook that allows takes none.
    denials: AtomicU32,
    /// Set once a call's outcome is unknown: until then no call is a repeat of one, and the
    /// check takes no lock and hashes no arguments.
    any_unknown: AtomicBool,
}

impl Recovery {
    pub(super) fn new(breaker: RunBreaker) -> Self {
        Recovery {
            // Field by field: `..Learnt::default()` would make a default breaker to drop.
            state: Mutex::new(Learnt {
                degraded: HashSet::new(),
                breaker,
                tripped: None,
                turn: 0,
                counted: HashMap::new(),
                denied: HashMap::new(),
                unknown: Vec::new(),
            }),
            troubled: AtomicBool::new(false),
            denials: AtomicU32::new(0),
            any_unknown: AtomicBool::new(false),
        }
    }

    pub(super) fn set_breaker(&self, breaker: RunBreaker) {
        self.lock().breaker = breaker;
    }

    /// Whether `degrade` dropped this tool in this run.
    pub(crate) fn is_degraded(&self, tool: &str) -> bool {
        self.troubled() && self.lock().degraded.contains(tool)
    }

    pub(crate) fn degrade(&self, tool: &str) {
        self.troubled.store(true, Ordering::SeqCst);
        self.lock().degraded.insert(tool.to_owned());
    }

    /// Starts answering a new model turn. Within one turn, parallel calls of the same tool count
    /// as one failure for the per-run breaker: three lookups that all miss in one turn are one
    /// stumble, not a model stuck in a loop.
    pub(crate) fn begin_turn(&self) {
        self.lock().turn += 1;
    }

    /// Whether this run's breaker has tripped for `tool`, and after how many failures. Latched:
    /// a concurrent call that succeeds afterwards resets the count but must not reopen the tool.
    pub(crate) fn breaker_tripped(&self, tool: &str) -> Option<u32> {
        if !self.troubled() {
            return None;
        }
        let state = self.lock();
        match &state.tripped {
            Some((t, failures)) if t == tool => Some(*failures),
            _ => state.breaker.tripped(tool),
        }
    }

    /// Records a call's outcome on the per-run breaker, counted as `rule` says; returns what
    /// the breaker did when this outcome tripped it.
    pub(crate) fn record_outcome(
        &self,
        tool: &str,
        kind: ErrorKind,
        ok: bool,
        rule: RunBreakerRule,
    ) -> Option<Trip> {
        if ok {
            // A failure-rate rule counts the successes before the first failure too.
            if self.troubled() || rule.rate.is_some() {
                let mut state = self.lock();
                state.breaker.succeeded(tool);
                if let Some(rate) = rule.rate {
                    state.breaker.succeeded_in_window(tool, rate.window());
                }
            }
            return None;
        }
        self.troubled.store(true, Ordering::SeqCst);
        let mut state = self.lock();
        let key = if rule.per_kind {
            Cow::Owned(per_kind_key(tool, kind.as_str()))
        } else {
            Cow::Borrowed(tool)
        };
        if state.turn != 0 {
            let turn = state.turn;
            if state.counted.get(&*key) == Some(&turn) {
                return None;
            }
            state.counted.insert(key.clone().into_owned(), turn);
        }
        let failures = match rule.rate {
            Some(rate) => state.breaker.failed_in_window(tool, &key, rate)?,
            None => state.breaker.failed(&key)?,
        };
        // A tool taken off the table that the model calls anyway, until it trips again, is a
        // model that cannot go on without it: that ends the run.
        if rule.on_trip == OnTrip::RemoveTool && !state.degraded.contains(tool) {
            state.breaker.forget(tool);
            state.degraded.insert(tool.to_owned());
            return Some(Trip::Removed { failures });
        }
        if state.tripped.is_none() {
            state.tripped = Some((tool.to_owned(), failures));
        }
        Some(Trip::Stop { failures })
    }

    /// The run's denials, and those of `tool`.
    pub(super) fn denials(&self, tool: &str) -> (u32, u32) {
        let denials = self.denials.load(Ordering::SeqCst);
        let tool_denials = if denials == 0 {
            0
        } else {
            self.lock().denied.get(tool).copied().unwrap_or(0)
        };
        (denials, tool_denials)
    }

    /// Counts a denial of `tool`; returns the run's total.
    pub(crate) fn record_denial(&self, tool: &str) -> u32 {
        *self.lock().denied.entry(tool.to_owned()).or_insert(0) += 1;
        self.denials.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Whether any call of this run has an unknown outcome.
    pub(crate) fn any_unknown(&self) -> bool {
        self.any_unknown.load(Ordering::SeqCst)
    }

    /// Records a call whose outcome is unknown (once per call and effect).
    pub(crate) fn record_unknown(&self, call: UnknownCall) {
        let mut state = self.lock();
        let known = state
            .unknown
            .iter()
            .any(|c| c.call_id == call.call_id && c.effect == call.effect);
        if !known {
            state.unknown.push(call);
        }
        drop(state);
        self.any_unknown.store(true, Ordering::SeqCst);
    }

    /// The earlier call of `tool` asking for `effect` whose outcome is unknown, if any.
    pub(crate) fn unknown_call(&self, tool: &str, effect: &str) -> Option<UnknownCall> {
        if !self.any_unknown() {
            return None;
        }
        let state = self.lock();
        let found = state
            .unknown
            .iter()
            .find(|c| c.tool == tool && c.effect == effect);
        found.cloned()
    }

    /// Forgets the calls asking for `effect` of `tool`: their outcome is now known.
    pub(crate) fn forget_unknown(&self, tool: &str, effect: &str) {
        self.lock()
            .unknown
            .retain(|c| !(c.tool == tool && c.effect == effect));
    }

    /// What the run has learnt so far, to be saved with its checkpoint (the retries it spent
    /// are the limits' to add).
    pub(super) fn snapshot(&self) -> RecoveryState {
        let state = self.lock();
        RecoveryState {
            degraded: state.degraded.iter().cloned().collect(),
            failures: state.breaker.counts().clone(),
            tripped: state.tripped.clone(),
            turn: state.turn,
            counted: state.counted.clone(),
            denied: state.denied.clone(),
            denials: self.denials.load(Ordering::SeqCst),
            windows: state.breaker.windows().clone(),
            retries_spent: 0,
            unknown: state.unknown.clone(),
        }
    }

    /// Takes up what a run learnt before it was interrupted: dropped tools, the per-run
    /// breaker's counts and trip, permission denials.
    pub(super) fn restore(&self, saved: RecoveryState) {
        let troubled = !saved.degraded.is_empty()
            || !saved.failures.is_empty()
            || saved.tripped.is_some()
            || saved.denials > 0;
        let mut state = self.lock();
        state.degraded = saved.degraded.into_iter().collect();
        state.breaker.restore(saved.failures);
        state.breaker.restore_windows(saved.windows);
        state.tripped = saved.tripped;
        state.turn = saved.turn;
        state.counted = saved.counted;
        state.denied = saved.denied;
        let any_unknown = !saved.unknown.is_empty();
        state.unknown = saved.unknown;
        drop(state);
        self.any_unknown.store(any_unknown, Ordering::SeqCst);
        self.denials.store(saved.denials, Ordering::SeqCst);
        if troubled {
            self.troubled.store(true, Ordering::SeqCst);
        }
    }

    /// Whether anything has failed, been dropped or denied in this run: until then no tool is
    /// degraded and no per-run breaker has tripped, and every check of them can say so
    /// without the lock.
    pub(crate) fn troubled(&self) -> bool {
        self.troubled.load(Ordering::SeqCst)
    }

    fn lock(&self) -> MutexGuard<'_, Learnt> {
        // Every critical section here is a single insert or read; a panic cannot leave it torn.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}
