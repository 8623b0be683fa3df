//! Whether a failure shows that the request never reached the service: the connection was
//! refused, or the host's name did not resolve. Such a call did nothing anywhere, so calling
//! again cannot apply its effect twice, whatever the tool does.

use std::error::Error;
use std::io;
use std::sync::LazyLock;

use regex::Regex;

use super::chain;

/// The most of one level's message that is read: the phrases sit at the start of what a
/// client library writes, and a long error page is not searched to its end.
const MAX_CHARS: usize = 2048;

/// What clients write when a connection was refused or a name did not resolve: libc's and
/// Windows' words, hyper's, reqwest's, curl's, Go's, Node's.
static PHRASES: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)(?-u:\b)(?:connection refused|econnrefused|actively refused|dns error|failed to lookup address|name or service not known|nodename nor servname|no such host|could not resolve (?:host|hostname)|temporary failure in name resolution|name resolution failed|getaddrinfo|enotfound)(?-u:\b)",
    )
    .expect("the phrases are a constant covered by unit tests")
});

/// Whether any level of `error` shows that the request never reached the service.
pub(crate) fn never_reached(error: &(dyn Error + 'static)) -> bool {
    chain(error).any(level_never_reached)
}

fn level_never_reached(level: &(dyn Error + 'static)) -> bool {
    if let Some(io) = level.downcast_ref::<io::Error>() {
        if matches!(io.kind(), io::ErrorKind::ConnectionRefused) {
            return true;
        }
    }
    #[cfg(feature = "reqwest")]
    if let Some(error) = level.downcast_ref::<reqwest::Error>() {
        // reqwest says `is_connect` only when no connection was made: nothing was sent.
        if error.is_connect() {
            return true;
        }
    }
    let text = level.to_string();
    let bounded = match text.char_indices().nth(MAX_CHARS) {
        Some((end, _)) => &text[..end],
        None => &text,
    };
    PHRASES.is_match(bounded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_and_unresolved_never_reached_the_service() {
        let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
        assert!(never_reached(&refused));
        for said in [
            "error sending request: connection refused (os error 111)",
            "dns error: failed to lookup address information: Name or service not known",
            "getaddrinfo ENOTFOUND api.example.com",
            "dial tcp: lookup api.example.com: no such host",
            "Could not resolve host: api.example.com",
        ] {
            assert!(never_reached(&io::Error::other(said)), "{said}");
        }
    }

    #[test]
    fn failures_after_sending_may_have_reached_it() {
        for said in [
            "connection reset by peer",
            "operation timed out",
            "HTTP 503 service unavailable",
            "the order was refused: connection refusedness is not a word",
            "",
        ] {
            let error = io::Error::other(said);
            assert!(!never_reached(&error), "{said}");
        }
        let reset = io::Error::from(io::ErrorKind::ConnectionReset);
        assert!(!never_reached(&reset));
    }
}
