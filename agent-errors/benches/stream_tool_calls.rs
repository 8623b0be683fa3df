//! What decoding a streamed answer of many tool calls costs, for both providers, in
//! instructions for `valgrind --tool=callgrind` to count: a loopback server in this process
//! answers with one SSE body of `calls` tool calls, each started, given its arguments and
//! finished the way the provider's wire format does it, and the provider's stream is drained.
//!
//! `stream_tool_calls <openai|anthropic> <calls> <requests>` builds the body, starts the server
//! and makes `requests` requests (0 or 1). `scripts/callgrind-tool-calls.sh` runs it with 1 and
//! with 0 requests and subtracts, so building the body is not counted: what is left is the
//! provider reading the answer (HTTP, the SSE parser, decoding each event, the stream's limits).
//! A decoder that is linear in the number of calls costs the same per call at 10k and 100k.
//!
//! Not a criterion bench: run `bash scripts/callgrind-tool-calls.sh`.

use std::hint::black_box;

use agent_errors::anthropic::AnthropicModel;
use agent_errors::openai::OpenAiModel;
use agent_errors::{
    ChatRequest, Message,
    stream::{ChatStream, StreamEvent},
};
use futures_util::StreamExt;
use tokio::net::TcpListener;

use loopback::serve;

// The loopback server both streaming benches read from.
#[path = "loopback/mod.rs"]
mod loopback;

/// An OpenAI chat-completions stream of `calls` tool calls: per call, one chunk that starts it
/// (id, name, empty arguments) and one with its arguments; then the finish and `[DONE]`.
fn openai_body(calls: usize) -> String {
    let mut body = String::new();
    let chunk = |tool_call: String| {
        format!(
            "data: {{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":0,\
             \"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{{\"tool_calls\":[{tool_call}]}},\
             \"finish_reason\":null}}]}}\n\n"
        )
    };
    for i in 0..calls {
        body.push_str(&chunk(format!(
            "{{\"index\":{i},\"id\":\"call_{i}\",\"type\":\"function\",\
             \"function\":{{\"name\":\"lookup\",\"arguments\":\"\"}}}}"
        )));
        body.push_str(&chunk(format!(
            "{{\"index\":{i},\"function\":{{\"arguments\":\"{{\\\"n\\\":{i}}}\"}}}}"
        )));
    }
    body.push_str(
        "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":0,\
         \"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
    );
    body.push_str("data: [DONE]\n\n");
    body
}

/// A Messages API stream of `calls` tool calls: per call, `content_block_start` (a `tool_use`
/// with `{}` input), one `input_json_delta` and `content_block_stop`; around them the message's
/// start, delta and stop.
fn anthropic_body(calls: usize) -> String {
    let mut body = String::from(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\
         \"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[],\
         \"usage\":{\"input_tokens\":9,\"output_tokens\":1}}}\n\n",
    );
    for i in 0..calls {
        body.push_str(&format!(
            "event: content_block_start\ndata: {{\"type\":\"content_block_start\",\"index\":{i},\
             \"content_block\":{{\"type\":\"tool_use\",\"id\":\"toolu_{i}\",\"name\":\"lookup\",\
             \"input\":{{}}}}}}\n\n\
             event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":{i},\
             \"delta\":{{\"type\":\"input_json_delta\",\"partial_json\":\"{{\\\"n\\\":{i}}}\"}}}}\n\n\
             event: content_block_stop\ndata: {{\"type\":\"content_block_stop\",\"index\":{i}}}\n\n"
        ));
    }
    body.push_str(
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\
         \"tool_use\"},\"usage\":{\"output_tokens\":1000}}\n\n\
         event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    );
    body
}

/// Drains a stream, counting the tool calls it started; an error fails the bench.
async fn started_calls(stream: ChatStream<'static>) -> usize {
    let mut stream = stream;
    let mut started = 0;
    while let Some(event) = stream.next().await {
        let event = event.expect("the stream is whole");
        started += usize::from(matches!(event, StreamEvent::ToolCallStarted { .. }));
    }
    started
}

fn main() {
    let mut args = std::env::args().skip(1);
    let provider = args.next().unwrap_or_default();
    let arg = |a: Option<String>| a.and_then(|n| n.parse::<usize>().ok()).unwrap_or(0);
    let calls = arg(args.next());
    let requests = arg(args.next());
    let body = match provider.as_str() {
        "openai" => openai_body(calls),
        "anthropic" => anthropic_body(calls),
        other => panic!("unknown provider `{other}`: openai or anthropic"),
    };
    let response: &'static [u8] = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
    .leak();
    drop(body);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime");
    let request = ChatRequest::new(vec![Message::user("Look up every number.")], vec![]);
    rt.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let base = format!("http://{}", listener.local_addr().expect("bound"));
        tokio::spawn(serve(listener, response));
        let openai = OpenAiModel::builder()
            .base_url(format!("{base}/v1"))
            .model("m")
            .build()
            .expect("a valid model");
        let anthropic = AnthropicModel::builder()
            .base_url(&base)
            .model("m")
            .build()
            .expect("a valid model");
        for _ in 0..requests {
            let stream = match provider.as_str() {
                "openai" => openai.stream(black_box(&request)).await.ok(),
                _ => anthropic.stream(black_box(&request)).await.ok(),
            };
            let started = started_calls(stream.expect("the stream opens")).await;
            assert_eq!(
                started, calls,
                "{provider} started {started} of {calls} calls"
            );
        }
    });
}
