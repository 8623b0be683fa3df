//! Whether the Tokio runtime a run is on has its timer: every backoff and timeout sleeps on it,
//! and Tokio panics at the first sleep made without one, in the middle of a run. Both agent
//! loops ask before a run starts, so a runtime built without `enable_time` is a typed error
//! instead of a panic.
//!
//! Tokio offers no question for it: making a sleep (never polled, so never registered) is what
//! panics without a timer. The probe's panic is caught and kept quiet (no message, no
//! backtrace): a process-wide panic hook, installed with the first probe, passes every other
//! panic to the hook that was there before it.

use std::cell::Cell;
use std::sync::Once;

thread_local! {
    /// The last runtime this thread found a timer on. Tokio gives each runtime a fresh id from
    /// a process-wide counter, so another runtime (one built without a timer among them) never
    /// matches it.
    static TIMED_RUNTIME: Cell<Option<tokio::runtime::Id>> = const { Cell::new(None) };
    /// Set while this thread probes: its panic is the probe's answer, not a fault to report.
    static PROBING: Cell<bool> = const { Cell::new(false) };
}

static QUIET_PROBES: Once = Once::new();

/// False when the current Tokio runtime has no timer; true on one that has, and outside any
/// Tokio runtime (left to the executor the run is on). A thread remembers the last runtime it
/// found a timer on, so the runs after the first compare an id instead of probing.
pub(crate) fn runtime_has_timer() -> bool {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return true;
    };
    let id = runtime.id();
    if TIMED_RUNTIME.get() == Some(id) {
        return true;
    }
    QUIET_PROBES.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !PROBING.get() {
                previous(info);
            }
        }));
    });
    PROBING.set(true);
    let probe = std::panic::catch_unwind(|| drop(tokio::time::sleep(std::time::Duration::ZERO)));
    PROBING.set(false);
    if probe.is_err() {
        return false;
    }
    TIMED_RUNTIME.set(Some(id));
    true
}

#[cfg(test)]
mod tests {
    use super::runtime_has_timer;

    #[test]
    fn a_runtime_without_its_timer_is_found_each_time_it_is_asked() {
        let timed = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        assert!(timed.block_on(async { runtime_has_timer() }));
        let untimed = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        assert!(!untimed.block_on(async { runtime_has_timer() }));
        assert!(
            !untimed.block_on(async { runtime_has_timer() }),
            "asked again"
        );
        assert!(runtime_has_timer(), "outside a runtime");
    }
}
