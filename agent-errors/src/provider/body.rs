//! Reading a response body under a size cap, chunk by chunk as it arrives: a server (or a proxy
//! in front of it) that sends a 10 MB error page or 50 MB of tool-call arguments costs at most
//! the cap in memory, and the connection is dropped as soon as the cap is passed instead of
//! being drained.

/// The most of a successful (non-streamed) answer read by default: far above any real chat
/// completion, far below what would hurt.
pub(crate) const DEFAULT_MAX_RESPONSE_BYTES: usize = 8 * 1024 * 1024;

/// A body read up to a cap.
#[derive(Debug)]
pub(crate) struct CappedBody {
    /// The bytes read, at most the cap.
    pub(crate) bytes: Vec<u8>,
    /// Whether the body went on past the cap (the rest was never read).
    pub(crate) cut: bool,
}

/// Reads `response`'s body until it ends or passes `cap` bytes. Past the cap the response is
/// dropped, which closes the connection: the rest is never read.
pub(crate) async fn read_capped(
    mut response: reqwest::Response,
    cap: usize,
) -> Result<CappedBody, reqwest::Error> {
    let announced = response
        .content_length()
        .and_then(|n| usize::try_from(n).ok());
    let mut bytes = Vec::with_capacity(announced.unwrap_or(0).min(cap));
    while let Some(chunk) = response.chunk().await? {
        let room = cap - bytes.len();
        if chunk.len() > room {
            bytes.extend_from_slice(&chunk[..room]);
            return Ok(CappedBody { bytes, cut: true });
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(CappedBody { bytes, cut: false })
}

/// What an error keeps of a success body it could not read: the first 64 KiB, redacted (a body
/// that echoes a key back must not put it in a log).
pub(crate) fn excerpt(body: &[u8]) -> String {
    let body = super::lossy_prefix(body, super::MAX_ERROR_BODY_BYTES);
    crate::redact::redact(&body).into_owned()
}

/// Why a success body that did not parse is broken rather than of the wrong shape: it broke off
/// or is not JSON at all (`Some`, an `UnexpectedEof` error that `classify` calls transient), or
/// it is valid JSON the provider does not understand (`None`: asking again will not help).
pub(crate) fn broke_off(error: &serde_json::Error) -> Option<std::io::Error> {
    match error.classify() {
        serde_json::error::Category::Data => None,
        _ => Some(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "the answer is not whole JSON",
        )),
    }
}
