//! How long classification takes: typed and status evidence should cost tens of nanoseconds;
//! the message patterns are only reached when nothing typed exists.
//!
//! `cargo bench -p agent-errors --bench classify`

use std::error::Error;
use std::hint::black_box;
use std::io;

use agent_errors::classify::Classifier;
use agent_errors::redact::{MAX_SCANNED_BYTES, redact};
use agent_errors::sanitize::{DEFAULT_MAX_CHARS, sanitize, scrub};
use agent_errors::{ErrorKind, HttpError, classify::classify};
use criterion::{Criterion, criterion_group, criterion_main};

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

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Message(&'static str);

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Owned(String);

/// `len` bytes (about) of `unit` repeated, ending in a phrase the patterns know, so the cost of
/// reading the text is paid whether or not the phrase is reached.
fn long_message(unit: &str, len: usize) -> Owned {
    let mut text = unit.repeat(len / unit.len());
    text.push_str("connection timed out");
    Owned(text)
}

#[derive(Debug, thiserror::Error)]
#[error("ledger locked")]
struct LedgerLocked;

fn classification(c: &mut Criterion) {
    let io_error = io::Error::from(io::ErrorKind::ConnectionReset);
    let http_error = HttpError::new(429, "slow down").with_header("retry-after", "7");
    let three_deep = wrap(
        "request timed out",
        wrap(
            "operation timed out",
            wrap(
                "timed out while reading",
                io::Error::new(io::ErrorKind::PermissionDenied, "denied"),
            ),
        ),
    );
    let message_only = Message("cannot access host: connection timed out");
    let nothing_matches = Message("the frobnicator declined to frobnicate today");
    let with_rule = Classifier::new().rule(|_: &LedgerLocked| Some(ErrorKind::Transient));
    let ruled = wrap("tool failed", LedgerLocked);

    let mut group = c.benchmark_group("classify");
    group.bench_function("io_error", |b| b.iter(|| classify(black_box(&io_error))));
    group.bench_function("http_error_429_retry_after", |b| {
        b.iter(|| classify(black_box(&http_error)))
    });
    group.bench_function("three_deep_chain", |b| {
        b.iter(|| classify(black_box(&three_deep)))
    });
    group.bench_function("classifier_rule_two_deep", |b| {
        b.iter(|| with_rule.classify(black_box(&ruled)))
    });
    group.bench_function("message_pattern_fallback", |b| {
        b.iter(|| classify(black_box(&message_only)))
    });
    group.bench_function("message_no_match", |b| {
        b.iter(|| classify(black_box(&nothing_matches)))
    });
    group.finish();

    let trace = "thread 'main' panicked at src/main.rs:10:5:\n\x1b[31mindex out of bounds\x1b[0m\n\
                 stack backtrace:\n   0: rust_begin_unwind\n             at ./src/main.rs:10:5\n\
                 1: core::panicking::panic_fmt\n";
    c.bench_function("sanitize/backtrace", |b| {
        b.iter(|| sanitize(black_box(trace), DEFAULT_MAX_CHARS))
    });
}

/// Messages of 1 KB, 1 MB and 10 MB, ASCII and not: only a bounded prefix is read by the
/// patterns, so the time should not grow with the length beyond formatting the message once.
fn long_messages(c: &mut Criterion) {
    let mut group = c.benchmark_group("classify_long");
    group.sample_size(10);
    for (name, unit) in [("ascii", "lorem ipsum dolor "), ("non_ascii", "é ü ß 漢 ")] {
        for (size_name, len) in [("1KB", 1 << 10), ("1MB", 1 << 20), ("10MB", 10 << 20)] {
            let message = long_message(unit, len);
            group.bench_function(format!("{name}_{size_name}"), |b| {
                b.iter(|| classify(black_box(&message)))
            });
        }
    }
    group.finish();
}

/// Redaction and `scrub` (clean, redact, sanitize) over long texts with secrets scattered in
/// them: linear in the part read, which is bounded.
fn long_redaction(c: &mut Criterion) {
    let mut group = c.benchmark_group("redact_long");
    group.sample_size(10);
    let secrets = " GET https://me:hunter22@h.example/v1?api_key=abc123 Authorization: Bearer \
                   sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8t ";
    for (name, unit) in [("ascii", "lorem ipsum dolor "), ("non_ascii", "é ü ß 漢 ")] {
        for (size_name, len) in [("1KB", 1 << 10), ("1MB", 1 << 20), ("10MB", 10 << 20)] {
            let chunk = unit.repeat(len.min(4096) / unit.len());
            let mut text = String::with_capacity(len + 4096);
            while text.len() < len {
                text.push_str(&chunk);
                text.push_str(secrets);
            }
            group.bench_function(format!("redact_{name}_{size_name}"), |b| {
                b.iter(|| redact(black_box(&text)).len())
            });
            group.bench_function(format!("scrub_{name}_{size_name}"), |b| {
                b.iter(|| scrub(black_box(&text), DEFAULT_MAX_CHARS))
            });
        }
    }
    // Inputs made of nothing but the beginnings of rules, as much as redaction reads.
    for (name, unit) in [
        ("url_userinfo", "https://a:b"),
        ("at_signs", "x://a:@@@@"),
        ("bearer", "Bearer "),
        ("header", "Authorization: "),
        ("params", "key=token=api_key:"),
        ("pem", "-----BEGIN PRIVATE KEY-----"),
        ("jwt", "eyJabcd.eyJabcd."),
        ("key_shapes", "sk-ghp_AKIAxoxb-"),
    ] {
        let text = unit.repeat(MAX_SCANNED_BYTES / unit.len());
        group.bench_function(format!("adversarial_{name}_256KB"), |b| {
            b.iter(|| redact(black_box(&text)).len())
        });
    }
    group.finish();
}

criterion_group!(benches, classification, long_messages, long_redaction);
criterion_main!(benches);
