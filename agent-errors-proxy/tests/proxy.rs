//! The proxy as a host runs it: the real binary on stdio, between a client nobody here wrote
//! (the official MCP Python SDK, installed from PyPI into the target directory by these tests)
//! and real servers (the fault server of this workspace, the reference MCP server from npm).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;

use serde_json::Value;

/// The Python SDK release the client runs on.
const MCP_PYTHON_SDK: &str = "mcp==2.3.0";

const PROXY: &str = env!("CARGO_BIN_EXE_agent-errors-proxy");

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A fresh directory for one test's files.
fn scratch(name: &str) -> PathBuf {
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("proxy-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

/// The fault server: built beside the proxy by `cargo test --workspace`.
fn fault_server() -> PathBuf {
    let dir = Path::new(PROXY).parent().expect("the proxy's directory");
    let server = dir.join("mcp-fault-server");
    assert!(
        server.exists(),
        "{} is missing: it is built by `cargo test --workspace` (or `cargo build -p agent-errors-tests-mcp`)",
        server.display()
    );
    server
}

/// A Python with the MCP SDK, made once under the target directory.
fn python() -> PathBuf {
    static ONCE: Mutex<()> = Mutex::new(());
    let _held = ONCE.lock().unwrap_or_else(|p| p.into_inner());
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mcp-python-sdk");
    let python = venv.join("bin").join("python");
    let ready = venv.join(format!("{MCP_PYTHON_SDK}.installed"));
    if !ready.exists() {
        let made = Command::new("python3")
            .arg("-m")
            .arg("venv")
            .arg(&venv)
            .status();
        assert!(
            made.is_ok_and(|s| s.success()),
            "python3 -m venv failed: the proxy tests need Python 3 with venv"
        );
        let pip = Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                MCP_PYTHON_SDK,
            ])
            .status();
        assert!(
            pip.is_ok_and(|s| s.success()),
            "pip could not install {MCP_PYTHON_SDK}"
        );
        std::fs::write(&ready, b"").expect("the marker");
    }
    python
}

fn write_config(dir: &Path, body: &str) -> PathBuf {
    let path = dir.join("proxy.toml");
    std::fs::write(&path, body).expect("the config");
    path
}

/// Runs the client script against the proxy it starts on stdio; what the client saw, and the
/// proxy's stderr.
fn drive(scenario: &str, config: &Path, dir: &Path) -> (Value, String) {
    drive_at(scenario, PROXY, config, dir)
}

/// Runs the client script against `target`: the proxy's binary (started on stdio) or a URL.
fn drive_at(scenario: &str, target: &str, config: &Path, dir: &Path) -> (Value, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/client/drive.py");
    let output = Command::new(python())
        .arg(script)
        .args([scenario, target])
        .arg(config)
        .arg(dir)
        .output()
        .expect("the client runs");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "the client failed: {stderr}");
    let seen = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stdout)));
    (seen, stderr)
}

/// The proxy serving streamable HTTP on a free loopback port, stopped by its PID when dropped.
struct HttpProxy {
    child: std::process::Child,
    url: String,
}

impl HttpProxy {
    fn start(config: &Path) -> Self {
        use std::io::BufRead as _;
        let mut child = Command::new(PROXY)
            .args([
                "--config",
                config.to_str().unwrap(),
                "--http",
                "127.0.0.1:0",
            ])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("the proxy starts");
        let stderr = child.stderr.take().expect("its stderr");
        let mut lines = std::io::BufReader::new(stderr).lines();
        let url = lines
            .by_ref()
            .map_while(Result::ok)
            .find_map(|line| {
                let line: Value = serde_json::from_str(&line).ok()?;
                (line["event"] == "listening").then(|| line["url"].as_str().map(str::to_owned))?
            })
            .expect("the proxy says where it listens");
        // The rest of its log is drained so it never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        HttpProxy { child, url }
    }
}

impl Drop for HttpProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn proxy(args: &[&str]) -> Output {
    Command::new(PROXY)
        .args(args)
        .output()
        .expect("the proxy runs")
}

fn faults_config(extra: &str) -> String {
    format!(
        r#"
[session]
breaker_threshold = 2

[servers.faults]
command = "{server}"
on_error = {{ transient = ["retry(max_attempts = 3, initial = '10ms', max = '20ms')", "escalate"] }}
run_breaker = "remove_tool"

[servers.faults.tools.flaky]
idempotent = true
{extra}"#,
        server = fault_server().display()
    )
}

#[test]
fn retries_are_absorbed_with_one_key_and_a_broken_tool_leaves_the_list() {
    let dir = scratch("recovery");
    let config = write_config(&dir, &faults_config(""));
    let (seen, log) = drive("recovery", &config, &dir);

    // Two 503s, then an answer: the client sees only the answer.
    assert_eq!(seen["flaky"]["error"], false, "{seen}");
    assert_eq!(seen["flaky"]["text"], "ok after 2 failures");
    // Every attempt of that one call carried the same idempotency key upstream.
    let keys = std::fs::read_to_string(dir.join("flaky.keys")).expect("the server's key log");
    let keys: Vec<&str> = keys.lines().collect();
    assert_eq!(keys.len(), 3, "{keys:?}");
    assert!(
        keys[0].starts_with("proxy-") && keys.iter().all(|k| *k == keys[0]),
        "{keys:?}"
    );

    // `fail` always fails: shown twice, then taken off the list, and the client told.
    assert!(
        seen["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "fail")
    );
    assert!(
        !seen["tools_after"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "fail"),
        "{seen}"
    );
    assert!(seen["list_changed"].as_u64() >= Some(1), "{seen}");
    let third = seen["broken"][2]["text"].as_str().unwrap();
    assert!(
        seen["broken"][2]["error"] == true && third.contains("fail"),
        "{third}"
    );

    // One JSON line per attempt on stderr, none on the protocol's stdout.
    let attempts = log
        .lines()
        .filter(|l| l.contains("\"event\":\"attempt_failed\"") && l.contains("\"tool\":\"flaky\""))
        .count();
    assert_eq!(attempts, 2, "{log}");
    for line in log.lines().filter(|l| l.starts_with('{')) {
        serde_json::from_str::<Value>(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    }
}

/// The fault server under the library's recommended preset and nothing else; `keyed` says
/// whether the file declares that it applies a call once per key in `_meta`.
fn preset_config(keyed: bool) -> String {
    format!(
        "preset = \"recommended\"\n\n[servers.faults]\ncommand = \"{server}\"\nkeyed = {keyed}\n",
        server = fault_server().display()
    )
}

/// The idempotency keys the fault server's `flaky` tool was sent, one per attempt.
fn flaky_keys(dir: &Path) -> Vec<String> {
    let keys = std::fs::read_to_string(dir.join("flaky.keys")).expect("the server's key log");
    keys.lines().map(str::to_owned).collect()
}

#[test]
fn under_the_preset_a_keyed_servers_503s_are_retried_with_one_key() {
    let dir = scratch("preset-keyed");
    let config = write_config(&dir, &preset_config(true));
    let (seen, _) = drive("flaky", &config, &dir);

    assert_eq!(seen["flaky"]["error"], false, "{seen}");
    assert_eq!(seen["flaky"]["text"], "ok after 2 failures");
    let keys = flaky_keys(&dir);
    assert_eq!(keys.len(), 3, "{keys:?}");
    assert!(keys.iter().all(|k| *k == keys[0]), "{keys:?}");
}

#[test]
fn under_the_preset_an_unkeyed_tools_503_is_not_called_again() {
    let dir = scratch("preset-unkeyed");
    let config = write_config(&dir, &preset_config(false));
    let (seen, _) = drive("flaky", &config, &dir);

    // `flaky` may have acted before it answered 503: one call, and the client is told so.
    assert_eq!(flaky_keys(&dir).len(), 1);
    assert_eq!(seen["flaky"]["error"], true, "{seen}");
    let text = seen["flaky"]["text"].as_str().unwrap();
    assert!(text.contains("may have taken effect"), "{text}");
}

#[test]
fn explain_names_the_preset_as_the_layer_under_the_files_own_entries() {
    let dir = scratch("preset-explain");
    let config = format!(
        "{}on_error = {{ timeout = [\"retry(2, when_safe)\", \"escalate\"] }}\n",
        preset_config(true)
    );
    let config = write_config(&dir, &config);
    let out = proxy(&["--config", config.to_str().unwrap(), "--explain", "flaky"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("keyed: true"), "{stdout}");
    let line = |key: &str| {
        stdout
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{key} ")))
            .unwrap_or("")
            .to_owned()
    };
    let timeout = line("timeout");
    assert!(
        timeout.contains("[retry(2, when_safe), escalate]")
            && timeout.ends_with("from [servers.faults] on_error"),
        "{stdout}"
    );
    let transient = line("transient");
    assert!(
        transient.contains("[retry(3, when_safe), escalate]")
            && transient.ends_with("from preset = \"recommended\""),
        "{stdout}"
    );
    assert!(
        line("auth").ends_with("from preset = \"recommended\""),
        "{stdout}"
    );
}

#[test]
fn a_call_that_needs_approval_asks_the_hosts_user_with_the_exact_arguments() {
    let dir = scratch("approval");
    let config = write_config(
        &dir,
        &faults_config("\n[servers.faults.tools.echo]\napproval = true\n"),
    );
    let (seen, _) = drive("approval", &config, &dir);
    assert_eq!(seen["echo"]["error"], false, "{seen}");
    assert_eq!(seen["echo"]["text"], "refund 150 to alice");
    let asked = seen["asked"][0].as_str().expect("one question");
    assert!(
        asked.contains("echo") && asked.contains(r#"{"text":"refund 150 to alice"}"#),
        "{asked}"
    );
}

#[test]
fn without_elicitation_a_call_that_needs_approval_is_refused_saying_why() {
    let dir = scratch("no-elicitation");
    let config = write_config(
        &dir,
        &faults_config("\n[servers.faults.tools.echo]\napproval = true\n"),
    );
    let (seen, _) = drive("no_elicitation", &config, &dir);
    assert_eq!(seen["echo"]["error"], true, "{seen}");
    assert!(
        seen["echo"]["text"]
            .as_str()
            .unwrap()
            .contains("elicitation"),
        "{seen}"
    );
}

#[test]
fn a_file_with_three_mistakes_is_refused_with_three_messages() {
    let dir = scratch("mistakes");
    let config = write_config(
        &dir,
        "[servers.search]\ncommand = \"search-server\"\non_error = { transiant = \"retry(3)\" }\n\n[servers.search.tools.lookup]\napproval = \"yes\"\ntimeout = \"rerty(2)\"\n",
    );
    let out = proxy(&["--config", config.to_str().unwrap(), "--check"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 4, "{stderr}");
    let file = config.display();
    assert_eq!(
        lines[0],
        format!("{file}:3:14: unknown key `transiant` in `on_error`; did you mean `transient`?")
    );
    assert_eq!(
        lines[1],
        format!("{file}:6:12: `approval` must be `true` or `false`")
    );
    assert!(
        lines[2].starts_with(&format!(
            "{file}:7:11: bad duration `rerty(2)` for `timeout`"
        )),
        "{stderr}"
    );
    assert_eq!(
        lines[3],
        format!("{file}: 3 problem(s); nothing was started")
    );
}

#[test]
fn explain_says_where_each_key_came_from_and_names_collide_into_prefixes() {
    let dir = scratch("explain");
    let everything = Command::new("bash")
        .arg(workspace().join("scripts/install-mcp-server.sh"))
        .output()
        .expect("the reference server installs");
    assert!(
        everything.status.success(),
        "{}",
        String::from_utf8_lossy(&everything.stderr)
    );
    let entry = String::from_utf8_lossy(&everything.stdout)
        .trim()
        .to_owned();
    let config = faults_config(&format!(
        "\n[defaults]\non_error = {{ timeout = \"retry(2)\" }}\n\n[servers.everything]\ncommand = \"node\"\nargs = [\"{entry}\"]\nallow = [\"echo\"]\n"
    ));
    let config = write_config(&dir, &config);
    let out = proxy(&[
        "--config",
        config.to_str().unwrap(),
        "--explain",
        "faults_flaky",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.starts_with("faults_flaky: `flaky` of the server `faults`"),
        "{stdout}"
    );
    assert!(stdout.contains("idempotent: true"), "{stdout}");
    let line = |key: &str| {
        stdout
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{key} ")))
            .unwrap_or("")
            .to_owned()
    };
    assert!(
        line("transient").ends_with("from [servers.faults] on_error"),
        "{stdout}"
    );
    assert!(
        line("timeout").ends_with("from [defaults] on_error"),
        "{stdout}"
    );
    assert!(
        line("auth").ends_with("from the built-in default (fail-closed)"),
        "{stdout}"
    );

    // Both servers offer `echo`: each is offered under its server's name.
    let out = proxy(&["--config", config.to_str().unwrap(), "--explain", "echo"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr.contains("everything_echo") && stderr.contains("faults_echo"),
        "{stderr}"
    );
}

#[test]
fn a_session_past_its_cap_makes_no_more_calls_and_says_why() {
    let dir = scratch("caps");
    let config = format!(
        "[servers.faults]\ncommand = \"{}\"\n[servers.faults.tools.echo]\nmax_calls = 1\n",
        fault_server().display()
    );
    let config = write_config(&dir, &config);
    let (seen, _) = drive("caps", &config, &dir);
    let answers = seen["answers"].as_array().expect("three answers");
    assert_eq!(
        (answers[0]["error"].clone(), answers[0]["text"].clone()),
        (Value::Bool(false), Value::from("one"))
    );
    assert!(
        answers[1]["error"] == true
            && answers[1]["text"]
                .as_str()
                .unwrap()
                .contains("limit on calls of `echo`: at most 1"),
        "{seen}"
    );
    assert!(
        answers[2]["error"] == true
            && answers[2]["text"]
                .as_str()
                .unwrap()
                .contains("start a new session"),
        "{seen}"
    );
}

#[test]
fn over_streamable_http_each_client_gets_a_session_of_its_own() {
    let dir = scratch("http");
    let config = write_config(&dir, &faults_config(""));
    let server = HttpProxy::start(&config);
    let (first, _) = drive_at("recovery", &server.url, &config, &dir);
    assert_eq!(first["flaky"]["text"], "ok after 2 failures", "{first}");
    assert!(
        !first["tools_after"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "fail"),
        "{first}"
    );
    // A second client's session starts with every tool, whatever the first one broke.
    let _ = std::fs::remove_file(dir.join("flaky"));
    let (second, _) = drive_at("caps", &server.url, &config, &dir);
    assert!(
        second["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "fail"),
        "{second}"
    );
    let keys = std::fs::read_to_string(dir.join("flaky.keys")).expect("the key log");
    let first_key = keys.lines().next().unwrap();
    assert!(first_key.starts_with("proxy-"), "{keys}");
}
