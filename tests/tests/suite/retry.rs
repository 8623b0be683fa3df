//! The retry schedule, under paused time: exact sleeps, attempt counts, what is never retried.

use std::collections::VecDeque;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_errors::classify::Evidence;
use agent_errors::retry::{FromBackoff, RetryFailure, RetryNotice, retry_after_failure};
use agent_errors::{
    ErrorKind, HttpError,
    classify::{Classification, classify},
    retry::RetrySchedule,
};
use proptest::prelude::*;
use tokio::time::Instant;

/// An operation that returns scripted results and records when it was called.
#[derive(Clone)]
struct Script {
    results: Arc<Mutex<VecDeque<Result<&'static str, HttpError>>>>,
    calls: Arc<Mutex<Vec<Instant>>>,
}

impl Script {
    fn new(results: impl IntoIterator<Item = Result<&'static str, HttpError>>) -> Self {
        Script {
            results: Arc::new(Mutex::new(results.into_iter().collect())),
            calls: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// Fails with `error` forever.
    fn failing(error: HttpError) -> Self {
        Script::new(std::iter::repeat_n(Err(error), 100))
    }

    fn call(&self) -> impl Future<Output = Result<&'static str, HttpError>> + use<> {
        self.calls.lock().unwrap().push(Instant::now());
        let next = self
            .results
            .lock()
            .unwrap()
            .pop_front()
            .expect("the script ran out: more calls than the test expected");
        async move { next }
    }

    /// Time from the first failure (at `start`) to each later call.
    fn offsets(&self, start: Instant) -> Vec<Duration> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .map(|at| *at - start)
            .collect()
    }
}

fn no_jitter(attempts: u32) -> RetrySchedule {
    RetrySchedule::attempts(attempts).unwrap().with_jitter(0.0)
}

async fn run(
    schedule: &RetrySchedule,
    first: HttpError,
    script: &Script,
) -> (
    Result<&'static str, RetryFailure<HttpError>>,
    Vec<RetryNotice>,
) {
    let mut notices = Vec::new();
    let result = retry_after_failure(
        schedule,
        first,
        || script.call(),
        |e| classify(e),
        |_, notice| notices.push(notice.clone()),
    )
    .await;
    (result, notices)
}

fn ms(values: &[u64]) -> Vec<Duration> {
    values.iter().copied().map(Duration::from_millis).collect()
}

#[tokio::test(start_paused = true)]
async fn sleeps_follow_the_exponential_schedule_exactly_without_jitter() {
    let script = Script::failing(HttpError::new(503, "busy"));
    let start = Instant::now();
    let (result, notices) = run(&no_jitter(4), HttpError::new(503, "busy"), &script).await;

    let failure = result.unwrap_err();
    assert_eq!(failure.attempts, 4);
    assert!(failure.exhausted);
    assert_eq!(failure.classification.kind, ErrorKind::Transient);
    // Three retries after the first failure, at 0.5 s, then 1 s and 2 s more.
    assert_eq!(script.offsets(start), ms(&[500, 1500, 3500]));
    assert_eq!(Instant::now() - start, Duration::from_millis(3500));
    let seen: Vec<(u32, Duration)> = notices.iter().map(|n| (n.attempt, n.delay)).collect();
    assert_eq!(
        seen,
        [(1, 500), (2, 1000), (3, 2000)].map(|(a, d)| (a, Duration::from_millis(d)))
    );
}

#[tokio::test(start_paused = true)]
async fn delays_are_capped_at_32_seconds() {
    let script = Script::failing(HttpError::new(500, "down"));
    let (result, notices) = run(&no_jitter(9), HttpError::new(500, "down"), &script).await;
    assert_eq!(result.unwrap_err().attempts, 9);
    let delays: Vec<Duration> = notices.iter().map(|n| n.delay).collect();
    assert_eq!(
        delays,
        ms(&[500, 1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 32_000])
    );
}

#[tokio::test(start_paused = true)]
async fn a_later_success_is_returned() {
    let script = Script::new([Err(HttpError::new(502, "bad gateway")), Ok("fine")]);
    let start = Instant::now();
    let (result, notices) = run(&no_jitter(5), HttpError::new(503, "busy"), &script).await;
    assert_eq!(result.unwrap(), "fine");
    assert_eq!(script.offsets(start), ms(&[500, 1500]));
    assert_eq!(notices.len(), 2);
}

#[tokio::test(start_paused = true)]
async fn one_attempt_means_no_retry() {
    let script = Script::new([]);
    let (result, notices) = run(&no_jitter(1), HttpError::new(503, "busy"), &script).await;
    let failure = result.unwrap_err();
    assert_eq!(failure.attempts, 1);
    assert!(failure.exhausted);
    assert!(notices.is_empty());
}

#[tokio::test(start_paused = true)]
async fn auth_validation_not_found_and_bug_are_attempted_exactly_once() {
    let never_retried = [
        (HttpError::new(401, "token expired"), ErrorKind::Auth),
        (HttpError::new(403, "forbidden"), ErrorKind::Auth),
        (HttpError::new(400, "bad request"), ErrorKind::Validation),
        (HttpError::new(422, "unprocessable"), ErrorKind::Validation),
        (HttpError::new(404, "no such user"), ErrorKind::NotFound),
    ];
    for (error, kind) in never_retried {
        let script = Script::new([]);
        let start = Instant::now();
        let (result, notices) = run(&no_jitter(10), error, &script).await;
        let failure = result.unwrap_err();
        assert_eq!(failure.attempts, 1, "{kind}");
        assert_eq!(failure.classification.kind, kind);
        assert!(!failure.exhausted);
        assert!(notices.is_empty());
        assert!(script.offsets(start).is_empty());
        assert_eq!(Instant::now(), start, "no sleep for {kind}");
    }

    // `Bug` comes from the caller's classification (a caught panic), not from a status.
    let script = Script::new([]);
    let failure = retry_after_failure(
        &no_jitter(10),
        HttpError::new(503, "panicked"),
        || script.call(),
        |_| Classification::new(ErrorKind::Bug, Evidence::Nothing),
        |_, _| panic!("a bug is never retried"),
    )
    .await
    .unwrap_err();
    assert_eq!(failure.attempts, 1);
    assert_eq!(failure.classification.kind, ErrorKind::Bug);
}

#[tokio::test(start_paused = true)]
async fn retrying_stops_when_a_later_failure_is_not_retryable() {
    let script = Script::new([Err(HttpError::new(401, "token expired"))]);
    let (result, _) = run(&no_jitter(10), HttpError::new(503, "busy"), &script).await;
    let failure = result.unwrap_err();
    assert_eq!(failure.attempts, 2);
    assert_eq!(failure.error.status(), 401);
    assert!(!failure.exhausted);
}

#[tokio::test(start_paused = true)]
async fn retry_after_replaces_the_computed_delay_exactly_even_with_jitter() {
    let script = Script::new([
        Err(HttpError::new(503, "busy")),
        Err(HttpError::new(503, "busy")),
    ]);
    let start = Instant::now();
    let first = HttpError::new(429, "slow down").with_header("retry-after", "7");
    // Default jitter (25%) stays on: the server's delay is used as given.
    let schedule = RetrySchedule::attempts(3).unwrap();
    let (result, notices) = run(&schedule, first, &script).await;
    assert_eq!(result.unwrap_err().attempts, 3);
    assert_eq!(notices[0].delay, Duration::from_secs(7));
    assert_eq!(
        notices[0].classification.retry_after,
        Some(Duration::from_secs(7))
    );
    let offsets = script.offsets(start);
    assert_eq!(offsets[0], Duration::from_secs(7));
    // The second retry has no Retry-After: back to the schedule, retry 2 is 1 s plus jitter.
    let second = offsets[1] - offsets[0];
    assert!(
        second >= Duration::from_secs(1) && second <= Duration::from_millis(1250),
        "{second:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn x_should_retry_false_stops_retrying() {
    let script = Script::new([]);
    let first = HttpError::new(503, "busy").with_header("x-should-retry", "false");
    let (result, notices) = run(&no_jitter(5), first, &script).await;
    let failure = result.unwrap_err();
    assert_eq!(failure.attempts, 1);
    assert_eq!(failure.classification.should_retry, Some(false));
    assert!(notices.is_empty());

    // The same, when the server says so on a later attempt.
    let script = Script::new([Err(
        HttpError::new(503, "busy").with_header("x-should-retry", "false")
    )]);
    let (result, _) = run(&no_jitter(5), HttpError::new(503, "busy"), &script).await;
    assert_eq!(result.unwrap_err().attempts, 2);
}

#[tokio::test(start_paused = true)]
async fn the_retry_future_is_send() {
    fn assert_send<T: Send>(value: T) -> T {
        value
    }
    let script = Script::new([Ok("ok")]);
    let result = assert_send(retry_after_failure(
        &no_jitter(2),
        HttpError::new(503, "busy"),
        || script.call(),
        |e| classify(e),
        |_, _| {},
    ))
    .await;
    assert_eq!(result.unwrap(), "ok");
}

#[tokio::test(start_paused = true)]
async fn a_backoff_crate_schedule_drives_the_same_loop() {
    let exponential = backoff::ExponentialBackoff {
        initial_interval: Duration::from_millis(100),
        multiplier: 3.0,
        randomization_factor: 0.0,
        max_interval: Duration::from_secs(60),
        max_elapsed_time: None,
        ..backoff::ExponentialBackoff::default()
    };
    let schedule = FromBackoff::new(exponential).with_max_attempts(NonZeroU32::new(4).unwrap());
    let script = Script::failing(HttpError::new(503, "busy"));
    let start = Instant::now();
    let failure = retry_after_failure(
        schedule,
        HttpError::new(503, "busy"),
        || script.call(),
        |e| classify(e),
        |_, _| {},
    )
    .await
    .unwrap_err();
    assert_eq!(failure.attempts, 4);
    assert!(failure.exhausted);
    assert_eq!(script.offsets(start), ms(&[100, 400, 1300]));

    // Its limits and ours compose: a non-retryable failure still stops at once.
    let script = Script::new([]);
    let failure = retry_after_failure(
        FromBackoff::new(backoff::ExponentialBackoff::default()),
        HttpError::new(404, "gone"),
        || script.call(),
        |e| classify(e),
        |_, _| {},
    )
    .await
    .unwrap_err();
    assert_eq!(failure.attempts, 1);
}

#[tokio::test(start_paused = true)]
async fn any_iterator_of_delays_is_a_schedule() {
    // A schedule is a plain iterator of delays, one per retry.
    let script = Script::failing(HttpError::new(503, "busy"));
    let start = Instant::now();
    let delays = ms(&[10, 20]).into_iter();
    let failure = retry_after_failure(
        delays,
        HttpError::new(503, "busy"),
        || script.call(),
        |e| classify(e),
        |_, _| {},
    )
    .await
    .unwrap_err();
    assert_eq!(failure.attempts, 3);
    assert_eq!(script.offsets(start), ms(&[10, 30]));
}

#[test]
fn zero_attempts_is_rejected() {
    assert!(RetrySchedule::attempts(0).is_err());
    assert_eq!(
        RetrySchedule::attempts(3).unwrap(),
        RetrySchedule::default()
    );
}

#[test]
fn a_schedule_yields_one_delay_per_retry() {
    assert_eq!(no_jitter(1).delays().count(), 0);
    assert_eq!(
        no_jitter(4).delays().collect::<Vec<_>>(),
        ms(&[500, 1000, 2000])
    );
    let custom = no_jitter(4)
        .with_initial(Duration::from_millis(250))
        .with_max(Duration::from_millis(600));
    assert_eq!(custom.delays().collect::<Vec<_>>(), ms(&[250, 500, 600]));
}

/// `min(initial · 2^(n-1), max)`, computed independently in nanoseconds.
fn expected_base(initial: Duration, max: Duration, retry: u32) -> Duration {
    let factor = 1u128 << (retry - 1).min(100);
    let nanos = initial
        .as_nanos()
        .saturating_mul(factor)
        .min(max.as_nanos());
    Duration::from_nanos(nanos as u64)
}

proptest! {
    #[test]
    fn default_base_is_500ms_doubling_capped_at_32s(retry in 1u32..200) {
        let schedule = RetrySchedule::default();
        let want = expected_base(Duration::from_millis(500), Duration::from_secs(32), retry);
        prop_assert_eq!(schedule.base_delay(retry), want);
    }

    #[test]
    fn every_jittered_delay_is_within_base_and_a_quarter_more(retry in 1u32..200) {
        let schedule = RetrySchedule::default();
        let base = schedule.base_delay(retry);
        for _ in 0..16 {
            let delay = schedule.delay(retry);
            prop_assert!(delay >= base, "{delay:?} < {base:?}");
            prop_assert!(delay <= base + base / 4, "{delay:?} > 1.25 * {base:?}");
        }
    }

    #[test]
    fn custom_schedules_keep_the_same_shape(
        initial_ms in 1u64..5_000,
        max_ms in 1u64..120_000,
        jitter in 0.0f64..=1.0,
        attempts in 1u32..40,
    ) {
        let (initial, max) = (Duration::from_millis(initial_ms), Duration::from_millis(max_ms));
        let schedule = RetrySchedule::attempts(attempts)
            .unwrap()
            .with_initial(initial)
            .with_max(max)
            .with_jitter(jitter);
        let delays: Vec<Duration> = schedule.delays().collect();
        prop_assert_eq!(delays.len(), attempts as usize - 1);
        for (i, delay) in delays.into_iter().enumerate() {
            let base = expected_base(initial, max, i as u32 + 1);
            prop_assert!(delay >= base);
            prop_assert!(delay <= base + base.mul_f64(jitter) + Duration::from_nanos(1));
        }
    }
}

#[test]
fn every_zero_count_is_rejected_with_the_one_error_type() {
    use agent_errors::llm::FallbackModel;
    use agent_errors::testing::ScriptedModel;
    use agent_errors::{LlmErrorDecision, retry::ZeroAttempts};

    assert_eq!(RetrySchedule::attempts(0), Err(ZeroAttempts));
    assert_eq!(
        LlmErrorDecision::<String>::retry(0, Duration::from_millis(500)),
        Err(ZeroAttempts)
    );
    let fallback = FallbackModel::new(ScriptedModel::new(), ScriptedModel::new());
    assert_eq!(fallback.after(0).err(), Some(ZeroAttempts));
}
