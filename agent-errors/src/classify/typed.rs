//! Typed facts: what one level of an error chain is, read by downcasting to known types.

use std::error::Error;
use std::io;
use std::time::Duration;

use super::{Classification, ErrorKind, Evidence, HttpError};

/// A level of the chain whose type the classifier knows. Identifying it is a few downcasts;
/// reading its full classification (headers, dates) is left until it is known to matter.
#[derive(Clone, Copy)]
pub(super) enum Known<'a> {
    Http(&'a HttpError),
    Io(&'a io::Error),
    Elapsed,
    Json(&'a serde_json::Error),
    #[cfg(feature = "reqwest")]
    Reqwest(&'a reqwest::Error),
    #[cfg(feature = "rig")]
    RigProvider(&'a rig_core::error::ProviderError),
    #[cfg(feature = "rig")]
    RigTool(&'a rig_core::tool::ToolExecutionError),
}

impl<'a> Known<'a> {
    pub(super) fn of(level: &'a (dyn Error + 'static)) -> Option<Self> {
        if let Some(io) = level.downcast_ref::<io::Error>() {
            return Some(Known::Io(io));
        }
        if let Some(http) = level.downcast_ref::<HttpError>() {
            return Some(Known::Http(http));
        }
        if level.is::<tokio::time::error::Elapsed>() {
            return Some(Known::Elapsed);
        }
        if let Some(json) = level.downcast_ref::<serde_json::Error>() {
            return Some(Known::Json(json));
        }
        #[cfg(feature = "reqwest")]
        if let Some(err) = level.downcast_ref::<reqwest::Error>() {
            return Some(Known::Reqwest(err));
        }
        #[cfg(feature = "rig")]
        if let Some(err) = level.downcast_ref::<rig_core::error::ProviderError>() {
            return Some(Known::RigProvider(err));
        }
        #[cfg(feature = "rig")]
        if let Some(err) = level.downcast_ref::<rig_core::tool::ToolExecutionError>() {
            return Some(Known::RigTool(err));
        }
        None
    }

    /// The kind alone. `Unknown` is not conclusive: the levels around it get their say.
    pub(super) fn kind(self) -> ErrorKind {
        match self {
            Known::Http(http) => super::http::status_kind(http.status()).0,
            Known::Io(io) => ErrorKind::from(io.kind()),
            Known::Elapsed => ErrorKind::Timeout,
            // An I/O failure while reading JSON is about the I/O: its source says which.
            Known::Json(json) if json.is_io() => ErrorKind::Unknown,
            Known::Json(_) => ErrorKind::Validation,
            #[cfg(feature = "reqwest")]
            Known::Reqwest(err) => reqwest_kind(err),
            #[cfg(feature = "rig")]
            Known::RigProvider(_) | Known::RigTool(_) => {
                self.classification(super::DEFAULT_RETRY_AFTER_CAP).kind
            }
        }
    }

    /// Whether this level carries an HTTP status.
    pub(super) fn has_status(self) -> bool {
        match self {
            Known::Http(_) => true,
            #[cfg(feature = "reqwest")]
            Known::Reqwest(err) => err.status().is_some(),
            #[cfg(feature = "rig")]
            Known::RigProvider(err) => super::rig::http_view(err).is_some(),
            #[cfg(feature = "rig")]
            Known::RigTool(err) => err.http_status().is_some(),
            _ => false,
        }
    }

    /// Whether the levels below may still overrule this one.
    pub(super) fn descend(self) -> bool {
        match self {
            // The server answered with a body we cannot read. The serde_json error inside
            // describes the response, not the model's arguments, so it must not make this
            // `Validation`.
            #[cfg(feature = "reqwest")]
            Known::Reqwest(err) => !(err.status().is_none() && err.is_decode()),
            // rig's own classification is the whole fact: what lies below (a JSON error
            // about a reply, a tool's source) must not overrule it, nor its text be read.
            #[cfg(feature = "rig")]
            Known::RigProvider(_) => false,
            _ => true,
        }
    }

    /// What the server said about retrying (`x-should-retry`), as opposed to the status table.
    pub(super) fn server_verdict(self) -> Option<bool> {
        match self {
            Known::Http(http) => http.server_verdict(),
            #[cfg(feature = "rig")]
            Known::RigProvider(err) => super::rig::http_view(err)?.server_verdict(),
            _ => None,
        }
    }

    /// Everything this level says, `Retry-After` capped at `retry_after_cap`.
    pub(super) fn classification(self, retry_after_cap: Duration) -> Classification {
        let typed = |name| Classification::new(self.kind(), Evidence::Type(name));
        match self {
            Known::Http(http) => http.classification(retry_after_cap),
            Known::Io(_) => typed("std::io::Error"),
            Known::Elapsed => typed("tokio::time::error::Elapsed"),
            Known::Json(_) => typed("serde_json::Error"),
            #[cfg(feature = "reqwest")]
            Known::Reqwest(err) => match err.status() {
                Some(status) => Classification::from_status(status.as_u16()),
                None => typed("reqwest::Error"),
            },
            #[cfg(feature = "rig")]
            Known::RigProvider(err) => super::rig::provider_classification(err, retry_after_cap),
            #[cfg(feature = "rig")]
            Known::RigTool(err) => super::rig::tool_classification(err, retry_after_cap),
        }
    }

    /// The next level down. For an `io::Error` wrapping a custom error that is the wrapped
    /// error itself, which `io::Error::source` skips.
    pub(super) fn next(
        self,
        level: &'a (dyn Error + 'static),
    ) -> Option<&'a (dyn Error + 'static)> {
        match self {
            Known::Io(io) => match io.get_ref() {
                Some(inner) => Some(inner),
                None => level.source(),
            },
            _ => level.source(),
        }
    }
}

#[cfg(feature = "reqwest")]
fn reqwest_kind(err: &reqwest::Error) -> ErrorKind {
    if let Some(status) = err.status() {
        return super::http::status_kind(status.as_u16()).0;
    }
    if err.is_timeout() {
        ErrorKind::Timeout
    } else if err.is_connect() || err.is_request() || err.is_body() {
        // Sending failed or the connection broke mid-answer: nothing the caller got wrong.
        ErrorKind::Transient
    } else if err.is_decode() {
        ErrorKind::ServerError
    } else if err.is_builder() {
        // The request could not be built: usually a bad URL taken from the arguments.
        ErrorKind::Validation
    } else {
        ErrorKind::Unknown
    }
}

impl From<io::ErrorKind> for ErrorKind {
    /// The kind an I/O failure stands for. `Other` and kinds that say nothing about recovery are
    /// [`ErrorKind::Unknown`].
    fn from(kind: io::ErrorKind) -> Self {
        use io::ErrorKind as Io;
        match kind {
            Io::TimedOut => ErrorKind::Timeout,
            Io::ConnectionRefused
            | Io::ConnectionReset
            | Io::ConnectionAborted
            | Io::NotConnected
            | Io::BrokenPipe
            | Io::Interrupted
            | Io::WouldBlock
            | Io::UnexpectedEof
            | Io::HostUnreachable
            | Io::NetworkUnreachable
            | Io::NetworkDown
            | Io::AddrInUse
            | Io::ResourceBusy => ErrorKind::Transient,
            Io::PermissionDenied => ErrorKind::Auth,
            Io::NotFound => ErrorKind::NotFound,
            Io::InvalidInput
            | Io::InvalidData
            | Io::AlreadyExists
            | Io::NotADirectory
            | Io::IsADirectory
            | Io::DirectoryNotEmpty
            | Io::FileTooLarge => ErrorKind::Validation,
            _ => ErrorKind::Unknown,
        }
    }
}
