//! Real servers for the tests, on free loopback ports, stopped by PID when dropped: a
//! `redis-server` here, PostgreSQL in [`postgres`]; in [`checkpoints`] the suite every
//! checkpoint store must pass; and a scripted loopback HTTP server for the providers
//! ([`loopback`]); tools several suite files run ([`tools`]); a test's own `tracing` subscriber
//! that no other test can blind ([`subscriber`]). Never a mock: the scripts that make the fleet
//! agree must run on Redis itself, and the statements that fence a checkpoint on PostgreSQL
//! itself.

#![allow(dead_code)] // each test file uses its own part of the kit

pub mod checkpoints;
pub mod loopback;
pub mod postgres;
pub mod subscriber;
pub mod tools;

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` this test started. Dropping it kills the process and waits for it.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    child: Option<Child>,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("the loopback interface gives out a free port")
}

impl RedisServer {
    /// Starts one on a free port, installing `redis-server` first when it is missing. Panics
    /// with what to do when that fails: the Redis tests fail rather than skip.
    pub fn start() -> Self {
        let mut server = RedisServer {
            port: free_port(),
            child: None,
        };
        server.spawn();
        server
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    fn spawn(&mut self) {
        let port = self.port.to_string();
        // Installed on first use when missing (Debian's package, as root): never a skip.
        let program = agent_errors_test_support::redis_server()
            .unwrap_or_else(|e| panic!("the Redis tests need a real `redis-server`: {e}"));
        let child = Command::new(program)
            .args([
                "--port",
                &port,
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start `redis-server` ({e}): the Redis tests need a real server; \
                     install it with `apt-get install -y redis-server`"
                )
            });
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "redis-server did not listen on {port} within 10s"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child
            .as_ref()
            .map(Child::id)
            .expect("the server is running")
    }

    /// Kills the server (the port stays reserved for [`RedisServer::restart`]).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port, empty.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Freezes the process (SIGSTOP): it accepts nothing and answers nothing, like a server
    /// that hangs.
    pub fn freeze(&self) {
        signal(self.pid(), "-STOP");
    }

    /// Lets a frozen server go on (SIGCONT).
    pub fn thaw(&self) {
        signal(self.pid(), "-CONT");
    }
}

fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .expect("`kill` runs");
    assert!(status.success(), "kill {signal} {pid} failed");
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(child) = &self.child {
            // A frozen server ignores SIGKILL until it is thawed on some systems: thaw first.
            let _ = Command::new("kill")
                .args(["-CONT", &child.id().to_string()])
                .status();
        }
        self.kill();
    }
}

/// Polls `check` every 10 ms until it holds, for at most `limit`.
pub async fn eventually(limit: Duration, what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + limit;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not within {limit:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
