//! A `tracing` subscriber for one test, on its thread, that sees every event and span the test
//! makes however the other tests of the binary run.
//!
//! tracing remembers, for each callsite, whether any subscriber wants it, and how verbose the
//! most verbose subscriber is. While a test's subscriber is the only one alive, tracing asks
//! "any subscriber" of whichever thread reaches a callsite first: a test with no subscriber
//! that reaches a `warn!` first marks it "never" for the whole process, and the test that
//! counts that warning sees nothing. [`set_default`] first installs, once for the process, a
//! global subscriber that enables nothing but asks to be asked again each time, so every
//! callsite stays "sometimes" and each event is put to the subscriber of its own thread.

use std::sync::Once;

use tracing::metadata::LevelFilter;
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::{DefaultGuard, Interest};
use tracing::{Event, Metadata, Subscriber};

/// `subscriber` for this thread until the guard drops, as `tracing::subscriber::set_default`,
/// with no callsite's interest decided by another test.
pub fn set_default(subscriber: impl Subscriber + Send + Sync + 'static) -> DefaultGuard {
    static ASK_EVERY_TIME: Once = Once::new();
    ASK_EVERY_TIME.call_once(|| {
        tracing::subscriber::set_global_default(AskEveryTime)
            .expect("no test of this binary sets a global subscriber but this one");
    });
    let guard = tracing::subscriber::set_default(subscriber);
    // A callsite another thread was registering while the global subscriber went in may have
    // stored the verdict it reached without it: ask every callsite again.
    tracing::callsite::rebuild_interest_cache();
    guard
}

/// The global subscriber: enables nothing (a thread with no subscriber of its own records
/// nothing, as before), but never lets a callsite be cached as "never" or "always".
struct AskEveryTime;

impl Subscriber for AskEveryTime {
    fn register_callsite(&self, _: &'static Metadata<'static>) -> Interest {
        Interest::sometimes()
    }

    fn enabled(&self, _: &Metadata<'_>) -> bool {
        false
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(LevelFilter::TRACE)
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, _: &Event<'_>) {}

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use tracing_subscriber::layer::{Context, SubscriberExt};

    #[derive(Clone, Default)]
    struct Count(Arc<AtomicU32>);

    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Count {
        fn on_event(&self, _: &tracing::Event<'_>, _: Context<'_, S>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn warn_here() {
        tracing::warn!(event = "only_here", "a callsite no other test reaches");
    }

    /// Without the global subscriber this sees 0: the thread with no subscriber reaches the
    /// callsite first, while this test's subscriber is the only one alive, and tracing
    /// remembers "never" for it.
    #[test]
    fn a_callsite_a_thread_without_a_subscriber_reached_first_still_reaches_ours() {
        let count = Count::default();
        let _guard = super::set_default(tracing_subscriber::registry().with(count.clone()));
        std::thread::spawn(warn_here).join().unwrap();
        warn_here();
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
    }
}
