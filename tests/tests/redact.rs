//! Redaction: no secret reaches a model, an event or a log, at any cut.

mod support;

use agent_errors::redact::TRUNCATION_MARKER;
use agent_errors::redact::{
    self, MAX_SCANNED_BYTES, MIN_SECRET_CHARS, REDACTED, RedactError, Redactor, redact,
};
use agent_errors::sanitize::scrub;
use proptest::prelude::*;

fn assert_redacts(text: &str, expected: &str) {
    assert_eq!(redact(text), expected, "{text:?}");
}

#[test]
fn bearer_and_basic_credentials() {
    assert_redacts(
        "401 with Bearer sk-live-4f9a8b7c6d5e4f3a2b1c",
        "401 with Bearer [REDACTED]",
    );
    assert_redacts(
        "sent bearer abc.DEF-123_x~y+z/=, got 403",
        "sent bearer [REDACTED], got 403",
    );
    assert_redacts("Basic dXNlcjpwYXNzd29yZA==", "Basic [REDACTED]");
}

#[test]
fn a_lower_case_bearer_token_outside_a_header() {
    assert_redacts(
        "retried with bearer abcdefghijklmnopqrstuvwx, got 401",
        "retried with bearer [REDACTED], got 401",
    );
    assert_redacts(
        "upstream rejected bearer 3f9a0c2e7b1d4f6a8e5c",
        "upstream rejected bearer [REDACTED]",
    );
}

#[test]
fn a_credential_right_after_an_escape_sequence() {
    assert_redacts(
        "\x1b[31merror\x1b[0mBearer Q1abcdefghij rejected",
        "errorBearer [REDACTED] rejected",
    );
    assert_redacts("\x1b[1mapi_key=zzz999\x1b[0m", "api_key=[REDACTED]");
}

#[test]
fn authorization_and_other_sensitive_headers() {
    assert_redacts(
        "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9",
        "Authorization: Bearer [REDACTED]",
    );
    assert_redacts(
        "request headers:\nauthorization: Basic dXNlcjpwYXNz\naccept: */*",
        "request headers:\nauthorization: Basic [REDACTED]\naccept: */*",
    );
    assert_redacts(
        "Proxy-Authorization: Basic dXNlcjpwYXNz",
        "Proxy-Authorization: Basic [REDACTED]",
    );
    assert_redacts("X-Api-Key: 12345abcde", "X-Api-Key: [REDACTED]");
    assert_redacts("api-key:abcdef", "api-key:[REDACTED]");
    assert_redacts(
        r#"{"x-api-key": "k-77f0a1", "accept": "json"}"#,
        r#"{"x-api-key": "[REDACTED]", "accept": "json"}"#,
    );
    assert_redacts(
        "Cookie: session=abc123; theme=dark\nnext",
        "Cookie: [REDACTED]\nnext",
    );
    assert_redacts(
        "set-cookie: sid=s3cr3t; Path=/; Expires=Wed, 21 Oct 2026 07:28:00 GMT",
        "set-cookie: [REDACTED]",
    );
    // Inline, in the middle of a message, up to the closing parenthesis.
    assert_redacts(
        "failed (x-api-key: zzz999) after 3 tries",
        "failed (x-api-key: [REDACTED]) after 3 tries",
    );
}

#[test]
fn passwords_in_urls() {
    assert_redacts(
        "cannot reach postgres://app:hunter22@db.internal:5432/prod",
        "cannot reach postgres://app:[REDACTED]@db.internal:5432/prod",
    );
    assert_redacts(
        "GET https://me:p@ss:w0rd@api.example.com/x",
        "GET https://me:[REDACTED]@api.example.com/x",
    );
    assert_redacts(
        "https://:only-a-password@host/",
        "https://:[REDACTED]@host/",
    );
}

#[test]
fn a_token_as_the_user_of_a_url() {
    assert_redacts(
        "clone https://ghx7Ab9cD3eF5gH7iJ9kL@github.com/acme/repo failed",
        "clone https://[REDACTED]@github.com/acme/repo failed",
    );
    // A user name is not a token.
    for text in [
        "ssh://git@github.com/acme/repo.git",
        "postgres://app@db.internal/prod",
        "https://firstname.lastname@mail.example/",
    ] {
        assert_redacts(text, text);
    }
}

#[test]
fn a_url_password_ends_where_the_url_userinfo_does() {
    for name in ["api-key", "authorization", "cookie", "apikey", "password"] {
        assert_redacts(
            &format!("GET https://{name}:abc123@host.example/x failed, retrying"),
            &format!("GET https://{name}:[REDACTED]@host.example/x failed, retrying"),
        );
    }
}

#[test]
fn key_like_query_parameters() {
    for name in [
        "api_key",
        "apikey",
        "API-KEY",
        "key",
        "token",
        "access_token",
        "refresh_token",
        "secret",
        "client_secret",
        "password",
        "passwd",
        "sig",
        "signature",
        "auth",
        "X-Amz-Signature",
        "X-Amz-Credential",
        "x-amz-security-token",
    ] {
        assert_redacts(
            &format!("GET https://h.example/p?q=1&{name}=v4lue%2F7&page=2 failed"),
            &format!("GET https://h.example/p?q=1&{name}=[REDACTED]&page=2 failed"),
        );
    }
    assert_redacts(
        "x-amz-credential=AKIDEXAMPLE/20260101/us-east-1/s3/aws4_request&x=1",
        "x-amz-credential=[REDACTED]&x=1",
    );
}

#[test]
fn unambiguous_names_also_with_a_colon_and_in_json() {
    assert_redacts(
        "login failed, password: hunter22",
        "login failed, password: [REDACTED]",
    );
    assert_redacts(
        r#"{"client_secret": "abc", "api_key":"def", "token": "ghi"}"#,
        r#"{"client_secret": "[REDACTED]", "api_key":"[REDACTED]", "token": "[REDACTED]"}"#,
    );
    assert_redacts(
        "thread 'main' panicked at src/db.rs:9:5: password=hunter22 rejected",
        "thread 'main' panicked at src/db.rs:9:5: password=[REDACTED] rejected",
    );
}

#[test]
fn well_known_key_shapes() {
    for key in [
        "sk-4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c",
        "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z_-Q",
        "sk-ant-api03-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe-AAAA",
        "sk_live_4eC39HqLyjWDarjtT1zdp7dc",
        "AKIAIOSFODNN7EXAMPLE",
        "ASIAY34FZKBOKMUTVV7A",
        "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
        "gho_16C7e42F292c6912E7710c838347Ae178B4a",
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMN",
        "xoxb-2048-4096-abcdefABCDEF",
        "xoxp-1234567890-abcdefghij",
        "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY",
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    ] {
        assert_redacts(&format!("leaked {key}, oops"), "leaked [REDACTED], oops");
        assert_redacts(key, REDACTED);
    }
    assert_redacts(
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\nabc\n-----END RSA PRIVATE KEY-----\nafter",
        "[REDACTED]\nafter",
    );
    assert_redacts("-----BEGIN PRIVATE KEY-----\nMIIEpAIB cut", REDACTED);
}

#[test]
fn ordinary_text_is_left_alone() {
    for text in [
        "the key was not found",
        "missing key: user_id",
        "primary key violates unique constraint",
        "token expired, please log in again",
        "invalid token: malformed",
        "password is required",
        "invalid api key",
        "Basic authentication failed",
        "bearer token missing",
        "Bearer realm=\"api\"",
        "monkey=3 turkey=4 mykey=5",
        "sk-abc is too short",
        "sk-learn-compatible-estimators-list",
        "AKIA1234 short",
        "ghp_short",
        "eyJhbGciOiJIUzI1NiJ9 alone",
        "https://example.com/path?q=1&page=2",
        "ssh://git@github.com/acme/repo.git",
        "http://localhost:8080/health",
        "mail me at someone@example.com",
        "Secret Santa signup closed",
        "signature mismatch",
        "auth failed: session expired",
        "é ü ß 漢 key",
    ] {
        assert_redacts(text, text);
        assert!(
            matches!(redact(text), std::borrow::Cow::Borrowed(_)),
            "{text:?}"
        );
    }
}

#[test]
fn registered_secrets_are_removed_wherever_they_appear_verbatim() {
    redact::register_secret("Zq7!registered-value").unwrap();
    assert_redacts(
        "connect as Zq7!registered-value failed; retry withZq7!registered-valueagain",
        "connect as [REDACTED] failed; retry with[REDACTED]again",
    );
    // Exact match only: a changed form is not this secret.
    assert_redacts("Zq7!registered value", "Zq7!registered value");
    // Percent-encoded, as a URL or a form body carries it.
    assert_redacts(
        "GET /login?pw=Zq7%21registered-value&page=1 and Zq7%21registered-value",
        "GET /login?pw=[REDACTED]&page=1 and [REDACTED]",
    );
    redact::register_secret("open sesame, 42!").unwrap();
    assert_redacts(
        "body: q=open+sesame%2C+42%21 path: /open%20sesame%2c%2042%21",
        "body: q=[REDACTED] path: /[REDACTED]",
    );
    // Registering twice is harmless.
    redact::register_secret("Zq7!registered-value").unwrap();
}

#[test]
fn registered_patterns_replace_their_first_group_or_the_whole_match() {
    redact::register_pattern(r"acct-\d{6}").unwrap();
    redact::register_pattern(r"(?i)tenant=(T\d+)").unwrap();
    assert_redacts(
        "acct-123456 of tenant=T42 failed",
        "[REDACTED] of tenant=[REDACTED] failed",
    );
    // A pattern that matches the empty string changes nothing.
    redact::register_pattern(r"x*").unwrap();
    assert_redacts("nothing here", "nothing here");
}

#[test]
fn bad_secrets_and_patterns_are_errors_that_do_not_repeat_them() {
    let short = "a".repeat(MIN_SECRET_CHARS - 1);
    let error = redact::register_secret(short.clone()).unwrap_err();
    assert_eq!(
        error,
        RedactError::SecretTooShort {
            min_chars: MIN_SECRET_CHARS
        }
    );
    assert!(!error.to_string().contains(&short));

    let error = redact::register_pattern("hunter22(").unwrap_err();
    assert!(matches!(error, RedactError::InvalidPattern { .. }));
    assert!(!error.to_string().contains("hunter22"), "{error}");
    assert!(!format!("{error:?}").contains("hunter22"));
    assert!(Redactor::new().with_pattern("[").is_err());
    assert!(Redactor::new().with_secret("short").is_err());
}

#[test]
fn a_redactor_has_its_own_rules_and_hides_its_secrets_in_debug() {
    let redactor = Redactor::new()
        .with_secret("instance-only-secret")
        .unwrap()
        .with_pattern(r"pin=(\d+)")
        .unwrap();
    assert_eq!(
        redactor.redact("instance-only-secret pin=1234 api_key=x"),
        "[REDACTED] pin=[REDACTED] api_key=[REDACTED]"
    );
    // The process-wide function does not know the instance's secret.
    assert_eq!(redact("instance-only-secret"), "instance-only-secret");
    let debug = format!("{redactor:?}");
    assert!(!debug.contains("instance-only"), "{debug}");
    assert_eq!(debug, "Redactor { patterns: 1, secrets: 1 }");
}

#[test]
fn a_text_past_the_scan_bound_is_cut_not_passed_through() {
    let mut text = "word ".repeat(MAX_SCANNED_BYTES / 5 + 10);
    text.push_str("api_key=zzzzzz");
    let out = redact(&text);
    assert!(out.len() <= MAX_SCANNED_BYTES + TRUNCATION_MARKER.len_utf8());
    assert!(out.ends_with(TRUNCATION_MARKER));
    assert!(!out.contains("zzzzzz"));
}

#[test]
fn redaction_is_stable_on_its_own_output() {
    for text in [
        "Authorization: Bearer sk-live-4f9a8b7c6d5e4f3a2b1c",
        "https://me:hunter22@host/?api_key=abc&token=def",
        r#"{"password": "x", "x-api-key": "y"}"#,
    ] {
        let once = redact(text).into_owned();
        assert_eq!(redact(&once), once);
    }
}

// ---------------------------------------------------------------------------------------------
// Planted secrets: whatever surrounds them and wherever the cut falls, none reaches the output.

/// A secret and the text that carries it.
#[derive(Debug, Clone)]
struct Planted {
    secret: String,
    text: String,
}

/// Random credential text that no ordinary word can equal: mixed case, with a digit.
fn credential(len: std::ops::RangeInclusive<usize>) -> impl Strategy<Value = String> {
    let body = proptest::string::string_regex(&format!(
        "[A-Za-z0-9]{{{},{}}}",
        len.start().saturating_sub(2),
        len.end().saturating_sub(2)
    ))
    .expect("a valid regex");
    (body, 0..10u8).prop_map(|(body, digit)| format!("Q{digit}{body}"))
}

fn key_shape() -> impl Strategy<Value = Planted> {
    let shapes = prop_oneof![
        credential(20..=48).prop_map(|k| format!("sk-{k}")),
        credential(20..=48).prop_map(|k| format!("sk-proj-{k}")),
        credential(30..=60).prop_map(|k| format!("sk-ant-api03-{k}")),
        "[A-Z0-9]{16}".prop_map(|k| format!("AKIA{k}")),
        "[A-Z0-9]{16}".prop_map(|k| format!("ASIA{k}")),
        ("gh[pousr]", credential(34..=34)).prop_map(|(p, k)| format!("{p}_{k}")),
        credential(40..=70).prop_map(|k| format!("github_pat_{k}")),
        ("xox[abprs]", "[0-9]{4,12}", credential(10..=24))
            .prop_map(|(p, a, k)| format!("{p}-{a}-{k}")),
        (
            "[A-Za-z0-9_-]{8,30}",
            "[A-Za-z0-9_-]{8,60}",
            "[A-Za-z0-9_-]{0,43}"
        )
            .prop_map(|(h, p, s)| format!("eyJ{h}.eyJ{p}.{s}")),
    ];
    shapes.prop_map(|key| Planted {
        text: key.clone(),
        secret: key,
    })
}

fn url_password() -> impl Strategy<Value = Planted> {
    (
        "(https?|postgres|redis|amqp)",
        "[a-z]{0,8}",
        credential(6..=20),
        "[!$*+._~-]{0,3}",
        "[a-z]{2,10}\\.(com|internal|example)",
    )
        .prop_map(|(scheme, user, pass, symbols, host)| {
            let secret = format!("{pass}{symbols}");
            Planted {
                text: format!("{scheme}://{user}:{secret}@{host}/v1/items"),
                secret,
            }
        })
}

/// A token as the whole userinfo of a URL.
fn url_user_token() -> impl Strategy<Value = Planted> {
    (
        "(https?|git|ssh)",
        credential(16..=40),
        "[a-z]{2,10}\\.(com|internal|example)",
    )
        .prop_map(|(scheme, token, host)| Planted {
            text: format!("{scheme}://{token}@{host}/acme/repo"),
            secret: token,
        })
}

fn query_parameter() -> impl Strategy<Value = Planted> {
    let names = prop::sample::select(vec![
        "api_key",
        "apikey",
        "key",
        "token",
        "access_token",
        "refresh_token",
        "secret",
        "client_secret",
        "password",
        "passwd",
        "sig",
        "signature",
        "auth",
        "X-Amz-Signature",
        "X-Amz-Credential",
    ]);
    (names, credential(6..=40), "[a-z]{1,6}", any::<bool>()).prop_map(
        |(name, value, other, first)| Planted {
            text: if first {
                format!("https://api.example.com/v1/{other}?{name}={value}&page=2")
            } else {
                format!("https://api.example.com/v1?{other}=1&{name}={value}")
            },
            secret: value,
        },
    )
}

fn header() -> impl Strategy<Value = Planted> {
    let names = prop::sample::select(vec![
        "Authorization",
        "authorization",
        "Proxy-Authorization",
        "X-Api-Key",
        "x-api-key",
        "Api-Key",
        "Cookie",
        "Set-Cookie",
    ]);
    let schemes = prop::sample::select(vec!["", "Bearer ", "Basic ", "bearer "]);
    (names, schemes, credential(8..=40), any::<bool>()).prop_map(|(name, scheme, value, json)| {
        let value_text = if name.to_lowercase().contains("cookie") {
            format!("sid={value}; Path=/")
        } else {
            format!("{scheme}{value}")
        };
        Planted {
            text: if json {
                format!(r#"{{"{name}": "{value_text}"}}"#)
            } else {
                format!("{name}: {value_text}")
            },
            secret: value,
        }
    })
}

fn bearer_token() -> impl Strategy<Value = Planted> {
    let mixed = (
        prop::sample::select(vec!["Bearer", "bearer", "BEARER", "Basic"]),
        credential(8..=40),
        "[._~+/=-]{0,3}",
    )
        .prop_map(|(scheme, token, tail)| (scheme, format!("{token}{tail}")));
    // An opaque token of lower-case letters only.
    let lower = (
        prop::sample::select(vec!["Bearer", "bearer"]),
        "[a-z]{16,40}",
    )
        .prop_map(|(scheme, token)| (scheme, token));
    // Right after an escape sequence, which glues the scheme to the word before it once
    // stripped.
    let escaped = prop::sample::select(vec!["", "\x1b[0m", "error\x1b[0m", "\x1b]8;;\x07"]);
    (prop_oneof![mixed, lower], escaped).prop_map(|((scheme, secret), escape)| Planted {
        text: format!("{escape}{scheme} {secret}"),
        secret,
    })
}

fn key_value_in_a_panic() -> impl Strategy<Value = Planted> {
    (
        prop::sample::select(vec!["password", "api_key", "client_secret", "access_token"]),
        prop::sample::select(vec!["=", ": ", "="]),
        credential(6..=30),
    )
        .prop_map(|(name, sep, value)| Planted {
            text: format!("thread 'tokio-runtime-worker' panicked at src/tool.rs:12:9:\nlogin with {name}{sep}{value} refused"),
            secret: value,
        })
}

/// Exact values registered for the process: a shape no other test's text contains.
fn registered_value() -> impl Strategy<Value = Planted> {
    ("[A-Za-z0-9]{4,16}", "[#%!@^*]", "[0-9]{2,6}", any::<bool>()).prop_map(
        |(a, sym, d, encoded)| {
            let secret = format!("R{a}{sym}{d}");
            redact::register_secret(secret.clone()).unwrap();
            // As a URL carries it: the symbol percent-encoded.
            let text = if encoded {
                format!("R{a}%{:02X}{d}", u32::from(sym.chars().next().unwrap()))
            } else {
                secret
            };
            Planted {
                secret: text.clone(),
                text,
            }
        },
    )
}

fn planted() -> impl Strategy<Value = Planted> {
    prop_oneof![
        key_shape(),
        url_password(),
        url_user_token(),
        query_parameter(),
        header(),
        bearer_token(),
        key_value_in_a_panic(),
        registered_value(),
    ]
}

/// The text around the secrets: words in several scripts, punctuation, line breaks, complete
/// escape sequences, invisible characters, and stack frames.
fn filler() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            "[a-z]{1,10}",
            "[A-Z][a-z]{0,8}",
            "[0-9]{1,5}",
            Just("é ü ß 漢".to_owned()),
            Just("error:".to_owned()),
            Just("failed".to_owned()),
            Just("\x1b[31m".to_owned()),
            Just("\x1b[0m".to_owned()),
            Just("\u{200B}".to_owned()),
            Just("\n   0: std::rt::lang_start\n".to_owned()),
            Just("\n    at Foo.bar(Foo.java:10)\n".to_owned()),
            "[.,;:!?()\\[\\]{}'\"]",
        ],
        0..12,
    )
    .prop_map(|parts| parts.join(" "))
}

fn separator() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![" ", "\n", ", ", " (", ") ", ". ", "\t", "\r\n", ": "])
}

/// The pieces of `secret` long enough that finding one in the output means the secret leaked:
/// every run of 8 characters (or the whole secret, when shorter).
fn windows(secret: &str) -> Vec<String> {
    let chars: Vec<char> = secret.chars().collect();
    let window = chars.len().min(8);
    chars.windows(window).map(|w| w.iter().collect()).collect()
}

fn leaks(windows: &[String], out: &str) -> bool {
    windows.iter().any(|w| out.contains(w.as_str()))
}

proptest! {
    // Every case scrubs its text once per possible cut, a few hundred times: fewer cases than
    // the default keep this test to seconds in a debug build.
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn no_planted_secret_survives_at_any_cut(
        pieces in proptest::collection::vec((filler(), separator(), planted(), separator()), 1..4),
        tail in filler(),
    ) {
        let mut text = String::new();
        for (before, open, planted, close) in &pieces {
            text.push_str(before);
            text.push_str(open);
            text.push_str(&planted.text);
            text.push_str(close);
        }
        text.push_str(&tail);

        let redacted = redact(&text);
        let full = scrub(&text, usize::MAX);
        let pieces: Vec<(&Planted, Vec<String>)> = pieces
            .iter()
            .map(|(_, _, planted, _)| (planted, windows(&planted.secret)))
            .collect();
        for (planted, windows) in &pieces {
            prop_assert!(!redacted.contains(&planted.secret), "{:?} in {:?}", planted.secret, redacted);
            prop_assert!(!leaks(windows, &full), "{:?} in {:?}", planted.secret, full);
        }
        for max_chars in 0..=full.chars().count() + 1 {
            let out = scrub(&text, max_chars);
            prop_assert!(out.chars().count() <= max_chars);
            for (planted, windows) in &pieces {
                prop_assert!(
                    !leaks(windows, &out),
                    "{:?} in {:?} at {}", planted.secret, out, max_chars
                );
            }
        }
    }
}

proptest! {
    #[test]
    fn a_url_password_takes_nothing_past_the_url(
        name in prop::sample::select(vec!["api-key", "authorization", "cookie", "password", "token", "svc"]),
        password in credential(6..=24),
        after in "[a-z]{3,10}",
        separator in separator(),
    ) {
        let url = format!("https://{name}:{password}@host.example/v1");
        let text = format!("GET {url} failed{separator}{after}, then more");
        let out = redact(&text);
        prop_assert!(!out.contains(&password), "{out}");
        let expected = format!(
            "GET https://{name}:[REDACTED]@host.example/v1 failed{separator}{after}, then more"
        );
        prop_assert_eq!(out, expected);
    }

    #[test]
    fn redaction_never_panics_and_stays_within_its_bound(text in any::<String>()) {
        let out = redact(&text);
        prop_assert!(out.len() <= 10 * text.len().min(MAX_SCANNED_BYTES) + 3);
    }

    #[test]
    fn redaction_of_key_value_soup_stays_within_its_bound(
        parts in proptest::collection::vec(
            prop_oneof![
                Just("key=".to_owned()),
                Just("token:".to_owned()),
                Just("Bearer ".to_owned()),
                Just("https://a:".to_owned()),
                Just("@".to_owned()),
                Just("&".to_owned()),
                Just("Cookie: ".to_owned()),
                "[a-zA-Z0-9]{1,3}",
            ],
            0..60,
        ),
    ) {
        let text = parts.concat();
        let out = redact(&text);
        prop_assert!(out.len() <= 10 * text.len() + 3);
    }
}

/// An error as an application logs it with its causes (`anyhow`'s `{:#}`, `eyre`, tracing
/// with sources): the Display and the Debug of every level its `source()` chain reaches.
fn with_its_causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = String::new();
    let mut level = Some(error);
    while let Some(error) = level {
        text.push_str(&format!("\n{error}\n{error:?}"));
        level = error.source();
    }
    text
}

/// A run ended by a tool failure hands out a redacted copy of the failure's chain: an
/// application that logs it with its causes prints no secret, a lookup by type still finds the
/// HTTP status, and the original stays reachable on purpose.
#[tokio::test(start_paused = true)]
async fn a_terminated_runs_error_chain_is_redacted_and_still_typed() {
    use agent_errors::classify::RedactedError;
    use agent_errors::classify::{chain, find_in_chain};
    use agent_errors::testing::{Fault, FaultyTool, ScriptedModel, echo_tool};
    use agent_errors::{Agent, HttpError};

    #[derive(Debug, thiserror::Error)]
    #[error("login to https://svc:hunter2hunter2@db.example/ failed")]
    struct Login {
        #[source]
        source: HttpError,
    }

    let tool = FaultyTool::new(echo_tool("fetch")).then_always(Fault::error(|| Login {
        source: HttpError::new(401, "token sk-live-7f3a9c2e4b1d8f6a0e5c3b9d expired")
            .with_header("x-api-key", "sk-live-7f3a9c2e4b1d8f6a0e5c3b9d")
            .with_header("retry-after", "7"),
    }));
    let model = ScriptedModel::new().tool_call("fetch", r#"{"text": "x"}"#);
    let agent = Agent::builder("a")
        .model(model)
        .tool(tool.tool())
        .build()
        .unwrap();
    let error = agent.run("go").await.unwrap_err();

    let logged = with_its_causes(&error);
    assert!(!logged.contains("hunter2hunter2"), "{logged}");
    assert!(!logged.contains("7f3a9c2e4b1d"), "{logged}");
    assert!(
        logged.contains("https://svc:[REDACTED]@db.example/"),
        "{logged}"
    );

    let http = find_in_chain::<HttpError>(&error).expect("a typed HttpError in the chain");
    assert_eq!(http.status(), 401);
    assert_eq!(http.header("retry-after"), Some("7"));
    assert_eq!(http.header("x-api-key"), Some(REDACTED));
    assert_eq!(http.message(), "token [REDACTED] expired");
    let names: Vec<Option<&str>> = chain(&error)
        .filter_map(|level| level.downcast_ref::<RedactedError>())
        .map(RedactedError::type_name)
        .collect();
    assert_eq!(
        names,
        [Some("agent_errors::ToolError::Execution"), None],
        "the tool's error, then its own"
    );

    // The original, for code that downcasts to its own type, only on purpose.
    let original = error.terminated().unwrap().unredacted_error().unwrap();
    let login = original
        .cause()
        .downcast_ref::<Login>()
        .expect("the tool's own error");
    assert!(
        login
            .source
            .message()
            .contains("sk-live-7f3a9c2e4b1d8f6a0e5c3b9d")
    );
}

/// Through a whole run: a tool that fails with credentials in its message, a URL and a header.
/// Neither the model, the events, the run's error (Display and Debug) nor the transcript shows
/// them.
#[tokio::test(start_paused = true)]
async fn secrets_in_a_tool_failure_reach_no_output_of_a_run() {
    use agent_errors::testing::{FaultyTool, ScriptedModel, echo_tool};
    use agent_errors::{Agent, HttpError};

    let token = "sk-live-7f3a9c2e4b1d8f6a0e5c3b9d";
    let password = "hunter2hunter2";
    let failing = FaultyTool::new(echo_tool("fetch")).then_always(agent_errors::testing::Fault::error(
        move || {
            HttpError::new(
                400,
                format!(
                    "Authorization: Bearer {token} for https://bob:{password}@api.example.com/v1?api_key={token}"
                ),
            )
            .with_header("x-api-key", token)
        },
    ));
    for status_kind in ["validation", "auth"] {
        let model = ScriptedModel::new()
            .tool_call("fetch", r#"{"text": "x"}"#)
            .text("done");
        let tool = if status_kind == "auth" {
            FaultyTool::new(echo_tool("fetch"))
                .then_always(agent_errors::testing::Fault::error(move || {
                    HttpError::new(401, format!("token {token} expired"))
                        .with_header("x-api-key", token)
                }))
                .tool()
        } else {
            failing.tool()
        };
        let agent = Agent::builder("a")
            .model(model.clone())
            .tool(tool)
            .build()
            .unwrap();
        let outcome = agent.run_with_report("go").await;
        let mut seen = format!(
            "{:?}\n{:?}\n{:?}",
            outcome.report.events,
            outcome.transcript,
            model.requests()
        );
        if let Err(error) = &outcome.result {
            seen.push_str(&with_its_causes(error));
        }
        assert!(!seen.contains(token), "{status_kind}: {seen}");
        assert!(!seen.contains(password), "{status_kind}: {seen}");
    }
}

// ---------------------------------------------------------------------------------------------
// Planted secrets through a whole run: wherever a tool's failure carries them (its message, a
// header, a URL, a panic, a cause deep in its chain), and whatever its policy decides, no output
// of the run shows them.

mod through_a_run {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use agent_errors::testing::ScriptedModel;
    use agent_errors::{
        Agent, BoxError, HttpError, RunOptions, ToolDef,
        policy::{Action, Policy, PolicyKey},
    };
    use proptest::prelude::*;
    use reqwest::ResponseBuilderExt;
    use tracing_subscriber::fmt::MakeWriter;
    use tracing_subscriber::fmt::format::FmtSpan;

    use super::{Planted, credential, filler, leaks, planted, windows};

    /// How the failing tool carries its secret.
    #[derive(Debug, Clone)]
    enum Leak {
        /// In an `HttpError`'s message.
        Message { status: u16, text: String },
        /// In a sensitive header of an `HttpError`.
        Header {
            status: u16,
            name: &'static str,
            value: String,
        },
        /// In a panic's message.
        Panic(String),
        /// In the message of a cause below a generic error.
        Chain { status: u16, text: String },
        /// In the URL of a `reqwest::Error` for an error status.
        Url { status: u16, url: String },
    }

    /// A generic failure whose cause says more.
    #[derive(Debug, thiserror::Error)]
    #[error("the upstream call failed")]
    struct Upstream {
        #[source]
        source: BoxError,
    }

    fn fail(leak: &Leak) -> BoxError {
        match leak.clone() {
            Leak::Message { status, text } => Box::new(HttpError::new(status, text)),
            Leak::Header {
                status,
                name,
                value,
            } => Box::new(HttpError::new(status, "request refused").with_header(name, value)),
            Leak::Panic(text) => panic!("{text}"),
            Leak::Chain { status, text } => Box::new(Upstream {
                source: Box::new(Upstream {
                    source: Box::new(HttpError::new(status, text)),
                }),
            }),
            Leak::Url { status, url } => {
                let url = reqwest::Url::parse(&url).expect("a URL the strategy built");
                let response = axum::http::Response::builder()
                    .status(status)
                    .url(url)
                    .body("")
                    .expect("a valid response");
                let error = reqwest::Response::from(response)
                    .error_for_status()
                    .expect_err("an error status");
                Box::new(error)
            }
        }
    }

    fn status() -> impl Strategy<Value = u16> {
        prop::sample::select(vec![400, 401, 403, 404, 422, 429, 500, 503])
    }

    /// Text around one planted secret: (the text, its secrets).
    fn surrounded() -> impl Strategy<Value = (String, Vec<String>)> {
        (filler(), planted(), filler()).prop_map(|(before, Planted { secret, text }, after)| {
            (format!("{before} {text} {after}"), vec![secret])
        })
    }

    /// A URL with a password and a key-like query parameter.
    fn url_with_secrets() -> impl Strategy<Value = (String, Vec<String>)> {
        let names = prop::sample::select(vec!["api_key", "token", "access_token", "sig", "key"]);
        (credential(8..=24), names, credential(8..=32)).prop_map(|(password, name, value)| {
            (
                format!("https://svc:{password}@api.example.com/v1/items?page=2&{name}={value}"),
                vec![password, value],
            )
        })
    }

    fn leak() -> impl Strategy<Value = (Leak, Vec<String>)> {
        let headers = prop::sample::select(vec![
            "authorization",
            "Authorization",
            "x-api-key",
            "Proxy-Authorization",
            "cookie",
        ]);
        prop_oneof![
            (status(), surrounded())
                .prop_map(|(status, (text, secrets))| (Leak::Message { status, text }, secrets)),
            (status(), headers, credential(12..=40)).prop_map(|(status, name, value)| {
                let secrets = vec![value.clone()];
                let value = format!("Bearer {value}");
                (
                    Leak::Header {
                        status,
                        name,
                        value,
                    },
                    secrets,
                )
            }),
            surrounded().prop_map(|(text, secrets)| (Leak::Panic(text), secrets)),
            (status(), surrounded())
                .prop_map(|(status, (text, secrets))| (Leak::Chain { status, text }, secrets)),
            (status(), url_with_secrets())
                .prop_map(|(status, (url, secrets))| (Leak::Url { status, url }, secrets)),
        ]
    }

    /// What the tool's own policy says, if anything.
    fn policy() -> impl Strategy<Value = Option<Policy>> {
        prop_oneof![
            Just(None),
            Just(Some(Policy::new().on(PolicyKey::Execution, Action::Throw))),
            Just(Some(
                Policy::new().on(PolicyKey::Execution, Action::Escalate)
            )),
            Just(Some(Policy::new().on(
                PolicyKey::Execution,
                agent_errors::policy::Ladder::new([
                    Action::retry(2).expect("a non-zero count"),
                    Action::Escalate
                ]),
            ))),
        ]
    }

    /// Everything the tracing subscriber wrote.
    #[derive(Clone, Default)]
    struct Written(Arc<Mutex<Vec<u8>>>);

    impl Write for Written {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Written {
        type Writer = Written;

        fn make_writer(&'a self) -> Written {
            self.clone()
        }
    }

    /// Runs an agent whose one tool fails with `leak` under `policy`, and returns every output
    /// of the run as text: the model's requests, the report, the transcript, the run's error,
    /// the live events and the tracing output.
    fn run_outputs(leak: Leak, policy: Option<Policy>) -> String {
        let written = Written::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(written.clone())
            .with_max_level(tracing::Level::TRACE)
            .with_span_events(FmtSpan::FULL)
            .with_ansi(false)
            .finish();
        let _guard = crate::support::subscriber::set_default(subscriber);

        let tool = ToolDef::new("fetch", "Fetches.", move |_: serde_json::Value| {
            let leak = leak.clone();
            async move { Err::<String, BoxError>(fail(&leak)) }
        });
        let tool = match policy {
            Some(policy) => tool.with_policy(policy),
            None => tool,
        };
        let model = ScriptedModel::new()
            .tool_call("fetch", r#"{"id": 7}"#)
            .text("done");
        let agent = Agent::builder("a")
            .model(model.clone())
            .tool(tool)
            .build()
            .unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        runtime.block_on(async {
            let (options, mut live) = RunOptions::new().events(1024);
            let outcome = agent.run_with("go", options).await;
            let mut seen = format!(
                "{:?}\n{:?}\n{:?}",
                model.requests(),
                outcome.report,
                outcome.transcript
            );
            if let Err(error) = &outcome.result {
                seen.push_str(&super::with_its_causes(error));
            }
            while let Some(event) = live.recv().await {
                seen.push_str(&format!("\n{event:?}"));
            }
            seen.push('\n');
            seen.push_str(&String::from_utf8_lossy(&written.0.lock().unwrap()));
            seen
        })
    }

    proptest! {
        // Each case is a whole run: few cases keep this to seconds in a debug build.
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        #[test]
        fn no_planted_secret_reaches_any_output_of_a_run(
            (leak, secrets) in leak(),
            policy in policy(),
        ) {
            let seen = run_outputs(leak.clone(), policy);
            prop_assert!(seen.contains("execute_tool"), "tracing is captured: {seen}");
            // The failure's text reached the outputs, its secrets replaced (a header's value is
            // never shown at all).
            if !matches!(leak, Leak::Header { .. }) {
                prop_assert!(seen.contains("[REDACTED]"), "{leak:?} left no trace in:\n{seen}");
            }
            for secret in &secrets {
                prop_assert!(
                    !leaks(&windows(secret), &seen),
                    "{secret:?} of {leak:?} in:\n{seen}"
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Planted secrets in every public error: whatever error the library hands out (a run's, a
// provider's, a checkpoint store's, a resume's), an application that logs it with its causes
// prints no secret, and the typed lookups on it still work.

mod every_error_chain {
    use std::sync::Arc;

    use agent_errors::call::BoxFuture;
    use agent_errors::checkpoint::{
        Checkpoint, CheckpointError, CheckpointStore, MemoryCheckpoints,
    };
    use agent_errors::classify::find_in_chain;
    use agent_errors::openai::OpenAiModel;
    use agent_errors::provider::StatusError;
    use agent_errors::stream::StreamError;
    use agent_errors::testing::ScriptedModel;
    use agent_errors::{Agent, BoxError, ChatRequest, HttpError, Message, RunError};
    use proptest::prelude::*;
    use serde_json::json;

    use super::support::loopback::{Loopback, Reply};
    use super::{Planted, credential, filler, leaks, planted, windows, with_its_causes};

    /// A generic failure whose cause says more.
    #[derive(Debug, thiserror::Error)]
    #[error("the model call failed: {text}")]
    struct Upstream {
        text: String,
        #[source]
        source: BoxError,
    }

    /// A checkpoint store whose database fails with `text` (a connection string, say).
    #[derive(Debug)]
    struct FailingStore {
        text: String,
    }

    impl FailingStore {
        fn fail(&self) -> CheckpointError {
            CheckpointError::Store(Box::new(std::io::Error::other(self.text.clone())))
        }
    }

    impl CheckpointStore for FailingStore {
        fn save<'a>(&'a self, _: &'a Checkpoint) -> BoxFuture<'a, Result<(), CheckpointError>> {
            Box::pin(async move { Err(self.fail()) })
        }

        fn load<'a>(
            &'a self,
            _: &'a str,
        ) -> BoxFuture<'a, Result<Option<Checkpoint>, CheckpointError>> {
            Box::pin(async move { Err(self.fail()) })
        }

        fn delete<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<(), CheckpointError>> {
            Box::pin(async move { Err(self.fail()) })
        }
    }

    /// Every output checked below: the error logged with its causes.
    fn logged(error: &(dyn std::error::Error + 'static)) -> String {
        with_its_causes(error)
    }

    /// A run whose model fails with `text` in a chain that ends in an HTTP error carrying
    /// `key` in a credential header, and a stream error whose cause says `text`.
    async fn model_errors(text: &str, key: &str) -> Vec<(String, RunError)> {
        let mut errors = Vec::new();
        let chained = {
            let text = text.to_owned();
            let key = key.to_owned();
            move || Upstream {
                text: text.clone(),
                source: Box::new(
                    HttpError::new(503, text.clone()).with_header("x-api-key", key.clone()),
                ),
            }
        };
        let agent = Agent::builder("a")
            .model(ScriptedModel::new().then_fail_forever(chained))
            .build()
            .unwrap();
        let error = agent.run("go").await.unwrap_err();
        assert_eq!(
            find_in_chain::<HttpError>(&error).map(HttpError::status),
            Some(503),
            "the status is still found in a run's model error"
        );
        errors.push(("a model's own error".to_owned(), error));

        let broken = {
            let text = text.to_owned();
            move || Upstream {
                text: text.clone(),
                source: Box::new(StreamError::EndedEarly {
                    source: text.clone().into(),
                }),
            }
        };
        let agent = Agent::builder("a")
            .model(ScriptedModel::new().then_fail_forever(broken))
            .build()
            .unwrap();
        let error = agent.run("go").await.unwrap_err();
        assert!(
            matches!(
                find_in_chain::<StreamError>(&error),
                Some(StreamError::EndedEarly { .. })
            ),
            "the stream error is still found, typed, in a run's model error"
        );
        assert!(
            error.model_error().is_some_and(|e| e.is::<Upstream>()),
            "the original is still reachable"
        );
        errors.push(("a stream error".to_owned(), error));

        // The model's own words, when they end the run: an escalation and a refusal.
        let reason = json!({"reason": text, "severity": "high"}).to_string();
        let agent = Agent::builder("a")
            .model(ScriptedModel::new().tool_call(agent_errors::run::ESCALATE, reason))
            .enable_escalate()
            .build()
            .unwrap();
        let error = agent.run("go").await.unwrap_err();
        assert!(matches!(error, RunError::Escalated { .. }), "{error}");
        errors.push(("an escalation".to_owned(), error));
        let refusal = agent_errors::ChatResponse::text(text)
            .with_finish_reason(agent_errors::llm::FinishReason::Refusal);
        let agent = Agent::builder("a")
            .model(ScriptedModel::new().reply(agent_errors::testing::Reply::response(refusal)))
            .build()
            .unwrap();
        let error = agent.run("go").await.unwrap_err();
        assert!(matches!(error, RunError::Refused { .. }), "{error}");
        errors.push(("a refusal".to_owned(), error));
        errors
    }

    /// A chat-completions server that answers 400 with `text` in its body and `key` in a
    /// header, through the provider alone and through a run.
    async fn provider_errors(text: &str, key: &str) -> Vec<(String, Box<dyn std::error::Error>)> {
        let refusal = || {
            Reply::json(
                400,
                json!({"error": {"message": text, "type": "invalid_request_error", "param": format!("api_key={key}")}}),
            )
            .with_header("x-api-key", key)
            .with_header("set-cookie", &format!("sid={key}; Path=/"))
        };
        let server = Loopback::start([refusal(), refusal()]).await;
        let model = OpenAiModel::builder()
            .base_url(format!("{}/v1", server.url))
            .model("m")
            .sleeper(|_| std::future::ready(()))
            .build()
            .unwrap();
        let mut errors: Vec<(String, Box<dyn std::error::Error>)> = Vec::new();
        let direct = model.complete(&ask()).await.unwrap_err();
        errors.push(("a provider's error".to_owned(), Box::new(direct)));
        let agent = Agent::builder("a").model(model).build().unwrap();
        let error = agent.run("go").await.unwrap_err();
        assert_eq!(
            find_in_chain::<StatusError>(&error).map(StatusError::status),
            Some(400),
            "the status error is still found in a run's model error"
        );
        errors.push(("a provider's error in a run".to_owned(), Box::new(error)));

        // A base URL whose password the connection error's URL would show.
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = closed.local_addr().unwrap().port();
        drop(closed);
        let model = OpenAiModel::builder()
            .base_url(format!(
                "http://svc:{key}@127.0.0.1:{port}/v1?api_key={key}"
            ))
            .model("m")
            .sleeper(|_| std::future::ready(()))
            .build()
            .unwrap();
        let unreachable = model.complete(&ask()).await.unwrap_err();
        errors.push(("a connection error".to_owned(), Box::new(unreachable)));

        // A Redis URL with a password that does not parse.
        let url = format!("redis://svc:{key}@127.0.0.1:port/0?password={key}");
        let Err(refused) = agent_errors::redis::RedisStore::builder(url)
            .connect()
            .await
        else {
            panic!("a URL that does not parse is refused");
        };
        errors.push(("a Redis store's error".to_owned(), Box::new(refused)));
        errors
    }

    /// A durable run whose store fails with `text`, and a resume of a run named `text`.
    async fn durable_errors(text: &str) -> Vec<(String, RunError)> {
        let agent = Agent::builder("a")
            .model(ScriptedModel::new().text("done"))
            .checkpoints(FailingStore {
                text: text.to_owned(),
            })
            .build()
            .unwrap();
        let saving = agent.run("go").await.unwrap_err();
        assert!(matches!(saving, RunError::Checkpoint(_)), "{saving}");

        let agent = Agent::builder("a")
            .model(ScriptedModel::new().text("done"))
            .shared_checkpoints(Arc::new(MemoryCheckpoints::new()) as Arc<dyn CheckpointStore>)
            .build()
            .unwrap();
        let resuming = agent
            .resume(text, agent_errors::RunOptions::new())
            .await
            .result
            .unwrap_err();
        assert!(matches!(resuming, RunError::Resume(_)), "{resuming}");
        vec![
            ("a checkpoint store's error".to_owned(), saving),
            ("a resume error".to_owned(), resuming),
        ]
    }

    fn ask() -> ChatRequest {
        ChatRequest::new(vec![Message::user("hi")], Vec::new())
    }

    /// Text around one planted secret: (the text, its secrets).
    fn surrounded() -> impl Strategy<Value = (String, Vec<String>)> {
        (filler(), planted(), filler()).prop_map(|(before, Planted { secret, text }, after)| {
            (format!("{before} {text} {after}"), vec![secret])
        })
    }

    proptest! {
        // Each case starts servers and runs agents: few cases keep this to seconds.
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

        #[test]
        fn no_planted_secret_reaches_any_public_errors_chain(
            (text, mut secrets) in surrounded(),
            key in credential(12..=40),
        ) {
            secrets.push(key.clone());
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let errors = runtime.block_on(async {
                let mut errors: Vec<(String, Box<dyn std::error::Error>)> = Vec::new();
                for (what, error) in model_errors(&text, &key).await {
                    errors.push((what, Box::new(error)));
                }
                errors.extend(provider_errors(&text, &key).await);
                for (what, error) in durable_errors(&text).await {
                    errors.push((what, Box::new(error)));
                }
                errors
            });
            for (what, error) in &errors {
                let seen = logged(error.as_ref());
                for secret in &secrets {
                    prop_assert!(
                        !leaks(&windows(secret), &seen),
                        "{secret:?} in {what}:\n{seen}"
                    );
                }
            }
        }
    }
}
