//! What providers share to read a streamed HTTP answer: the SSE line parser with its size caps,
//! the idle and first-event limits, and the open step that waits for the first event.

use std::time::Duration;

use futures_util::StreamExt;

use super::{ChatStream, StreamError, StreamEvent};
use crate::error::BoxError;

/// The longest SSE line accepted (256 KiB); a longer one fails the stream as malformed.
pub(crate) const MAX_LINE_BYTES: usize = 256 * 1024;
/// The largest SSE event accepted (1 MiB of `data`).
pub(crate) const MAX_EVENT_BYTES: usize = 1024 * 1024;
/// The most of one streamed answer read (64 MiB): a longest real answer (128k output tokens,
/// about a hundred bytes of event framing per delta) is well under it, while a server that
/// never stops sending content cannot grow the caller's accumulated answer without bound.
pub(crate) const MAX_STREAM_BYTES: usize = 64 * 1024 * 1024;
/// The longest error type kept from an error event: it is shown in the error's message.
const MAX_ERROR_TYPE_CHARS: usize = 100;

/// One server-sent event: its `event:` name, if any, and its `data:` lines joined by `\n`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SseEvent {
    pub(crate) event: Option<String>,
    pub(crate) data: String,
}

/// An incremental SSE parser: bytes in, whole events out, memory bounded by the caps.
#[derive(Debug, Default)]
pub(crate) struct SseParser {
    line: Vec<u8>,
    event: Option<String>,
    data: String,
    has_data: bool,
}

impl SseParser {
    /// Feeds a chunk; returns the events it completed. Whole lines inside the chunk are read in
    /// place; only a line the chunk cuts off is copied, to wait for the rest.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Result<Vec<SseEvent>, StreamError> {
        let mut events = Vec::new();
        let mut rest = chunk;
        while let Some(at) = rest.iter().position(|&b| b == b'\n') {
            let piece = &rest[..at];
            rest = &rest[at + 1..];
            let event = if self.line.is_empty() {
                check_line_len(piece.len())?;
                self.complete_line(piece)
            } else {
                check_line_len(self.line.len() + piece.len())?;
                self.line.extend_from_slice(piece);
                let mut line = std::mem::take(&mut self.line);
                let event = self.complete_line(&line);
                line.clear();
                self.line = line;
                event
            };
            events.extend(event?);
        }
        check_line_len(self.line.len() + rest.len())?;
        self.line.extend_from_slice(rest);
        Ok(events)
    }

    fn complete_line(&mut self, line: &[u8]) -> Result<Option<SseEvent>, StreamError> {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let line = std::str::from_utf8(line)
            .map_err(|_| StreamError::malformed("a line that is not UTF-8", ""))?;
        self.line_done(line)
    }

    fn line_done(&mut self, line: &str) -> Result<Option<SseEvent>, StreamError> {
        if line.is_empty() {
            if !self.has_data {
                self.event = None;
                return Ok(None);
            }
            self.has_data = false;
            return Ok(Some(SseEvent {
                event: self.event.take(),
                data: std::mem::take(&mut self.data),
            }));
        }
        if line.starts_with(':') {
            return Ok(None);
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "data" => {
                if self.data.len() + value.len() + 1 > MAX_EVENT_BYTES {
                    return Err(StreamError::malformed(
                        format!("an event larger than {MAX_EVENT_BYTES} bytes"),
                        "",
                    ));
                }
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.event = Some(value.to_owned()),
            _ => {}
        }
        Ok(None)
    }
}

fn check_line_len(len: usize) -> Result<(), StreamError> {
    if len > MAX_LINE_BYTES {
        return Err(StreamError::malformed(
            format!("a line longer than {MAX_LINE_BYTES} bytes"),
            "",
        ));
    }
    Ok(())
}

/// A wire format's reading of SSE events.
pub(crate) trait Decoder: Send + 'static {
    /// The stream events one SSE event stands for, or why it is malformed or an error.
    fn decode(&mut self, event: SseEvent) -> Result<Vec<StreamEvent>, BoxError>;
    /// Whether the end marker came: after it, the connection closing is the normal end.
    fn is_done(&self) -> bool;
}

/// The stream of a 200 answer's body: chunks through the parser and the decoder. Every way
/// the body can stop before the decoder saw the end marker is [`StreamError::EndedEarly`], its
/// cause as its source: the body closing (an `UnexpectedEof`), a read failing (reqwest's
/// error), the body passing [`MAX_STREAM_BYTES`] ([`StreamError::TooLarge`]).
pub(crate) fn decode_body<D: Decoder>(
    response: reqwest::Response,
    decoder: D,
) -> ChatStream<'static> {
    let body = Body {
        response,
        parser: SseParser::default(),
        decoder,
        pending: std::collections::VecDeque::new(),
        error: None,
        over: false,
        read: 0,
    };
    Box::pin(futures_util::stream::unfold(body, |mut body| async move {
        let item = body.next().await?;
        Some((item, body))
    }))
}

/// Where the decoding of an answer's body stands between two items of its stream.
struct Body<D> {
    response: reqwest::Response,
    parser: SseParser,
    decoder: D,
    pending: std::collections::VecDeque<StreamEvent>,
    /// An error found after events still pending: it comes after them.
    error: Option<BoxError>,
    over: bool,
    /// Bytes of the body read so far.
    read: usize,
}

impl<D: Decoder> Body<D> {
    /// The next item: an event decoded already, else the error found after them, else what the
    /// next chunks hold; `None` once the stream is over.
    async fn next(&mut self) -> Option<Result<StreamEvent, BoxError>> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(Ok(event));
            }
            if let Some(error) = self.error.take() {
                self.over = true;
                return Some(Err(error));
            }
            if self.over || self.decoder.is_done() {
                return None;
            }
            if let Err(error) = self.read_chunk().await {
                self.over = true;
                return Some(Err(error));
            }
        }
    }

    /// Reads one chunk and decodes the SSE events it completes; the error when the body ended,
    /// failed or grew too large.
    async fn read_chunk(&mut self) -> Result<(), BoxError> {
        let chunk = match self.response.chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => return Err(Box::new(StreamError::closed())),
            // reqwest writes the request URL into its error, credentials included.
            Err(error) => return Err(Box::new(StreamError::ended_early(error.without_url()))),
        };
        self.read = self.read.saturating_add(chunk.len());
        if self.read > MAX_STREAM_BYTES {
            return Err(Box::new(StreamError::ended_too_large(MAX_STREAM_BYTES)));
        }
        let events = self.parser.push(&chunk)?;
        self.decode(events);
        Ok(())
    }

    /// Decodes `events` into the pending events, up to the end marker; a decoder's error is kept
    /// to come after the events before it.
    fn decode(&mut self, events: Vec<SseEvent>) {
        for event in events {
            match self.decoder.decode(event) {
                Ok(decoded) => self.pending.extend(decoded),
                Err(error) => {
                    self.error = Some(error);
                    return;
                }
            }
            if self.decoder.is_done() {
                return;
            }
        }
    }
}

/// The time limits of a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    pub(crate) first_event: Duration,
    pub(crate) idle: Duration,
    /// How long the whole answer may take, counted from its headers; `None`: no limit.
    pub(crate) deadline: Option<Duration>,
}

/// Waits for the stream's first event (within the first-event limit): a failure here is a
/// failed call the provider may retry. On success, the stream from that event on, each next
/// event within the idle limit and the whole answer within its deadline: a stream that drips
/// an event just inside the idle limit still ends.
pub(crate) async fn open(
    mut stream: ChatStream<'static>,
    limits: Limits,
) -> Result<ChatStream<'static>, BoxError> {
    let deadline = limits
        .deadline
        .map(|limit| (limit, tokio::time::Instant::now() + limit));
    let first = match tokio::time::timeout(limits.first_event, stream.next()).await {
        Err(_) => {
            return Err(Box::new(StreamError::first_event_timeout(
                limits.first_event,
            )));
        }
        Ok(None) => return Err(Box::new(StreamError::closed())),
        Ok(Some(Err(error))) => return Err(error),
        Ok(Some(Ok(event))) => event,
    };
    let idle = limits.idle;
    let rest = futures_util::stream::unfold(Some(stream), move |stream| async move {
        let mut stream = stream?;
        let idle_ends = tokio::time::Instant::now() + idle;
        let by_deadline = deadline.filter(|&(_, at)| at <= idle_ends);
        let ends = by_deadline.map_or(idle_ends, |(_, at)| at);
        match tokio::time::timeout_at(ends, stream.next()).await {
            Err(_) => {
                let ended = match by_deadline {
                    Some((limit, _)) => StreamError::ended_by_deadline(limit),
                    None => StreamError::ended_stalled(idle),
                };
                Some((Err(Box::new(ended) as BoxError), None))
            }
            Ok(None) => None,
            Ok(Some(Err(error))) => Some((Err(error), None)),
            Ok(Some(Ok(event))) => Some((Ok(event), Some(stream))),
        }
    });
    Ok(Box::pin(
        futures_util::stream::once(async move { Ok(first) }).chain(rest),
    ))
}

/// An `error` object inside a stream (OpenAI's chunk `error`, the `error` of Anthropic's error
/// event), read as the status it stands for: its `code` when that is a status, else the status
/// of its `type` (`overloaded_error` is a 529, `rate_limit_error` a 429, unknown types a 500).
/// The type is kept scrubbed and cut to 100 characters, since the error's message shows it.
pub(crate) fn error_event(error: &serde_json::Value) -> StreamError {
    let message = error
        .get("message")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default();
    let error_type = error
        .get("type")
        .or_else(|| error.get("code"))
        .map(|t| t.as_str().map_or_else(|| t.to_string(), str::to_owned))
        .unwrap_or_else(|| "error".to_owned());
    let status = error
        .get("code")
        .and_then(serde_json::Value::as_u64)
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| (400..600).contains(c))
        .unwrap_or_else(|| crate::classify::status_of_error_type(&error_type));
    StreamError::ErrorEvent {
        error_type: crate::sanitize::scrub(&error_type, MAX_ERROR_TYPE_CHARS),
        http: crate::classify::HttpError::new(status, crate::sanitize::server_message(message)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream that sends a delta every 20 s, inside the default 30 s idle limit, for ever.
    fn endless_drip() -> ChatStream<'static> {
        Box::pin(futures_util::stream::unfold((), |()| async {
            tokio::time::sleep(Duration::from_secs(20)).await;
            Some((Ok(StreamEvent::TextDelta(".".into())), ()))
        }))
    }

    #[tokio::test(start_paused = true)]
    async fn the_default_limits_end_a_stream_that_drips_inside_the_idle_limit() {
        let limits = crate::provider::Settings::new(Duration::from_secs(1)).limits;
        let mut stream = open(endless_drip(), limits).await.unwrap();
        let mut events = 0;
        let error = loop {
            match stream.next().await {
                Some(Ok(_)) => events += 1,
                Some(Err(error)) => break error,
                None => panic!("the stream ended without an error"),
            }
        };
        assert!(events > 1, "the drip kept the idle limit from firing");
        let Some(StreamError::EndedEarly { source }) = error.downcast_ref() else {
            panic!("expected the stream to end early, got {error:?}");
        };
        assert!(
            matches!(
                source.downcast_ref(),
                Some(StreamError::DeadlineExceeded { deadline, .. })
                    if Some(*deadline) == limits.deadline
            ),
            "{source:?}"
        );
        assert!(stream.next().await.is_none(), "nothing after the error");
    }

    #[test]
    fn events_split_anywhere_are_joined() {
        let body = b"event: a\r\ndata: {\"x\":\ndata: 1}\r\n\r\n: ping\n\ndata: [DONE]\n\n";
        for cut in 0..body.len() {
            let mut parser = SseParser::default();
            let mut events = parser.push(&body[..cut]).unwrap();
            events.extend(parser.push(&body[cut..]).unwrap());
            assert_eq!(
                events,
                [
                    SseEvent {
                        event: Some("a".into()),
                        data: "{\"x\":\n1}".into()
                    },
                    SseEvent {
                        event: None,
                        data: "[DONE]".into()
                    }
                ]
            );
        }
    }

    #[test]
    fn an_error_event_type_is_scrubbed_and_bounded_after_its_status_is_read() {
        let hostile = format!("overloaded_error\u{1b}[2J{}", "y".repeat(10_000));
        match error_event(&serde_json::json!({"type": hostile, "message": "m"})) {
            StreamError::ErrorEvent { error_type, http } => {
                assert_eq!(http.status(), 500, "an unknown type is a server error");
                assert!(error_type.chars().count() <= MAX_ERROR_TYPE_CHARS);
                assert!(!error_type.contains('\u{1b}'), "{error_type}");
            }
            other => panic!("expected an error event, got {other:?}"),
        }
        match error_event(&serde_json::json!({"type": "overloaded_error"})) {
            StreamError::ErrorEvent { error_type, http } => {
                assert_eq!(
                    (error_type.as_str(), http.status()),
                    ("overloaded_error", 529)
                );
            }
            other => panic!("expected an error event, got {other:?}"),
        }
    }

    #[test]
    fn oversized_lines_are_malformed() {
        let mut parser = SseParser::default();
        let long = vec![b'a'; MAX_LINE_BYTES + 1];
        assert!(matches!(
            parser.push(&long),
            Err(StreamError::Malformed { .. })
        ));
    }

    #[test]
    fn the_line_cap_counts_every_chunk_of_a_line() {
        let at_cap = format!("data: {}\n\n", "a".repeat(MAX_LINE_BYTES - 6));
        let events = SseParser::default().push(at_cap.as_bytes()).unwrap();
        assert_eq!(events[0].data.len(), MAX_LINE_BYTES - 6);

        let mut parser = SseParser::default();
        let half = vec![b'a'; MAX_LINE_BYTES / 2 + 1];
        parser.push(&half).unwrap();
        let mut rest = half.clone();
        rest.push(b'\n');
        assert!(matches!(
            parser.push(&rest),
            Err(StreamError::Malformed { .. })
        ));
    }
}
