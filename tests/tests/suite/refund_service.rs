//! The web service example (`examples/refund_service.rs`) end to end over loopback HTTP: a
//! refund above the limit waits for a manager, the process is killed (SIGKILL) while it waits,
//! a fresh process on the same directory serves the saved question from the store, signs the
//! manager's approval, and the refund is made once; a forged answer is refused.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// A directory of its own for the test, removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The service on `dir`, on a free loopback port: the process and its base URL.
async fn start(dir: &Path) -> (Child, String) {
    let mut process = Command::new(env!("CARGO_BIN_EXE_refund_service"))
        .arg(dir)
        .arg("127.0.0.1:0")
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the service starts");
    let stdout = process.stdout.take().expect("piped");
    let mut lines = BufReader::new(stdout).lines();
    let listening = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await.expect("readable stdout") {
            if let Some(address) = line.strip_prefix("LISTENING ") {
                return address.to_owned();
            }
        }
        panic!("the service ended before it listened");
    });
    let address = listening.await.expect("listening within a minute");
    (process, format!("http://{address}"))
}

async fn post(url: &str, body: Value, manager: Option<&str>) -> (u16, Value) {
    let mut request = reqwest::Client::new().post(url).json(&body);
    if let Some(password) = manager {
        request = request.header("x-manager", password);
    }
    let response = request.send().await.expect("the service answers");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn get(url: &str) -> (u16, Value) {
    let response = reqwest::get(url).await.expect("the service answers");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

fn payments(dir: &Path) -> Vec<String> {
    let log = std::fs::read_to_string(dir.join("payments.log")).unwrap_or_default();
    log.lines()
        .map(|line| {
            line.split_once(' ')
                .map_or(line, |(_, paid)| paid)
                .to_owned()
        })
        .collect()
}

#[tokio::test]
async fn a_refund_above_the_limit_waits_for_a_managers_signed_answer_across_a_restart() {
    let dir = std::env::temp_dir().join(format!("agent-errors-refunds-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let scratch = Scratch(dir.clone());
    let (mut first, base) = start(&dir).await;

    // A small refund is made at once.
    let small = json!({"order": "A-1", "amount": 40});
    let (status, body) = post(&format!("{base}/refunds"), small, None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(payments(&dir), ["A-1 40"]);

    // A large one waits: 202, with the question, and nothing paid.
    let large = json!({"order": "B-2", "amount": 250});
    let (status, body) = post(&format!("{base}/refunds"), large.clone(), None).await;
    assert_eq!(status, 202, "{body}");
    let run_id = body["run_id"].as_str().expect("a run id").to_owned();
    let asked = body["pending"][0].clone();
    assert_eq!(asked["tool"], "refund", "{body}");
    assert_eq!(payments(&dir), ["A-1 40"]);

    // The same run started again is refused with the fix, not a sequence conflict.
    let (status, body) = post(&format!("{base}/refunds"), large, None).await;
    assert_eq!(status, 409, "{body}");
    assert!(body["error"].as_str().unwrap().contains("resume"), "{body}");

    // The process dies while the refund waits.
    first.kill().await.expect("killed");
    let (_second, base) = start(&dir).await;

    // The question comes from the store, exactly as it was asked.
    let (status, saved) = get(&format!("{base}/runs/{run_id}/pending")).await;
    assert_eq!(status, 200, "{saved}");
    assert_eq!(saved[0], asked);

    // An answer nobody signed is refused: the run keeps waiting and nothing is paid.
    let forged = agent_errors::approval::Answer::to(
        &serde_json::from_value(asked.clone()).expect("a question"),
        agent_errors::approval::Decision::Approve,
    )
    .to_token();
    let url = format!("{base}/runs/{run_id}/answer");
    let (status, body) = post(&url, json!({"token": forged}), None).await;
    assert_eq!(status, 202, "{body}");
    assert!(payments(&dir).len() == 1);

    // Only a manager gets a signed answer.
    let approve = format!("{base}/runs/{run_id}/approve");
    let (status, _) = post(&approve, json!({}), Some("guess")).await;
    assert_eq!(status, 401);
    let (status, body) = post(&approve, json!({}), Some("let-me-approve")).await;
    assert_eq!(status, 200, "{body}");
    let token = body["tokens"][0].as_str().expect("a token").to_owned();
    assert!(
        token
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_'),
        "a URL-safe token: {token}"
    );

    // The signed answer: the refund is made, once.
    let (status, body) = post(&url, json!({"token": token}), None).await;
    assert_eq!(status, 200, "{body}");
    assert!(body["answer"].as_str().unwrap().contains("250"), "{body}");
    assert_eq!(payments(&dir), ["A-1 40", "B-2 250"]);

    // The answer again: the run is over (409), and nothing is paid twice.
    let (status, body) = post(&url, json!({"token": token}), None).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(payments(&dir), ["A-1 40", "B-2 250"]);
    drop(scratch);
}
