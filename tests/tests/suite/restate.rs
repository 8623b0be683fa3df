//! Agent runs on a real Restate server: each test starts `restate-server` (installed by
//! `scripts/install-restate-server.sh`) on free loopback ports with a base dir of its own, serves
//! the agent from `restate_service` in a child process, registers it through the admin API,
//! kills the service or the server mid-run, and checks what the run did: which steps ran, how
//! often, and how it ended.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use agent_errors::approval::{Answer, AnswerKey, Decision, PendingApproval};
use agent_errors::checkpoint::{CheckpointStore, SqliteCheckpoints};
use agent_errors_test_support::{RestateServer, StartError, free_port};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

/// A directory of its own for one test, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "agent-errors-restate-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("service")).expect("a temporary directory");
        Scratch(dir)
    }

    fn service(&self) -> PathBuf {
        self.0.join("service")
    }

    fn lines(&self, file: &str) -> Vec<String> {
        std::fs::read_to_string(self.service().join(file))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A Restate server on loopback ports of its own, its state under the test's directory.
struct Server(RestateServer);

impl Server {
    async fn start(dir: &Path) -> Server {
        Server::started(RestateServer::start(dir.join("restate")).await)
    }

    async fn start_on(base: PathBuf, ports: (u16, u16, u16)) -> Server {
        Server::started(RestateServer::start_on(base, ports).await)
    }

    /// A server that did not start fails the test with the reason (not installed, no answer).
    fn started(server: Result<RestateServer, StartError>) -> Server {
        Server(server.unwrap_or_else(|error| panic!("{error}")))
    }

    /// Registers the service listening on `port`.
    async fn register(&self, port: u16) {
        if let Err(error) = self.0.register(port).await {
            panic!("{error}");
        }
    }

    /// Starts `Assistant/ask` on `question` without waiting; the invocation's id.
    async fn send(&self, question: &str, idempotency_key: Option<&str>) -> String {
        let url = format!("{}/Assistant/ask/send", self.0.ingress_url());
        let mut request = reqwest::Client::new().post(url).json(&question);
        if let Some(key) = idempotency_key {
            request = request.header("idempotency-key", key);
        }
        let response = request.send().await.expect("ingress");
        let body: serde_json::Value = response.json().await.expect("a JSON answer");
        body["invocationId"]
            .as_str()
            .unwrap_or_else(|| panic!("no invocation id in {body}"))
            .to_owned()
    }

    /// Waits for the invocation's result: the handler's answer, or its terminal error.
    async fn attach(&self, invocation: &str) -> String {
        let url = format!(
            "{}/restate/invocation/{invocation}/attach",
            self.0.ingress_url()
        );
        let response = tokio::time::timeout(
            Duration::from_secs(60),
            reqwest::Client::new().get(url).send(),
        )
        .await
        .expect("the run finishes within a minute")
        .expect("ingress");
        response.text().await.expect("a body")
    }

    /// The invocation's status as the server tells it (`running`, `suspended`, `completed`,
    /// ...), from its SQL introspection API.
    async fn status(&self, invocation: &str) -> String {
        let query = format!("SELECT status FROM sys_invocation WHERE id = '{invocation}'");
        let response = reqwest::Client::new()
            .post(format!("{}/query", self.0.admin_url()))
            .header("accept", "application/json")
            .json(&serde_json::json!({ "query": query }))
            .send()
            .await
            .expect("admin API");
        let body: serde_json::Value = response.json().await.expect("a JSON answer");
        body["rows"][0]["status"]
            .as_str()
            .unwrap_or_else(|| panic!("no status in {body}"))
            .to_owned()
    }

    /// Kills the server as a crash would; its base directory and ports, to start it again.
    fn kill(self) -> (PathBuf, (u16, u16, u16)) {
        self.0.kill()
    }
}

/// The agent's service in a child process.
struct Service {
    process: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Service {
    async fn start(port: u16, scenario: &str, dir: &Path, gate: &str) -> Service {
        Service::start_keyed(port, scenario, dir, gate, None).await
    }

    /// [`start`](Self::start), the agent taking only answers signed with `key` when given.
    async fn start_keyed(
        port: u16,
        scenario: &str,
        dir: &Path,
        gate: &str,
        key: Option<&str>,
    ) -> Service {
        let mut command = Command::new(env!("CARGO_BIN_EXE_restate_service"));
        if let Some(key) = key {
            command.env("ANSWER_KEY", key);
        }
        let mut process = command
            .arg(port.to_string())
            .arg(scenario)
            .arg(dir)
            .arg(gate)
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("restate_service starts");
        let stdout = process.stdout.take().expect("piped");
        let mut service = Service {
            process,
            lines: BufReader::new(stdout).lines(),
        };
        service.wait_for("LISTENING").await;
        service
    }

    /// Waits until the service prints a line containing `signal`.
    async fn wait_for(&mut self, signal: &str) {
        let lines = &mut self.lines;
        let waited = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(line) = lines.next_line().await.expect("readable stdout") {
                if line.contains(signal) {
                    return;
                }
            }
            panic!("the service ended without printing {signal}");
        });
        waited.await.expect("the service got there within a minute");
    }

    async fn kill(mut self) {
        self.process.kill().await.expect("the service is killed");
    }

    /// Waits until the service prints `AWAKEABLE <id> <question>`; the id and the question.
    async fn awakeable(&mut self) -> (String, PendingApproval) {
        let lines = &mut self.lines;
        let waited = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(line) = lines.next_line().await.expect("readable stdout") {
                if let Some(announced) = line.strip_prefix("AWAKEABLE ") {
                    let (id, question) = announced.split_once(' ').expect("an id and a question");
                    let question = serde_json::from_str(question).expect("the question's JSON");
                    return (id.to_owned(), question);
                }
            }
            panic!("the service ended without announcing an awakeable");
        });
        waited
            .await
            .expect("the call waited for a person within a minute")
    }
}

impl Server {
    /// Resolves the awakeable `id` with `body`, as a person would over Restate's API.
    async fn answer(&self, id: &str, body: &impl serde::Serialize) {
        let url = format!("{}/restate/awakeables/{id}/resolve", self.0.ingress_url());
        let response = reqwest::Client::new()
            .post(url)
            .json(body)
            .send()
            .await
            .expect("ingress");
        assert!(response.status().is_success(), "{}", response.status());
    }
}

/// The requests the model answered, by how many messages each had.
fn model_requests(scratch: &Scratch) -> Vec<usize> {
    scratch
        .lines("model.log")
        .iter()
        .map(|line| {
            line.split(' ')
                .next()
                .unwrap_or("")
                .parse()
                .expect("a count")
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_killed_after_a_side_effect_finishes_the_run_without_doing_it_again() {
    let scratch = Scratch::new("side-effect");
    let server = Server::start(&scratch.0).await;
    let port = free_port();
    let mut service = Service::start(port, "charge", &scratch.service(), "hang").await;
    server.register(port).await;

    let invocation = server.send("charge 2.50", None).await;
    // The charge is journaled; the model's next request is held, and the service dies there.
    service.wait_for("MODEL_WAITING").await;
    assert_eq!(scratch.lines("charge.log").len(), 1);
    service.kill().await;
    let _service = Service::start(port, "charge", &scratch.service(), "open").await;
    let answer = server.attach(&invocation).await;

    let charges = scratch.lines("charge.log");
    assert_eq!(
        charges.len(),
        1,
        "the side effect happened once: {charges:?}"
    );
    assert_eq!(
        charges[0],
        format!("{invocation}:call_1"),
        "keyed by the invocation and call"
    );
    assert_eq!(
        answer,
        format!("\"told: charged 250 with key {invocation}:call_1\"")
    );
    // The first request (the question) was answered once, before the crash; the second (after
    // the tool's result) once, after it.
    assert_eq!(model_requests(&scratch), vec![1, 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_with_a_checkpoint_store_replays_on_restate_and_saves_no_checkpoint() {
    let scratch = Scratch::new("stored");
    let server = Server::start(&scratch.0).await;
    let port = free_port();
    let mut service = Service::start(port, "charge-stored", &scratch.service(), "hang").await;
    server.register(port).await;

    let invocation = server.send("charge 2.50", None).await;
    service.wait_for("MODEL_WAITING").await;
    service.kill().await;
    let _service = Service::start(port, "charge-stored", &scratch.service(), "open").await;
    let answer = server.attach(&invocation).await;

    // Replayed from Restate's journal, not refused by the store as a run id already taken.
    assert_eq!(
        answer,
        format!("\"told: charged 250 with key {invocation}:call_1\"")
    );
    assert_eq!(scratch.lines("charge.log").len(), 1, "charged once");
    // Restate's journal is the run's one journal: the store holds nothing of it.
    let store =
        SqliteCheckpoints::open(scratch.service().join("checkpoints.db")).expect("the store");
    let saved = store.load(&invocation).await.expect("the store answers");
    assert!(saved.is_none(), "a checkpoint was saved: {saved:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_run_and_restarted_on_its_base_dir_gives_the_same_answer() {
    let scratch = Scratch::new("server-killed");
    let server = Server::start(&scratch.0).await;
    let port = free_port();
    let mut service = Service::start(port, "charge", &scratch.service(), "release").await;
    server.register(port).await;

    let invocation = server.send("charge 2.50", None).await;
    service.wait_for("MODEL_WAITING").await;
    let (base, ports) = server.kill();
    let server = Server::start_on(base, ports).await;
    std::fs::write(scratch.service().join("release"), "").expect("the release file");
    let answer = server.attach(&invocation).await;

    assert_eq!(
        answer,
        format!("\"told: charged 250 with key {invocation}:call_1\"")
    );
    assert_eq!(
        scratch.lines("charge.log").len(),
        1,
        "the side effect happened once"
    );
    assert_eq!(model_requests(&scratch).first(), Some(&1));
    assert_eq!(
        model_requests(&scratch).iter().filter(|&&n| n == 1).count(),
        1,
        "the question was asked once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_loop_spends_no_more_attempts_than_the_retry_policy_allows() {
    let scratch = Scratch::new("crash-loop");
    let server = Server::start(&scratch.0).await;
    let port = free_port();
    let mut service = Service::start(port, "flaky", &scratch.service(), "open").await;
    server.register(port).await;

    let invocation = server.send("try it", None).await;
    // `flaky` fails every time under `retry(3)` (three attempts): the service dies in each
    // backoff, once the failed attempt was journaled. A restarted service replays the sleeps
    // already journaled (and says so), so it is killed only in a sleep after a new attempt.
    for failed in 1..=2 {
        loop {
            service.wait_for("durable sleep").await;
            if scratch.lines("flaky.log").len() >= failed {
                break;
            }
        }
        service.kill().await;
        service = Service::start(port, "flaky", &scratch.service(), "open").await;
    }
    let answer = server.attach(&invocation).await;

    let attempts = scratch.lines("flaky.log");
    assert_eq!(
        attempts.len(),
        3,
        "the policy's three attempts, no more: {attempts:?}"
    );
    // Out of attempts, the failure ended the run: a terminal error, so Restate does not retry it.
    assert!(
        answer.contains("stayed unavailable after several retries"),
        "{answer}"
    );
    drop(service);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_waiting_out_a_retry_after_survives_a_service_restart_and_resumes_after_it() {
    let scratch = Scratch::new("retry-after");
    let server = Server::start(&scratch.0).await;
    let port = free_port();
    let mut service = Service::start(port, "rate-limited", &scratch.service(), "open").await;
    server.register(port).await;

    let invocation = server.send("hello", None).await;
    service.wait_for("durable sleep").await;
    service.kill().await;
    let _service = Service::start(port, "rate-limited", &scratch.service(), "open").await;
    let answer = server.attach(&invocation).await;

    assert_eq!(answer, "\"after the wait\"");
    let log = scratch.lines("model.log");
    assert_eq!(log.len(), 2, "the 429 once, then the answer: {log:?}");
    let at = |line: &str| -> u128 { line.rsplit(' ').next().unwrap_or("").parse().expect("ms") };
    let waited = at(&log[1]) - at(&log[0]);
    assert!(
        waited >= 1000,
        "the second request came {waited} ms after the 429"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_requests_with_one_idempotency_key_are_one_run() {
    let scratch = Scratch::new("idempotency");
    let server = Server::start(&scratch.0).await;
    let port = free_port();
    let _service = Service::start(port, "charge", &scratch.service(), "open").await;
    server.register(port).await;

    let first = server.send("charge 2.50", Some("order-17")).await;
    let second = server.send("charge 2.50", Some("order-17")).await;
    assert_eq!(first, second, "one invocation");
    let answer = server.attach(&first).await;

    assert_eq!(
        answer,
        format!("\"told: charged 250 with key {first}:call_1\"")
    );
    assert_eq!(scratch.lines("charge.log").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_call_runs_once_even_when_the_service_restarted_while_it_waited() {
    let scratch = Scratch::new("approve");
    let server = Server::start(&scratch.0).await;
    let port = free_port();
    let mut service = Service::start(port, "transfer", &scratch.service(), "open").await;
    server.register(port).await;

    let invocation = server.send("send 900", None).await;
    let (awakeable, pending) = service.awakeable().await;
    // Nothing holds the wait: the service goes away and another one takes the answer.
    service.kill().await;
    let _service = Service::start(port, "transfer", &scratch.service(), "open").await;
    assert!(
        scratch.lines("transfer.log").is_empty(),
        "not run before the answer"
    );
    server
        .answer(&awakeable, &Answer::to(&pending, Decision::Approve))
        .await;
    let answer = server.attach(&invocation).await;

    assert_eq!(
        scratch.lines("transfer.log").len(),
        1,
        "run once, after the approval"
    );
    assert_eq!(
        answer,
        format!("\"told: charged 250 with key {invocation}:call_1\"")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_call_never_runs_and_the_model_is_told() {
    let scratch = Scratch::new("deny");
    let server = Server::start(&scratch.0).await;
    let port = free_port();
    let mut service = Service::start(port, "transfer", &scratch.service(), "open").await;
    server.register(port).await;

    let invocation = server.send("send 900", None).await;
    let (awakeable, pending) = service.awakeable().await;
    let deny = Answer::to(&pending, Decision::Deny("too much".into()));
    server.answer(&awakeable, &deny).await;
    let answer = server.attach(&invocation).await;

    assert!(
        scratch.lines("transfer.log").is_empty(),
        "the tool never ran"
    );
    assert!(
        answer.contains("too much"),
        "the model was told why: {answer}"
    );
}

/// A run waiting for a person is suspended within seconds of asking (the service is bound with
/// the library's options), not after the server's default minute of inactivity: nothing holds
/// it. The person's answer, with edited arguments in the documented JSON, then resumes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_waiting_for_a_person_is_suspended_within_seconds_and_resumes_on_the_answer() {
    let scratch = Scratch::new("suspend");
    let server = Server::start(&scratch.0).await;
    let port = free_port();
    let mut service = Service::start(port, "transfer", &scratch.service(), "open").await;
    server.register(port).await;

    let invocation = server.send("send 900", None).await;
    let (awakeable, pending) = service.awakeable().await;
    // Half the server's default inactivity timeout: a run held until then fails here.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let status = server.status(&invocation).await;
        if status == "suspended" {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still `{status}` 30 s after it began to wait"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The answer's documented JSON, as a person's client writes it.
    let edited = serde_json::json!({
        "call_id": pending.call_id,
        "digest": pending.digest,
        "decision": { "ApproveWith": r#"{"to": "Acme", "amount": 90}"# },
    });
    server.answer(&awakeable, &edited).await;
    let answer = server.attach(&invocation).await;
    assert!(answer.contains("charged 250"), "{answer}");
    assert_eq!(
        scratch.lines("transfer.args"),
        [r#"{"to": "Acme", "amount": 90}"#],
        "run once, with the person's arguments"
    );
}

/// An answer bound to the question and awakeable it resolves, and nothing else: one that is not
/// an answer, and one written for an earlier awakeable of the same question, are refused and the
/// person is asked again on a new awakeable; an answer that expired never runs the call, and
/// the model is told it expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_awakeable_takes_only_an_answer_bound_to_it_and_in_time() {
    let scratch = Scratch::new("bound");
    let server = Server::start(&scratch.0).await;
    let port = free_port();
    let mut service = Service::start(port, "transfer", &scratch.service(), "open").await;
    server.register(port).await;

    let invocation = server.send("send 900", None).await;
    let (first, asked_first) = service.awakeable().await;
    server.answer(&first, &serde_json::json!("Approve")).await;
    let (second, asked_second) = service.awakeable().await;
    assert_ne!(first, second, "asked again on a new awakeable");
    assert_ne!(
        asked_first.digest, asked_second.digest,
        "bound to its awakeable"
    );
    // The first awakeable's answer, delivered to the second.
    let replayed = Answer::to(&asked_first, Decision::Approve);
    server.answer(&second, &replayed).await;
    let (third, asked_third) = service.awakeable().await;
    let expired = Answer::to(&asked_third, Decision::Approve)
        .expires_at(std::time::SystemTime::now() - Duration::from_secs(1));
    server.answer(&third, &expired).await;
    let answer = server.attach(&invocation).await;

    assert!(
        scratch.lines("transfer.log").is_empty(),
        "the tool never ran"
    );
    assert!(answer.contains("expired"), "the model was told: {answer}");
    assert!(
        !answer.contains("denied"),
        "not told it was denied: {answer}"
    );
}

/// On an agent with an answer key, an unsigned answer to the awakeable is refused and asked
/// again; a signed one runs the call once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_awakeable_on_an_agent_with_a_key_takes_only_a_signed_answer() {
    let secret = "a key the service and the approval side share";
    let key = AnswerKey::new(secret).unwrap();
    let scratch = Scratch::new("signed");
    let server = Server::start(&scratch.0).await;
    let port = free_port();
    let dir = scratch.service();
    let mut service = Service::start_keyed(port, "transfer", &dir, "open", Some(secret)).await;
    server.register(port).await;

    let invocation = server.send("send 900", None).await;
    let (first, pending) = service.awakeable().await;
    server
        .answer(&first, &Answer::to(&pending, Decision::Approve))
        .await;
    let (second, pending) = service.awakeable().await;
    let signed = Answer::to(&pending, Decision::Approve).signed(&key);
    server.answer(&second, &signed).await;
    let answer = server.attach(&invocation).await;

    assert_eq!(scratch.lines("transfer.log").len(), 1, "run once, signed");
    assert!(answer.contains("charged 250"), "{answer}");
}
