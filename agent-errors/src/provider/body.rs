//! Reading a response body without trusting its size: chunk by chunk, up to a cap.

/// The largest answer body read (8 MiB): far above the longest answer a model writes in one
/// call (a reply of 128k tokens is under 1 MiB of JSON), far below what would hurt the process.
pub(crate) const MAX_ANSWER_BYTES: usize = 8 * 1024 * 1024;

/// A body read up to a cap.
pub(crate) struct CappedBody {
    /// The bytes read, at most the cap.
    pub(crate) bytes: Vec<u8>,
    /// Whether the body went on past the cap (and was not read further).
    pub(crate) truncated: bool,
}

/// Reads at most `cap` bytes of the body, a chunk at a time, so a server that sends an endless
/// or huge body costs at most `cap` bytes of memory.
pub(crate) async fn read_capped(
    response: &mut reqwest::Response,
    cap: usize,
) -> Result<CappedBody, reqwest::Error> {
    let mut bytes = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        let room = cap.saturating_sub(bytes.len());
        if chunk.len() > room {
            bytes.extend_from_slice(&chunk[..room]);
            return Ok(CappedBody {
                bytes,
                truncated: true,
            });
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(CappedBody {
        bytes,
        truncated: false,
    })
}
