//! The run's one meter: every model request and tool body a run causes is counted here and
//! held to the run's caps, whichever path made it (the loop, `on_llm_error`'s retries, a model
//! wrapper's retry or fallback, a fixer agent's own run, a tool's retry, repair or fallback).
//!
//! A run with no cap across the run has no meter at all: it pays nothing for one. The paths
//! that spend reach the meter through what they are already handed: a model wrapper through
//! its `ChatRequest`, a tool attempt through the run's context, a fixer through its
//! `FixRequest`.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use super::Usage;
use super::{MissingUsage, RunUsage, UsageLimit, UsageLimitExceeded, UsageLimits};

/// The meter of one run, shared by every path of the run that spends.
struct Meter {
    limits: Arc<UsageLimits>,
    /// The run that called this one (a fixer agent's run is its caller's too): charged with
    /// everything charged here, and held to its own caps.
    caller: Option<Arc<Meter>>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    used: RunUsage,
    /// The first cap this run (or its caller) went past: from then on nothing more is let
    /// through, whichever path asks.
    exceeded: Option<UsageLimitExceeded>,
    /// Whether a response without usage was already reported.
    told_missing: bool,
}

type Refused = Box<UsageLimitExceeded>;

impl Meter {
    fn shared(limits: &Arc<UsageLimits>, caller: &RunMeter) -> Arc<Meter> {
        Arc::new(Meter {
            limits: Arc::clone(limits),
            caller: caller.0.clone(),
            state: Mutex::new(State::default()),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while counting leaves the counts as they were: still worth reading.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a response's tokens matter here or to a caller.
    fn caps_tokens(&self) -> bool {
        self.limits.caps_tokens() || self.caller.as_ref().is_some_and(|c| c.caps_tokens())
    }

    /// The refusal this run already met, if it met one.
    fn refused(&self) -> Option<Refused> {
        self.state().exceeded.clone().map(Box::new)
    }

    /// Records that the run went past `limit`: the refusal every later ask gets.
    fn trip(state: &mut State, (limit, allowed): (UsageLimit, String)) -> Refused {
        let exceeded = UsageLimitExceeded::new(limit, allowed, state.used.clone());
        state.exceeded.get_or_insert_with(|| exceeded.clone());
        Box::new(exceeded)
    }

    /// A refusal met by the caller is this run's too.
    fn take_up(&self, refused: Refused) -> Refused {
        self.state()
            .exceeded
            .get_or_insert_with(|| (*refused).clone());
        refused
    }

    fn request(&self, past_own_caps: bool) -> Result<(), Refused> {
        if !past_own_caps {
            let mut state = self.state();
            if let Some(exceeded) = &state.exceeded {
                return Err(Box::new(exceeded.clone()));
            }
            if let Some(refused) = self.limits.request_refused(state.used.requests) {
                return Err(Meter::trip(&mut state, refused));
            }
        }
        if let Some(caller) = &self.caller {
            caller.request(false).map_err(|r| self.take_up(r))?;
        }
        self.state().used.requests += 1;
        Ok(())
    }

    fn answered(&self, model: Answerer<'_>, used: Usage, capped: bool) -> Result<(), Refused> {
        let over = {
            let mut state = self.state();
            state.used.tokens += used;
            match self.limits.cost_of(model.asked, model.said, used) {
                Some(cost) => state.used.cost += cost,
                None => tracing::warn!(
                    model = model.asked,
                    "no price for this model: its tokens cost nothing"
                ),
            }
            match &state.exceeded {
                _ if !capped => None,
                Some(exceeded) => Some(Box::new(exceeded.clone())),
                None => (self.limits)
                    .tokens_exceeded(&state.used.tokens, state.used.cost)
                    .map(|refused| Meter::trip(&mut state, refused)),
            }
        };
        let above = match &self.caller {
            Some(caller) => caller
                .answered(model, used, true)
                .map_err(|r| self.take_up(r)),
            None => Ok(()),
        };
        match over {
            Some(refused) => Err(refused),
            None => above,
        }
    }

    /// Whether this run's own tool-call caps let `calls` through, counting what ran so far.
    fn check_calls<'a>(
        &self,
        calls: impl ExactSizeIterator<Item = &'a str> + Clone,
    ) -> Result<(), Refused> {
        let mut state = self.state();
        if let Some(exceeded) = &state.exceeded {
            return Err(Box::new(exceeded.clone()));
        }
        let used = &state.used;
        match (self.limits).calls_refused(calls, used.tool_calls, &used.calls_of) {
            Some(refused) => Err(Meter::trip(&mut state, refused)),
            None => Ok(()),
        }
    }

    fn calls_refused<'a>(
        &self,
        calls: impl ExactSizeIterator<Item = &'a str> + Clone,
    ) -> Result<(), Refused> {
        self.check_calls(calls.clone())?;
        match &self.caller {
            Some(caller) => caller.calls_refused(calls).map_err(|r| self.take_up(r)),
            None => Ok(()),
        }
    }

    fn tool_body(&self, tool: &str) -> Result<(), Refused> {
        self.check_calls(std::iter::once(tool))?;
        if let Some(caller) = &self.caller {
            caller.tool_body(tool).map_err(|r| self.take_up(r))?;
        }
        let mut state = self.state();
        state.used.tool_calls = state.used.tool_calls.saturating_add(1);
        if self.limits.caps(tool) {
            *state.used.calls_of.entry(tool.to_owned()).or_default() += 1;
        }
        Ok(())
    }
}

/// The meter a run's paths charge: none outside a run, or in a run with no cap across the run
/// (only the per-turn cap, or none), where every charge is let through at no cost. Carried by
/// every `ChatRequest` and `FixRequest`; not part of either's identity: any two compare equal.
#[derive(Clone, Default)]
pub(crate) struct RunMeter(Option<Arc<Meter>>);

impl RunMeter {
    /// The meter of a run held to `limits`, started by `caller`'s run (a fixer agent's run is
    /// started by the run whose call it repairs) or by none.
    #[inline]
    pub(crate) fn for_run(limits: &Arc<UsageLimits>, caller: &RunMeter) -> RunMeter {
        if caller.0.is_none() && !limits.caps_run() {
            return RunMeter(None);
        }
        RunMeter(Some(Meter::shared(limits, caller)))
    }

    /// Whether this run counts anything at all.
    #[inline]
    pub(crate) fn is_metered(&self) -> bool {
        self.0.is_some()
    }

    /// Before a model request: refused when the run (or the run that started it) reached its
    /// request cap or went past any other; counted when let through.
    #[inline]
    pub(crate) fn request(&self) -> Result<(), Refused> {
        self.0.as_ref().map_or(Ok(()), |meter| meter.request(false))
    }

    /// The one last request of a graceful stop: let past this run's own caps (not its
    /// caller's), and counted.
    #[inline]
    pub(crate) fn final_request(&self) -> Result<(), Refused> {
        self.0.as_ref().map_or(Ok(()), |meter| meter.request(true))
    }

    /// After a response from `model` (the model asked, and the one the response says answered
    /// it) that `reported` its usage (or did not, or reported zero tokens: then it is counted
    /// as the run's limits say, from `estimate` by default): its tokens and cost counted, and
    /// refused when that took the run past a token or cost cap. `capped` is false for the
    /// final answer of a graceful stop, which is counted but not capped by this run's caps.
    pub(crate) fn answered(
        &self,
        model: Answerer<'_>,
        reported: Option<Usage>,
        estimate: impl FnOnce() -> Usage,
        capped: bool,
    ) -> Charged {
        let Some(meter) = &self.0 else {
            return Charged {
                result: Ok(()),
                first_missing: false,
            };
        };
        // A response reports at least the tokens of its request: a reported zero is a
        // provider that counted nothing, and is taken as no report at all.
        let (used, first_missing) = match reported.filter(|used| used.total() > 0) {
            Some(used) => (used, false),
            // Without a token or cost cap anywhere, nothing is estimated: what was reported is
            // what the run's usage says.
            None if !meter.caps_tokens() => (Usage::default(), false),
            None => {
                let used = match meter.limits.counted_when_missing() {
                    MissingUsage::Estimate => estimate(),
                    MissingUsage::Assume(used) => used,
                };
                let first = !std::mem::replace(&mut meter.state().told_missing, true);
                (used, first)
            }
        };
        Charged {
            result: meter.answered(model, used, capped),
            first_missing,
        }
    }

    /// When a turn's calls arrive: refused (none of them runs) when they would take the run
    /// past a tool-call cap, counting what ran so far. Nothing is counted here: a call counts
    /// when its tool body runs.
    #[inline]
    pub(crate) fn calls_refused<'a>(
        &self,
        calls: impl ExactSizeIterator<Item = &'a str> + Clone,
    ) -> Result<(), Refused> {
        self.0
            .as_ref()
            .map_or(Ok(()), |meter| meter.calls_refused(calls))
    }

    /// Before a tool body runs (a first try, a retry, a repaired call, a fallback tool alike):
    /// refused past a tool-call cap or after any other cap was passed; counted when let through.
    #[inline]
    pub(crate) fn tool_body(&self, tool: &str) -> Result<(), Refused> {
        self.0
            .as_ref()
            .map_or(Ok(()), |meter| meter.tool_body(tool))
    }

    /// Counts `runs` runs of `tool`'s body that already happened (in a process that stopped
    /// before its checkpoint held them), past any cap: they were not asked for, they are known.
    pub(crate) fn ran(&self, tool: &str, runs: u32) {
        let mut meter = self.0.as_deref();
        while let Some(level) = meter {
            let mut state = level.state();
            state.used.tool_calls = state.used.tool_calls.saturating_add(runs);
            if level.limits.caps(tool) {
                let of = state.used.calls_of.entry(tool.to_owned()).or_default();
                *of = of.saturating_add(runs);
            }
            drop(state);
            meter = level.caller.as_deref();
        }
    }

    /// Takes back the count [`tool_body`](RunMeter::tool_body) made for a body that never
    /// started, its arguments refused by the tool's parser: a call the ladder then repairs
    /// counts once, when its repaired arguments run.
    pub(crate) fn not_started(&self, tool: &str) {
        let mut meter = self.0.as_deref();
        while let Some(level) = meter {
            let mut state = level.state();
            state.used.tool_calls = state.used.tool_calls.saturating_sub(1);
            if let Some(of) = state.used.calls_of.get_mut(tool) {
                *of = of.saturating_sub(1);
            }
            drop(state);
            meter = level.caller.as_deref();
        }
    }

    /// The cap the run went past, when a path of it was refused.
    #[inline]
    pub(crate) fn exceeded(&self) -> Option<Refused> {
        self.0.as_ref().and_then(|meter| meter.refused())
    }

    /// What the run's paths spent, when it is metered.
    pub(crate) fn used(&self) -> Option<RunUsage> {
        self.0.as_ref().map(|meter| meter.state().used.clone())
    }

    /// Takes up what an interrupted run had spent.
    pub(crate) fn restore(&self, used: RunUsage) {
        if let Some(meter) = &self.0 {
            meter.state().used = used;
        }
    }
}

/// The model a response is charged to: the one the run asked, and the one the response says
/// answered it (a model wrapper's answer names which of its models gave it), whose price is
/// the one paid when it has one.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Answerer<'a> {
    pub(crate) asked: &'a str,
    pub(crate) said: Option<&'a str>,
}

impl<'a> Answerer<'a> {
    /// The model `asked`, for a response that names no other.
    pub(crate) fn asked(asked: &'a str) -> Self {
        Answerer { asked, said: None }
    }
}

/// What charging a response came to.
#[derive(Debug)]
pub(crate) struct Charged {
    /// Refused when the response took the run past a cap.
    pub(crate) result: Result<(), Refused>,
    /// The first response of the run without usage, under a token or cost cap: to be told.
    pub(crate) first_missing: bool,
}

impl PartialEq for RunMeter {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl fmt::Debug for RunMeter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.used() {
            Some(used) => write!(f, "RunMeter({used:?})"),
            None => f.write_str("RunMeter(none)"),
        }
    }
}
