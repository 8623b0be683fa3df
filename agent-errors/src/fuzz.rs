//! Entry points for the fuzz targets in `fuzz/`: readers of hostile input that are private to
//! the crate. Compiled only in a build by cargo-fuzz, which sets `--cfg fuzzing`; not public
//! API.

use crate::error::ToolError;

/// The executor's check, before a hook or a tool sees them, that arguments give no key twice.
pub fn reject_duplicate_keys(raw: &str) -> Result<(), ToolError> {
    crate::arguments::reject_duplicate_keys(raw)
}

/// How a tool's arguments are read into its parameter type `A`.
pub fn parse_args<A: serde::de::DeserializeOwned>(raw: &str) -> Result<A, ToolError> {
    crate::arguments::parse_args(raw)
}

/// The longest SSE line the reader accepts.
#[cfg(feature = "_provider")]
pub const MAX_SSE_LINE_BYTES: usize = crate::stream::guard::MAX_LINE_BYTES;

/// The largest SSE event (its `data`) the reader accepts.
#[cfg(feature = "_provider")]
pub const MAX_SSE_EVENT_BYTES: usize = crate::stream::guard::MAX_EVENT_BYTES;

/// Feeds `chunks`, in order, to one SSE reader: each event's `event:` name and `data`, or the
/// text of the error that ended the stream.
#[cfg(feature = "_provider")]
pub fn read_sse<'a>(
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> Result<Vec<(Option<String>, String)>, String> {
    let mut reader = crate::stream::guard::SseParser::default();
    let mut events = Vec::new();
    for chunk in chunks {
        let read = reader.push(chunk).map_err(|error| error.to_string())?;
        events.extend(read.into_iter().map(|event| (event.event, event.data)));
    }
    Ok(events)
}
