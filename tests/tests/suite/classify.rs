//! Classification: typed facts and statuses before text, the source chain, rules, Retry-After.

use std::error::Error;
use std::io;
use std::time::{Duration, SystemTime};

use agent_errors::classify::{
    Classifier, DEFAULT_RETRY_AFTER_CAP, Evidence, parse_retry_after, register,
};
use agent_errors::{
    ErrorKind, HttpError, ToolError,
    classify::{Classification, classify},
};

/// An error that is nothing but its message: only the patterns can read it.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Message(&'static str);

/// A wrapper with its own message around a cause, as application code writes them.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
struct Wrapped {
    message: &'static str,
    #[source]
    source: Box<dyn Error + Send + Sync>,
}

fn wrap(message: &'static str, source: impl Error + Send + Sync + 'static) -> Wrapped {
    Wrapped {
        message,
        source: Box::new(source),
    }
}

#[test]
fn a_timed_out_connection_is_a_timeout_not_auth_even_when_it_mentions_access() {
    let c = classify(&Message("cannot access host: connection timed out"));
    assert_eq!(c.kind, ErrorKind::Timeout);
    assert_eq!(c.evidence, Evidence::Pattern);
    assert!(c.is_retryable());
}

#[test]
fn permission_denied_three_levels_deep_beats_wrappers_that_say_timed_out() {
    let denied = io::Error::new(io::ErrorKind::PermissionDenied, "open /etc/shadow");
    let err = wrap(
        "request timed out",
        wrap(
            "operation timed out",
            wrap("timed out while reading", denied),
        ),
    );
    let c = classify(&err);
    assert_eq!(c.kind, ErrorKind::Auth);
    assert_eq!(c.evidence, Evidence::Type("std::io::Error"));
    assert!(!c.is_retryable());
}

#[test]
fn a_429_with_retry_after_seven_waits_seven_seconds() {
    let err = HttpError::new(429, "slow down").with_header("retry-after", "7");
    let c = classify(&err);
    assert_eq!(c.kind, ErrorKind::Quota);
    assert_eq!(c.retry_after, Some(Duration::from_secs(7)));
    assert_eq!(c.status, Some(429));
    assert_eq!(c.evidence, Evidence::Status(429));
}

#[test]
fn words_that_merely_contain_auth_words_are_not_auth() {
    for text in [
        "accessor returned nothing",
        "the forbiddenness of the request",
    ] {
        let c = classify(&Message(text));
        assert_ne!(c.kind, ErrorKind::Auth, "{text:?}");
        assert_eq!(c.kind, ErrorKind::Unknown, "{text:?}");
        assert_eq!(c.evidence, Evidence::Nothing);
    }
    // The whole words still count.
    assert_eq!(classify(&Message("403 Forbidden")).kind, ErrorKind::Auth);
    assert_eq!(classify(&Message("access denied")).kind, ErrorKind::Auth);
}

#[test]
fn status_table() {
    let table: &[(&[u16], ErrorKind)] = &[
        (&[400, 405, 413, 414, 422, 418], ErrorKind::Validation),
        (&[401, 403, 407], ErrorKind::Auth),
        (&[404, 410], ErrorKind::NotFound),
        (&[408, 504], ErrorKind::Timeout),
        (&[409, 425, 500, 502, 503, 529], ErrorKind::Transient),
        (&[429], ErrorKind::Quota),
        (&[501, 505, 599], ErrorKind::ServerError),
    ];
    for (statuses, kind) in table {
        for &status in *statuses {
            let c = classify(&HttpError::new(status, "boom"));
            assert_eq!(c.kind, *kind, "status {status}");
            assert_eq!(c.status, Some(status));
            assert_eq!(c.evidence, Evidence::Status(status));
        }
    }
}

#[test]
fn retryable_statuses_and_kinds() {
    for status in [408, 409, 425, 429, 500, 502, 503, 504, 529, 599] {
        assert!(
            classify(&HttpError::new(status, "x")).is_retryable(),
            "{status}"
        );
    }
    for status in [400, 401, 403, 404, 410, 422, 501] {
        assert!(
            !classify(&HttpError::new(status, "x")).is_retryable(),
            "{status}"
        );
    }
    let retryable: Vec<ErrorKind> = ErrorKind::ALL
        .into_iter()
        .filter(|k| k.is_retryable())
        .collect();
    assert_eq!(
        retryable,
        [
            ErrorKind::Transient,
            ErrorKind::Timeout,
            ErrorKind::Quota,
            ErrorKind::ServerError
        ]
    );
}

#[test]
fn not_implemented_is_a_server_error_that_says_do_not_retry() {
    let c = classify(&HttpError::new(501, "not implemented"));
    assert_eq!(c.kind, ErrorKind::ServerError);
    assert_eq!(c.should_retry, Some(false));
    assert!(!c.is_retryable());
    assert_eq!(c, Classification::from_status(501));
}

#[test]
fn x_should_retry_false_is_recorded_and_stops_retries() {
    let c = classify(&HttpError::new(503, "busy").with_header("X-Should-Retry", "false"));
    assert_eq!(c.kind, ErrorKind::Transient);
    assert_eq!(c.should_retry, Some(false));
    assert!(!c.is_retryable());

    // A server's yes does not make an expired token worth retrying.
    let c = classify(&HttpError::new(401, "expired").with_header("x-should-retry", "true"));
    assert_eq!(c.should_retry, Some(true));
    assert!(!c.is_retryable());

    let c = classify(&HttpError::new(503, "busy").with_header("x-should-retry", "maybe"));
    assert_eq!(c.should_retry, None);
}

#[test]
fn retry_after_as_a_date_is_capped_and_garbage_is_ignored() {
    let far_future = "Fri, 01 Jan 2100 00:00:00 GMT";
    let c = classify(&HttpError::new(503, "busy").with_header("Retry-After", far_future));
    assert_eq!(c.retry_after, Some(DEFAULT_RETRY_AFTER_CAP));

    let past = "Thu, 01 Jan 1970 00:00:00 GMT";
    let c = classify(&HttpError::new(503, "busy").with_header("Retry-After", past));
    assert_eq!(c.retry_after, Some(Duration::ZERO));

    for garbage in [
        "soon",
        "-3",
        "2.5",
        "",
        "7 seconds",
        "Fri, 31 Feb 2100 00:00:00 GMT",
    ] {
        let c = classify(&HttpError::new(429, "x").with_header("retry-after", garbage));
        assert_eq!(c.retry_after, None, "{garbage:?}");
        assert_eq!(c.kind, ErrorKind::Quota);
    }

    let c = classify(&HttpError::new(429, "x").with_header("retry-after", "86400"));
    assert_eq!(c.retry_after, Some(Duration::from_secs(300)));
    let c = classify(&HttpError::new(429, "x").with_header("retry-after", "9".repeat(40)));
    assert_eq!(c.retry_after, Some(Duration::from_secs(300)));
}

#[test]
fn retry_after_dates_count_from_now() {
    // Wed, 21 Oct 2015 07:28:00 GMT
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_480);
    let cap = Duration::from_secs(300);
    assert_eq!(
        parse_retry_after("Wed, 21 Oct 2015 07:29:30 GMT", now, cap),
        Some(Duration::from_secs(90))
    );
    assert_eq!(
        parse_retry_after(" 12 ", now, cap),
        Some(Duration::from_secs(12))
    );
}

#[test]
fn the_retry_after_cap_is_configurable_per_classifier() {
    let err = HttpError::new(429, "x").with_header("retry-after", "120");
    let strict = Classifier::new().with_retry_after_cap(Duration::from_secs(10));
    assert_eq!(strict.retry_after_cap(), Duration::from_secs(10));
    assert_eq!(
        strict.classify(&err).retry_after,
        Some(Duration::from_secs(10))
    );
    assert_eq!(
        Classifier::new().classify(&err).retry_after,
        Some(Duration::from_secs(120))
    );
}

#[test]
fn io_error_kinds() {
    use io::ErrorKind as Io;
    let table = [
        (Io::TimedOut, ErrorKind::Timeout),
        (Io::ConnectionRefused, ErrorKind::Transient),
        (Io::ConnectionReset, ErrorKind::Transient),
        (Io::ConnectionAborted, ErrorKind::Transient),
        (Io::NotConnected, ErrorKind::Transient),
        (Io::BrokenPipe, ErrorKind::Transient),
        (Io::Interrupted, ErrorKind::Transient),
        (Io::WouldBlock, ErrorKind::Transient),
        (Io::UnexpectedEof, ErrorKind::Transient),
        (Io::PermissionDenied, ErrorKind::Auth),
        (Io::NotFound, ErrorKind::NotFound),
        (Io::InvalidInput, ErrorKind::Validation),
        (Io::InvalidData, ErrorKind::Validation),
        (Io::OutOfMemory, ErrorKind::Unknown),
    ];
    for (io_kind, kind) in table {
        // The message deliberately points elsewhere: the kind must come from the type.
        let c = classify(&io::Error::new(io_kind, "forbidden"));
        if kind == ErrorKind::Unknown {
            // Not conclusive, so the text gets its say.
            assert_eq!(c.kind, ErrorKind::Auth, "{io_kind:?}");
            assert_eq!(c.evidence, Evidence::Pattern);
        } else {
            assert_eq!(c.kind, kind, "{io_kind:?}");
            assert_eq!(c.evidence, Evidence::Type("std::io::Error"));
        }
        assert_eq!(ErrorKind::from(io_kind), kind);
    }
}

#[test]
fn an_io_error_wrapping_a_custom_error_is_read_through() {
    // `io::Error::source` skips the wrapped error itself; the classifier must not.
    let err = io::Error::other(HttpError::new(429, "slow").with_header("retry-after", "3"));
    let c = classify(&err);
    assert_eq!(c.kind, ErrorKind::Quota);
    assert_eq!(c.retry_after, Some(Duration::from_secs(3)));
}

#[tokio::test(start_paused = true)]
async fn an_elapsed_timer_is_a_timeout_whatever_the_wrapper_says() {
    let elapsed = tokio::time::timeout(Duration::from_secs(1), std::future::pending::<()>())
        .await
        .unwrap_err();
    assert_eq!(classify(&elapsed).kind, ErrorKind::Timeout);
    let c = classify(&wrap("permission denied by upstream", elapsed));
    assert_eq!(c.kind, ErrorKind::Timeout);
    assert_eq!(c.evidence, Evidence::Type("tokio::time::error::Elapsed"));
}

#[test]
fn bad_json_is_a_validation_error() {
    let err = serde_json::from_str::<serde_json::Value>("{name: world}").unwrap_err();
    let c = classify(&err);
    assert_eq!(c.kind, ErrorKind::Validation);
    assert_eq!(c.evidence, Evidence::Type("serde_json::Error"));

    // Invalid arguments reach the classifier as a ToolError whose source is the JSON error.
    let tool_error = ToolError::InvalidArgs {
        raw: "{name: world}".into(),
        error: err,
    };
    assert_eq!(classify(&tool_error).kind, ErrorKind::Validation);
}

#[test]
fn a_status_beats_the_text_of_its_own_message() {
    let c = classify(&HttpError::new(404, "request timed out"));
    assert_eq!(c.kind, ErrorKind::NotFound);
}

#[test]
fn patterns_are_the_last_resort_and_keep_http_facts() {
    // 302 says nothing about recovery, so the message decides; the status is still reported.
    let c = classify(&HttpError::new(302, "rate limited, see other"));
    assert_eq!(c.kind, ErrorKind::Quota);
    assert_eq!(c.evidence, Evidence::Pattern);
    assert_eq!(c.status, Some(302));

    let c = classify(&HttpError::new(302, "moved"));
    assert_eq!(c.kind, ErrorKind::Unknown);
    assert_eq!(c.evidence, Evidence::Status(302));
}

#[test]
fn the_deepest_pattern_match_wins() {
    let err = wrap(
        "upstream failed: internal server error",
        Message("user 7 not found"),
    );
    assert_eq!(classify(&err).kind, ErrorKind::NotFound);
}

#[test]
fn typed_fact_inside_a_tool_error_is_found() {
    let err = ToolError::execution(
        serde_json::json!({"path": "/nope"}),
        io::Error::new(io::ErrorKind::NotFound, "the request timed out"),
    );
    assert_eq!(classify(&err).kind, ErrorKind::NotFound);
    assert_eq!(classify(err.cause()).kind, ErrorKind::NotFound);
}

#[test]
fn tool_error_execution_keeps_the_original_error_downcastable() {
    #[derive(Debug, PartialEq, thiserror::Error)]
    #[error("ledger {0} is locked")]
    struct LedgerLocked(u32);

    let err = ToolError::execution(serde_json::json!({"id": 9}), LedgerLocked(9));
    let source = err.source().expect("Execution has a source");
    assert_eq!(
        source.downcast_ref::<LedgerLocked>(),
        Some(&LedgerLocked(9))
    );
    assert_eq!(
        err.cause().downcast_ref::<LedgerLocked>(),
        Some(&LedgerLocked(9))
    );

    // Through a further wrapper, the chain still leads to it.
    let outer = wrap("run failed", err);
    let mut level: Option<&(dyn Error + 'static)> = Some(&outer);
    let mut found = None;
    while let Some(error) = level {
        found = found.or(error.downcast_ref::<LedgerLocked>());
        level = error.source();
    }
    assert_eq!(found, Some(&LedgerLocked(9)));
}

#[test]
fn a_registered_rule_sees_every_level_and_beats_built_in_evidence() {
    #[derive(Debug, thiserror::Error)]
    #[error("vault refused: {source}")]
    struct VaultError {
        sealed: bool,
        #[source]
        source: io::Error,
    }

    register(|e: &VaultError| e.sealed.then_some(ErrorKind::Auth));

    // The io::Error inside says NotFound; the rule for the user's type comes first.
    let sealed = VaultError {
        sealed: true,
        source: io::Error::new(io::ErrorKind::NotFound, "no key"),
    };
    let c = classify(&wrap("tool failed", sealed));
    assert_eq!(c.kind, ErrorKind::Auth);
    assert_eq!(c.evidence, Evidence::Rule);

    // A rule that answers None leaves the decision to the built-in evidence.
    let unsealed = VaultError {
        sealed: false,
        source: io::Error::new(io::ErrorKind::NotFound, "no key"),
    };
    let c = classify(&unsealed);
    assert_eq!(c.kind, ErrorKind::NotFound);
    assert_eq!(c.evidence, Evidence::Type("std::io::Error"));
}

#[test]
fn a_rule_keeps_the_http_facts_found_below_it() {
    #[derive(Debug, thiserror::Error)]
    #[error("billing api: {0}")]
    struct BillingError(#[source] HttpError);

    let classifier = Classifier::new().rule(|_: &BillingError| Some(ErrorKind::Quota));
    let err = BillingError(
        HttpError::new(503, "busy")
            .with_header("retry-after", "11")
            .with_header("x-should-retry", "false"),
    );
    let c = classifier.classify(&err);
    assert_eq!(c.kind, ErrorKind::Quota);
    assert_eq!(c.evidence, Evidence::Rule);
    assert_eq!(c.status, Some(503));
    assert_eq!(c.retry_after, Some(Duration::from_secs(11)));
    assert_eq!(c.should_retry, Some(false));
}

#[test]
fn a_classifier_has_its_own_rules_apart_from_the_global_registry() {
    #[derive(Debug, thiserror::Error)]
    #[error("quota cop says no")]
    struct QuotaCop;

    register(|_: &QuotaCop| Some(ErrorKind::Auth));

    let own = Classifier::new().rule(|_: &QuotaCop| Some(ErrorKind::Quota));
    assert_eq!(own.classify(&QuotaCop).kind, ErrorKind::Quota);
    assert_eq!(
        Classifier::new().classify(&QuotaCop).kind,
        ErrorKind::Unknown
    );
    assert_eq!(
        Classifier::new()
            .with_global_rules()
            .classify(&QuotaCop)
            .kind,
        ErrorKind::Auth
    );
    // Own rules come before the global ones.
    assert_eq!(
        own.clone().with_global_rules().classify(&QuotaCop).kind,
        ErrorKind::Quota
    );
    assert_eq!(classify(&QuotaCop).kind, ErrorKind::Auth);
}

#[test]
fn rules_are_tried_in_the_order_they_were_added() {
    #[derive(Debug, thiserror::Error)]
    #[error("odd or even: {0}")]
    struct Numbered(u32);

    let classifier = Classifier::new()
        .rule(|e: &Numbered| (e.0 % 2 == 0).then_some(ErrorKind::Transient))
        .rule(|_: &Numbered| Some(ErrorKind::Bug));
    assert_eq!(classifier.classify(&Numbered(2)).kind, ErrorKind::Transient);
    assert_eq!(classifier.classify(&Numbered(3)).kind, ErrorKind::Bug);
}

#[test]
fn a_cyclic_source_chain_terminates() {
    #[derive(Debug)]
    struct Ouroboros;
    impl std::fmt::Display for Ouroboros {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("eats its own tail")
        }
    }
    impl Error for Ouroboros {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(self)
        }
    }
    let c = classify(&Ouroboros);
    assert_eq!(c.kind, ErrorKind::Unknown);
}

/// A port on loopback where nothing listens.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    listener.local_addr().expect("local addr").port()
}

#[tokio::test]
async fn reqwest_connection_refused_is_transient() {
    let url = format!("http://127.0.0.1:{}/", closed_port());
    let err = reqwest::get(url).await.unwrap_err();
    assert!(err.is_connect());
    let c = classify(&err);
    assert_eq!(c.kind, ErrorKind::Transient, "{c:?}");
    // The deepest fact is the refused connection itself, under reqwest's and hyper's wrappers.
    assert_eq!(c.evidence, Evidence::Type("std::io::Error"));
}

fn response(status: u16, body: &'static str) -> reqwest::Response {
    let response = axum::http::Response::builder()
        .status(status)
        .body(body)
        .expect("a valid response");
    reqwest::Response::from(response)
}

#[tokio::test]
async fn reqwest_status_errors_use_the_status_table() {
    for (status, kind) in [
        (503, ErrorKind::Transient),
        (401, ErrorKind::Auth),
        (429, ErrorKind::Quota),
    ] {
        let err = response(status, "nope").error_for_status().unwrap_err();
        let c = classify(&err);
        assert_eq!(c.kind, kind, "{status}");
        assert_eq!(c.status, Some(status));
    }
}

#[tokio::test]
async fn an_unreadable_reqwest_body_is_the_server_s_fault_not_the_model_s() {
    let err = response(200, "<html>oops</html>")
        .json::<serde_json::Value>()
        .await
        .unwrap_err();
    assert!(err.is_decode());
    let c = classify(&err);
    assert_eq!(c.kind, ErrorKind::ServerError);
    assert_eq!(c.evidence, Evidence::Type("reqwest::Error"));
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct OwnedMessage(String);

#[test]
fn a_ten_megabyte_non_ascii_message_is_classified_from_its_beginning() {
    // The phrase at the start decides; what follows is never read by the patterns.
    let mut text = String::from("upstream connection refused: ");
    while text.len() < 10 << 20 {
        text.push_str("é ü ß 漢 ");
    }
    let c = classify(&OwnedMessage(text.clone()));
    assert_eq!(
        (c.kind, c.evidence),
        (ErrorKind::Transient, Evidence::Pattern)
    );

    // A phrase buried past the first few KiB is not looked for.
    let buried = format!("{text}permission denied");
    assert_eq!(classify(&OwnedMessage(buried)).kind, ErrorKind::Transient);
    let only_buried = format!("{}permission denied", &text[29..]);
    assert_eq!(
        classify(&OwnedMessage(only_buried)).kind,
        ErrorKind::Unknown
    );
}

#[test]
fn an_exhausted_quota_is_not_retryable_whatever_carries_it() {
    let body =
        r#"{"error":{"code":"insufficient_quota","message":"You exceeded your current quota"}}"#;
    let direct = HttpError::new(429, body);
    assert_eq!(classify(&direct).kind, ErrorKind::Quota);
    assert!(!classify(&direct).is_retryable());
    let wrapped = std::io::Error::other(HttpError::new(429, body));
    assert!(!classify(&wrapped).is_retryable());
    let anthropic = HttpError::new(400, "Your credit balance is too low to access the API");
    assert_eq!(classify(&anthropic).kind, ErrorKind::Quota);
    assert!(!classify(&anthropic).is_retryable());
    // A plain rate limit stays retryable.
    assert!(classify(&HttpError::new(429, "rate limited, slow down")).is_retryable());
}

#[test]
fn the_first_valid_retry_after_wins() {
    let err = HttpError::new(503, "busy")
        .with_header("retry-after", "soon")
        .with_header("retry-after", "7");
    assert_eq!(
        classify(&err).retry_after,
        Some(std::time::Duration::from_secs(7))
    );
}

#[test]
fn an_http_errors_debug_hides_credentials() {
    let err = HttpError::new(401, "bad key sk-live-0123456789abcdefghijklmnop")
        .with_header("x-api-key", "sk-ant-api03-secretsecretsecret")
        .with_header("retry-after", "1");
    let shown = format!("{err:?}");
    assert!(!shown.contains("secretsecretsecret"), "{shown}");
    assert!(!shown.contains("0123456789abcdefghijklmnop"), "{shown}");
    assert!(shown.contains("retry-after"), "{shown}");
}

#[test]
fn a_rule_that_panics_calls_the_failure_a_bug_instead_of_unwinding() {
    #[derive(Debug, thiserror::Error)]
    #[error("ledger said no")]
    struct LedgerRefusal;

    let classifier =
        Classifier::new().rule(|_: &LedgerRefusal| -> Option<ErrorKind> { panic!("rule bug") });
    let c = classifier.classify(&LedgerRefusal);
    assert_eq!(c.kind, ErrorKind::Bug);
    assert_eq!(c.evidence, Evidence::Rule);
}
