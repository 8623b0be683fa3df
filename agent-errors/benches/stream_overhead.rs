//! What the OpenAI provider costs per streamed answer, in instructions, for
//! `valgrind --tool=callgrind` to count: a loopback server in this process answers every request
//! with the same SSE body of 1,000 text deltas, read one of two ways.
//!
//! - `raw`: reqwest posts a fixed request body, reads the response chunk by chunk and splits it
//!   into lines, counting the `data:` lines (no library in between);
//! - `provider`: `OpenAiModel::stream` sends the request and its stream is drained, counting the
//!   text deltas.
//!
//! `stream_overhead <variant> <n>` makes one warm-up request, then `n` more;
//! `scripts/callgrind-stream.sh` runs it for `n` and for 0 and divides the difference by `n`.
//! Both variants pay the same server and the same HTTP client, so their difference is the
//! provider's own work: building and serializing the request, the SSE parser, decoding each
//! chunk's JSON, the stream's event and idle-timeout checks, and the recovery loop around it.
//!
//! Not a criterion bench: run `bash scripts/callgrind-stream.sh`.

use std::hint::black_box;

use agent_errors::openai::OpenAiModel;
use agent_errors::{ChatRequest, Message, stream::StreamEvent};
use futures_util::StreamExt;
use tokio::net::TcpListener;

use loopback::serve;

// The loopback server both streaming benches read from.
#[path = "loopback/mod.rs"]
mod loopback;

const DELTAS: usize = 1000;

/// The SSE body OpenAI sends for an answer of `DELTAS` text deltas, with usage at the end.
fn sse_body() -> String {
    let mut body = String::new();
    let chunk = |delta: &str, finish: &str| {
        format!(
            "data: {{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":0,\
             \"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":{finish}}}]}}\n\n"
        )
    };
    for i in 0..DELTAS {
        body.push_str(&chunk(&format!("{{\"content\":\"word{i} \"}}"), "null"));
    }
    body.push_str(&chunk("{}", "\"stop\""));
    body.push_str(
        "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":0,\
         \"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":1000}}\n\n",
    );
    body.push_str("data: [DONE]\n\n");
    body
}

/// Reads the SSE body with reqwest alone: chunks split into lines, `data:` lines counted.
async fn raw(client: &reqwest::Client, url: &str, request_body: &'static str) -> usize {
    let mut response = client
        .post(url)
        .header("content-type", "application/json")
        .body(request_body)
        .send()
        .await
        .expect("the loopback server answers");
    let mut carry = Vec::new();
    let mut data_lines = 0;
    while let Some(chunk) = response.chunk().await.expect("a whole body") {
        carry.extend_from_slice(&chunk);
        let mut start = 0;
        while let Some(at) = carry[start..].iter().position(|&b| b == b'\n') {
            let line = &carry[start..start + at];
            data_lines += usize::from(line.starts_with(b"data: "));
            start += at + 1;
        }
        carry.drain(..start);
    }
    data_lines
}

/// Reads the same body through the provider's stream.
async fn provider(model: &OpenAiModel, request: &ChatRequest) -> usize {
    let mut stream = model.stream(request).await.expect("the stream opens");
    let mut deltas = 0;
    while let Some(event) = stream.next().await {
        deltas += usize::from(matches!(event, Ok(StreamEvent::TextDelta(_))));
    }
    deltas
}

fn main() {
    let mut args = std::env::args().skip(1);
    let variant = args.next().unwrap_or_default();
    let n: u64 = args.next().and_then(|n| n.parse().ok()).unwrap_or(0);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime");
    let body = sse_body();
    let response: &'static [u8] = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
    .leak();
    let request = ChatRequest::new(vec![Message::user("Tell me a long story.")], vec![]);
    let request_body = r#"{"model":"m","messages":[{"role":"user","content":"Tell me a long story."}],"stream":true,"stream_options":{"include_usage":true}}"#;
    rt.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let base = format!("http://{}/v1", listener.local_addr().expect("bound"));
        tokio::spawn(serve(listener, response));
        let url = format!("{base}/chat/completions");
        let client = reqwest::Client::new();
        let model = OpenAiModel::builder()
            .base_url(&base)
            .model("m")
            .build()
            .expect("a valid model");
        for _ in 0..=n {
            let read = match variant.as_str() {
                "raw" => raw(&client, &url, black_box(request_body)).await,
                "provider" => provider(&model, black_box(&request)).await,
                other => panic!("unknown variant `{other}`"),
            };
            assert!(read >= DELTAS, "{variant} read {read} of {DELTAS} deltas");
        }
    });
}
