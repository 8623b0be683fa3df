//! A real PostgreSQL server for the tests (and the checkpoint benchmark, which includes this
//! file): a fresh cluster made by `initdb` in a temporary directory, `postgres` listening on a
//! free loopback port, stopped by PID and deleted when dropped. Only `std` and the test-support
//! crate (which installs PostgreSQL when it is missing), so a bench can include it by path.
//!
//! `initdb` and `postgres` refuse to run as root; under root both run as the `postgres` system
//! user (through `setpriv`, which execs in place, so the PID we hold is the server's).

use std::fs;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const INSTALL: &str = "install it with `apt-get install -y postgresql` \
                       (or `bash scripts/install-test-deps.sh`)";

/// How the test cluster is made.
#[derive(Debug, Clone, Default)]
pub struct PostgresOptions {
    /// Require this password over TCP (scram-sha-256); without it TCP is `trust`.
    pub password: Option<String>,
    /// Keep PostgreSQL's durable defaults (fsync, synchronous commit). Tests turn them off to
    /// go faster; a benchmark of what a save costs keeps them.
    pub durable: bool,
}

/// A PostgreSQL server this process started. Dropping it stops the server and deletes its
/// files.
#[derive(Debug)]
pub struct PostgresServer {
    bin: PathBuf,
    base: PathBuf,
    port: u16,
    options: PostgresOptions,
    as_postgres_user: bool,
    child: Option<Child>,
}

impl PostgresServer {
    /// A fresh cluster with TCP `trust` auth, fsync off. Panics, saying what to install, when
    /// PostgreSQL is missing: the tests that need it fail rather than skip.
    pub fn start() -> Self {
        Self::start_with(PostgresOptions::default())
    }

    pub fn start_with(options: PostgresOptions) -> Self {
        let bin = server_bin_dir();
        let as_postgres_user = running_as_root();
        let base = unique_dir();
        fs::create_dir_all(&base).expect("the temporary directory is writable");
        let mut server = PostgresServer {
            bin,
            base,
            port: free_port(),
            options,
            as_postgres_user,
            child: None,
        };
        server.init();
        server.spawn();
        server
    }

    /// `user=postgres dbname=postgres` on this server, with the password when there is one.
    pub fn connection_string(&self) -> String {
        let mut config = format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres",
            self.port
        );
        if let Some(password) = &self.options.password {
            config.push_str(&format!(" password={password}"));
        }
        config
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops the server (fast shutdown: clients are disconnected); the files and the port stay
    /// for [`PostgresServer::restart`].
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        // SIGINT is PostgreSQL's fast shutdown; SIGKILL would leave its backends behind.
        let _ = Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Starts the same cluster again on the same port: the data is still there.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    fn data(&self) -> PathBuf {
        self.base.join("data")
    }

    fn init(&self) {
        let mut initdb = self.command("initdb");
        initdb.arg("-D").arg(self.data()).args([
            "-U",
            "postgres",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        ]);
        match &self.options.password {
            Some(password) => {
                let file = self.base.join("pwfile");
                fs::write(&file, password).expect("the password file is writable");
                initdb
                    .args(["--auth-local=trust", "--auth-host=scram-sha-256"])
                    .arg(format!("--pwfile={}", file.display()));
            }
            None => {
                initdb.arg("--auth=trust");
            }
        }
        self.hand_over();
        let output = initdb
            .output()
            .unwrap_or_else(|e| panic!("cannot run `initdb` ({e}): {INSTALL}"));
        assert!(
            output.status.success(),
            "initdb failed: {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    fn spawn(&mut self) {
        let log = fs::File::create(self.base.join("server.log")).expect("the log is writable");
        let mut postgres = self.command("postgres");
        postgres
            .arg("-D")
            .arg(self.data())
            .args([
                "-p",
                &self.port.to_string(),
                "-c",
                "listen_addresses=127.0.0.1",
            ])
            .arg("-c")
            .arg(format!("unix_socket_directories={}", self.base.display()));
        if !self.options.durable {
            postgres.args(["-c", "fsync=off", "-c", "synchronous_commit=off"]);
            postgres.args(["-c", "full_page_writes=off"]);
        }
        let child = postgres
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start `postgres` ({e}): {INSTALL}"));
        self.child = Some(child);
        self.wait_until_ready();
    }

    /// Ready is when the postmaster says so in its pid file (what `pg_ctl -w` waits for) and
    /// the port takes connections.
    fn wait_until_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                self.child = None;
                panic!("postgres exited with {status}:\n{}", self.log());
            }
            let pid_file =
                fs::read_to_string(self.data().join("postmaster.pid")).unwrap_or_default();
            let ready = pid_file.lines().nth(7).is_some_and(|s| s.trim() == "ready");
            if ready && TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "postgres did not get ready on port {} within 60 s:\n{}",
                self.port,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn log(&self) -> String {
        fs::read_to_string(self.base.join("server.log")).unwrap_or_default()
    }

    /// `program` from the server's bin directory, as the `postgres` user when we are root.
    fn command(&self, program: &str) -> Command {
        let program = self.bin.join(program);
        let mut command = if self.as_postgres_user {
            let mut setpriv = Command::new("setpriv");
            setpriv
                .args([
                    "--reuid=postgres",
                    "--regid=postgres",
                    "--init-groups",
                    "--",
                ])
                .arg(program);
            setpriv
        } else {
            Command::new(program)
        };
        // The caller's directory may be closed to the postgres user.
        command.current_dir(&self.base);
        command
    }

    /// Gives the cluster's directory to the `postgres` user when it will run the server.
    fn hand_over(&self) {
        if !self.as_postgres_user {
            return;
        }
        let status = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(&self.base)
            .status()
            .expect("`chown` runs");
        assert!(status.success(), "cannot give {:?} to postgres", self.base);
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        self.stop();
        let _ = fs::remove_dir_all(&self.base);
    }
}

/// The directory holding `initdb` and `postgres`, installing Debian's PostgreSQL first when
/// neither place has them.
fn server_bin_dir() -> PathBuf {
    if let Some(bin) = installed_bin_dir() {
        return bin;
    }
    if let Err(e) =
        agent_errors_test_support::install(agent_errors_test_support::Program::Postgresql)
    {
        panic!("the PostgreSQL tests need a real server: {e}");
    }
    installed_bin_dir().unwrap_or_else(|| {
        panic!(
            "PostgreSQL's `initdb` and `postgres` are not under /usr/lib/postgresql/*/bin nor on \
             PATH: the PostgreSQL tests need a real server; {INSTALL}"
        )
    })
}

/// Debian's newest `/usr/lib/postgresql/*/bin`, else wherever `initdb` is on PATH.
fn installed_bin_dir() -> Option<PathBuf> {
    let has_both = |dir: &Path| dir.join("initdb").is_file() && dir.join("postgres").is_file();
    let mut debian: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, bin)| has_both(bin))
        .collect();
    debian.sort();
    if let Some((_, bin)) = debian.pop() {
        return Some(bin);
    }
    std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .map(|dir| dir.join("initdb"))
        .find(|initdb| initdb.is_file())
        .and_then(|initdb| fs::canonicalize(initdb).ok())
        .and_then(|initdb| initdb.parent().map(Path::to_path_buf))
        .filter(|dir| has_both(dir))
}

/// PostgreSQL refuses root; then the `postgres` user (which Debian's package creates) runs it.
fn running_as_root() -> bool {
    let uid = Command::new("id").arg("-u").output().expect("`id` runs");
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return false;
    }
    let has_user = Command::new("id")
        .arg("postgres")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        has_user,
        "the tests run as root, which PostgreSQL refuses, and there is no `postgres` user to run \
         it as: {INSTALL} (the package creates the user)"
    );
    true
}

fn unique_dir() -> PathBuf {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    std::env::temp_dir().join(format!(
        "agent-errors-pg-{}-{}-{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ))
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("the loopback interface gives out a free port")
}
