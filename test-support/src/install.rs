//! The programs the tests start for real, installed on first use when missing, so that
//! `cargo test` on a fresh machine needs nothing done by hand: `scripts/install-test-deps.sh`
//! does the installing (Debian's packages through apt as root, the npm servers into
//! `test-servers/`) and holds a lock while it does, so that tests of several binaries asking at
//! once install once. A program that cannot be installed is an error saying why: the tests that
//! need it fail, never skip.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// A program a test starts for real.
///
/// # Examples
///
/// ```
/// use agent_errors_test_support::Program;
///
/// assert_eq!(Program::RedisServer.to_string(), "redis-server");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Program {
    /// Debian's `redis-server`, on `PATH`.
    RedisServer,
    /// Debian's PostgreSQL server: `initdb` and `postgres` under `/usr/lib/postgresql/*/bin`.
    Postgresql,
    /// `restate-server` from npm, under `test-servers/restate-server`.
    RestateServer,
}

impl Program {
    /// The name `scripts/install-test-deps.sh` takes for it.
    fn component(self) -> &'static str {
        match self {
            Program::RedisServer => "redis-server",
            Program::Postgresql => "postgresql",
            Program::RestateServer => "restate-server",
        }
    }

    /// The result of this process's one install of it: every later ask gets the same answer.
    fn once(self) -> &'static OnceLock<Result<(), InstallError>> {
        static REDIS: OnceLock<Result<(), InstallError>> = OnceLock::new();
        static POSTGRESQL: OnceLock<Result<(), InstallError>> = OnceLock::new();
        static RESTATE: OnceLock<Result<(), InstallError>> = OnceLock::new();
        match self {
            Program::RedisServer => &REDIS,
            Program::Postgresql => &POSTGRESQL,
            Program::RestateServer => &RESTATE,
        }
    }
}

impl std::fmt::Display for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.component())
    }
}

/// Why a program the tests need could not be installed.
///
/// # Examples
///
/// ```
/// use agent_errors_test_support::{InstallError, Program};
///
/// let error = InstallError::Failed {
///     program: Program::RedisServer,
///     output: "installing needs root".into(),
/// };
/// assert!(error.to_string().contains("redis-server"));
/// ```
#[derive(Debug, Clone, thiserror::Error)]
pub enum InstallError {
    /// `bash` could not run the install script.
    #[error("could not run `bash scripts/install-test-deps.sh {program}`: {reason}")]
    NoScript {
        /// The program that was wanted.
        program: Program,
        /// What running it said.
        reason: String,
    },
    /// The install script ran and failed; its output says why (no root, no apt, no npm, ...).
    #[error(
        "installing {program} for the tests failed (`bash scripts/install-test-deps.sh {program}`):\n{output}"
    )]
    Failed {
        /// The program that was wanted.
        program: Program,
        /// What the script wrote on its standard error.
        output: String,
    },
}

/// Installs `program` with `scripts/install-test-deps.sh` (once per process; the script itself
/// does nothing when the program is there and waits for another process installing it).
///
/// # Examples
///
/// ```no_run
/// use agent_errors_test_support::{Program, install};
///
/// install(Program::RedisServer)?;
/// # Ok::<(), agent_errors_test_support::InstallError>(())
/// ```
pub fn install(program: Program) -> Result<(), InstallError> {
    program.once().get_or_init(|| run_script(program)).clone()
}

fn run_script(program: Program) -> Result<(), InstallError> {
    let script = workspace_root().join("scripts/install-test-deps.sh");
    let output = Command::new("bash")
        .arg(&script)
        .arg(program.component())
        .output()
        .map_err(|error| InstallError::NoScript {
            program,
            reason: error.to_string(),
        })?;
    if output.status.success() {
        return Ok(());
    }
    Err(InstallError::Failed {
        program,
        output: String::from_utf8_lossy(&output.stderr).into_owned(),
    })
}

/// `redis-server`'s path: on `PATH`, or installed now when it is not.
///
/// # Examples
///
/// ```no_run
/// let redis = agent_errors_test_support::redis_server()?;
/// assert!(redis.is_file());
/// # Ok::<(), agent_errors_test_support::InstallError>(())
/// ```
pub fn redis_server() -> Result<PathBuf, InstallError> {
    if let Some(path) = on_path("redis-server") {
        return Ok(path);
    }
    install(Program::RedisServer)?;
    on_path("redis-server").ok_or(InstallError::Failed {
        program: Program::RedisServer,
        output: "the install finished but `redis-server` is still not on PATH".into(),
    })
}

/// The first `name` among the directories of `PATH`.
///
/// # Examples
///
/// ```
/// assert!(agent_errors_test_support::on_path("sh").is_some());
/// assert!(agent_errors_test_support::on_path("no-such-program-here").is_none());
/// ```
pub fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// The workspace's root: scripts and `test-servers/` are found from it.
pub(crate) fn workspace_root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}
