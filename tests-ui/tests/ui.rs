//! Every misuse of the DSL is a compile error on the token at fault (`tests-ui/ui/*.stderr`).
//! The valid declarations (`tests-ui/ui/pass`) are test targets of this package, each a crate
//! of its own that must compile with no warning and run: in trybuild's project they made it
//! build every dependency, where the misuses need only a check.
//!
//! Regenerate the expected output with `TRYBUILD=overwrite`, then read every changed `.stderr`.
//!
//! The `.stderr` files hold rustc's own diagnostic text, which changes between compiler
//! releases, so they are compared only on the compiler they were written with. On any other the
//! test says so on stderr and passes, unless `AGENT_ERRORS_UI=1` (set by `.ci/run`) insists.

use std::io::Write;
use std::process::Command;

/// The compiler release the `.stderr` snapshots were written with.
const SNAPSHOT_RUSTC: &str = "1.95";

#[test]
fn ui() {
    let found = rustc_version();
    if let Some(skipped) = skip_reason(found.as_deref()) {
        if std::env::var_os("AGENT_ERRORS_UI").is_some_and(|v| v == "1") {
            panic!("{skipped}, and AGENT_ERRORS_UI=1 asks for the UI tests to run");
        }
        // Straight to stderr: the test harness captures `eprintln!` of passing tests, and a
        // skip nobody sees would be silent.
        let _ = writeln!(std::io::stderr(), "{skipped}");
        return;
    }
    let cases = trybuild::TestCases::new();
    cases.compile_fail("ui/*.rs");
}

/// `rustc --version` of the compiler cargo builds with (`$RUSTC` when set, as cargo reads it),
/// or why it could not be asked.
fn rustc_version() -> Result<String, String> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let output = Command::new(&rustc)
        .arg("--version")
        .output()
        .map_err(|e| format!("`{} --version` did not run: {e}", rustc.to_string_lossy()))?;
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// `None` when the snapshots are for this compiler: a stable `SNAPSHOT_RUSTC.x` release.
fn skip_reason(found: Result<&str, &String>) -> Option<String> {
    let release = found.ok().and_then(|v| v.split_whitespace().nth(1));
    let matches = release.is_some_and(|release| {
        release
            .strip_prefix(SNAPSHOT_RUSTC)
            .and_then(|rest| rest.strip_prefix('.'))
            .is_some_and(|patch| patch.chars().all(|c| c.is_ascii_digit()))
    });
    if matches {
        return None;
    }
    let found = match found {
        Ok(version) => version,
        Err(error) => error,
    };
    Some(format!(
        "skipped: UI snapshots are for rustc {SNAPSHOT_RUSTC} (found {found})"
    ))
}

#[test]
fn snapshots_run_only_on_a_stable_release_of_their_compiler() {
    let ours = "rustc 1.95.0 (59807616e 2026-04-14)";
    assert_eq!(skip_reason(Ok(ours)), None);
    assert_eq!(skip_reason(Ok("rustc 1.95.2 (0000000 2026-06-01)")), None);
    for other in [
        "rustc 1.96.0 (1234567 2026-05-28)",
        "rustc 1.95.0-nightly (abcdef0 2026-02-20)",
        "rustc 1.9.5",
        "rustc 1.951.0",
        "",
    ] {
        assert_eq!(
            skip_reason(Ok(other)),
            Some(format!(
                "skipped: UI snapshots are for rustc 1.95 (found {other})"
            ))
        );
    }
    let missing = "`rustc --version` did not run: not found".to_owned();
    assert!(
        skip_reason(Err(&missing))
            .unwrap()
            .ends_with(&format!("(found {missing})"))
    );
}
