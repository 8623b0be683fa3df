//! A scripted HTTP/1.1 server on loopback for provider tests: each connection gets the next
//! reply of the script (a JSON answer, a server-sent event stream written piece by piece, a
//! reset, or silence), and every request is recorded with its headers and JSON body. Every
//! answer says `Connection: close`, so each request arrives on a fresh connection.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One piece of a streamed answer.
#[derive(Clone, Debug)]
pub enum Part {
    /// Bytes written as they are.
    Raw(String),
    /// Wait this long (real time) before the next part.
    Pause(Duration),
    /// Stay open and silent until the client gives up.
    Hang,
    /// Reset the connection (a RST, not a close): the client's next read fails.
    Reset,
}

/// What the server does with one connection.
#[derive(Clone, Debug)]
pub enum Reply {
    /// Accept the connection and reset it without reading or answering.
    Reset,
    /// Read the request and never answer.
    Hang,
    /// Answer with this status, headers and body.
    Answer {
        status: u16,
        headers: Vec<(String, String)>,
        body: String,
    },
    /// Answer 200 `text/event-stream`, then write these parts and close.
    Stream(Vec<Part>),
}

impl Reply {
    pub fn json(status: u16, body: Value) -> Reply {
        Reply::Answer {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.to_string(),
        }
    }

    pub fn with_header(mut self, name: &str, value: &str) -> Reply {
        if let Reply::Answer { headers, .. } = &mut self {
            headers.push((name.to_owned(), value.to_owned()));
        }
        self
    }
}

/// One request as the server saw it; `body` is `Null` for a connection that was reset.
#[derive(Clone, Debug)]
pub struct Seen {
    pub headers: HashMap<String, String>,
    pub body: Value,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
}

/// The server. Dropping it leaves the accept loop to end with the test's runtime.
pub struct Loopback {
    /// `http://127.0.0.1:PORT`, no trailing slash.
    pub url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Loopback {
    pub async fn start(replies: impl IntoIterator<Item = Reply>) -> Loopback {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let script = Arc::new(Mutex::new(replies.into_iter().collect::<VecDeque<_>>()));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let reply = script.lock().unwrap().pop_front();
                tokio::spawn(serve(socket, reply, Arc::clone(&log)));
            }
        });
        Loopback { url, seen }
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    pub fn requests(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    /// The JSON body of the `n`th request.
    pub fn body(&self, n: usize) -> Value {
        self.seen()[n].body.clone()
    }
}

async fn serve(mut socket: TcpStream, reply: Option<Reply>, log: Arc<Mutex<Vec<Seen>>>) {
    if let Some(Reply::Reset) = reply {
        log.lock().unwrap().push(Seen {
            headers: HashMap::new(),
            body: Value::Null,
        });
        // Zero linger turns the close into a RST: the client sees a reset, not an EOF.
        let _ = socket.set_zero_linger();
        return;
    }
    let Some(seen) = read_request(&mut socket).await else {
        return;
    };
    log.lock().unwrap().push(seen);
    match reply {
        Some(Reply::Answer {
            status,
            headers,
            body,
        }) => {
            let mut head = format!(
                "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n",
                body.len()
            );
            for (name, value) in headers {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
            head.push_str("\r\n");
            let _ = socket.write_all(head.as_bytes()).await;
            let _ = socket.write_all(body.as_bytes()).await;
        }
        Some(Reply::Stream(parts)) => {
            let head =
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
            let _ = socket.write_all(head.as_bytes()).await;
            for part in parts {
                match part {
                    Part::Raw(bytes) => {
                        let _ = socket.write_all(bytes.as_bytes()).await;
                        let _ = socket.flush().await;
                    }
                    Part::Pause(d) => tokio::time::sleep(d).await,
                    Part::Hang => tokio::time::sleep(Duration::from_secs(30)).await,
                    Part::Reset => {
                        let _ = socket.set_zero_linger();
                        return;
                    }
                }
            }
        }
        Some(Reply::Hang) => tokio::time::sleep(Duration::from_secs(30)).await,
        Some(Reply::Reset) => {}
        None => {
            let body = "unscripted request";
            let head = format!(
                "HTTP/1.1 418 X\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = socket.write_all(head.as_bytes()).await;
        }
    }
    let _ = socket.shutdown().await;
}

async fn read_request(socket: &mut TcpStream) -> Option<Seen> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let n = socket.read(&mut chunk).await.ok().filter(|&n| n > 0)?;
        buf.extend_from_slice(&chunk[..n]);
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_string();
        let headers: HashMap<String, String> = head
            .lines()
            .skip(1)
            .filter_map(|line| {
                let (name, value) = line.split_once(':')?;
                Some((name.trim().to_ascii_lowercase(), value.trim().to_owned()))
            })
            .collect();
        let length = headers
            .get("content-length")
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(0);
        if buf.len() >= end + 4 + length {
            let body =
                serde_json::from_slice(&buf[end + 4..end + 4 + length]).unwrap_or(Value::Null);
            return Some(Seen { headers, body });
        }
    }
}

/// Records the delays a provider asks to sleep and returns at once, so tests on real sockets
/// assert the exact waits without waiting.
#[derive(Clone, Default)]
pub struct Sleeps(Arc<Mutex<Vec<Duration>>>);

impl Sleeps {
    pub fn recorder(&self) -> impl Fn(Duration) -> std::future::Ready<()> + Send + Sync + use<> {
        let log = self.0.clone();
        move |delay: Duration| {
            log.lock().unwrap().push(delay);
            std::future::ready(())
        }
    }

    pub fn taken(&self) -> Vec<Duration> {
        self.0.lock().unwrap().clone()
    }
}
