//! rig's typed failures, read by what they are: a model call's [`ProviderError`] by its variant,
//! status, headers (`Retry-After`, `x-should-retry`) and machine code, and a rig tool's
//! [`ToolExecutionError`] by its [`ToolErrorKind`], status and retryable flag. Never by their
//! text: a provider's body is the server's words, and a tool's message is its author's.

use std::time::Duration;

use rig_core::ProviderResponseError;
use rig_core::error::{ErrorKind as RigKind, ErrorReport, ProviderError};
use rig_core::tool::{ToolErrorKind, ToolExecutionError};

use super::{Classification, ErrorKind, Evidence, HttpError};

/// The headers a retry reads; nothing else of a provider's reply is copied.
const RETRY_HEADERS: [&str; 3] = ["retry-after", "retry-after-ms", "x-should-retry"];

/// The longest machine code kept: codes are identifiers, a longer one is not a code.
const MAX_CODE_CHARS: usize = 64;

/// A provider's failure as an [`HttpError`], when it carries a status or a machine code that
/// stands for one: the status, the retry headers, and the code as its message (so a code such
/// as `insufficient_quota` or `overloaded_error` is read as the openai and anthropic providers
/// read theirs). The body is left out.
pub(crate) fn http_view(error: &ProviderError) -> Option<HttpError> {
    let reply = error.provider_response();
    let code = reply.and_then(machine_code);
    let status = reply
        .and_then(|reply| reply.status)
        .filter(|status| !status.is_success())
        .map(|status| status.as_u16())
        .or_else(|| code.as_deref().and_then(status_of_code))
        .or_else(|| relayed_status(error))
        .or(match error {
            // Rejected credentials always name 401 or 403; a reply kept without one is a 401.
            ProviderError::InvalidAuthentication(_) => Some(401),
            _ => None,
        })?;
    let mut http = HttpError::new(status, code.unwrap_or_default());
    if let Some(headers) = reply.and_then(|reply| reply.headers.as_ref()) {
        for name in RETRY_HEADERS {
            for value in headers.get_all(name) {
                if let Ok(value) = value.to_str() {
                    http = http.with_header(name, value);
                }
            }
        }
    }
    Some(http)
}

fn machine_code(reply: &ProviderResponseError) -> Option<String> {
    reply
        .machine_code()
        .filter(|code| code.len() <= MAX_CODE_CHARS && !code.contains(char::is_whitespace))
}

fn relayed_status(error: &ProviderError) -> Option<u16> {
    match error {
        ProviderError::Relayed(report) => report.http_status.filter(|s| !(200..300).contains(s)),
        _ => None,
    }
}

/// The status a provider's machine code stands for, when the reply carried none: gRPC status
/// names (Vertex, Gemini), AWS exception types (Bedrock), and the error types the chat APIs
/// share (`overloaded_error`, `rate_limit_error`, ...). Unknown codes stand for nothing.
fn status_of_code(code: &str) -> Option<u16> {
    Some(match code {
        "INVALID_ARGUMENT"
        | "FAILED_PRECONDITION"
        | "OUT_OF_RANGE"
        | "ValidationException"
        | "invalid_request_error" => 400,
        "UNAUTHENTICATED"
        | "UnrecognizedClientException"
        | "ExpiredTokenException"
        | "authentication_error" => 401,
        "billing_error" | "insufficient_quota" => 402,
        "PERMISSION_DENIED" | "AccessDeniedException" | "permission_error" => 403,
        "NOT_FOUND" | "ResourceNotFoundException" | "not_found_error" => 404,
        "ABORTED" => 409,
        "request_too_large" => 413,
        "RESOURCE_EXHAUSTED"
        | "ThrottlingException"
        | "rate_limit_error"
        | "rate_limit_exceeded" => 429,
        "INTERNAL" | "InternalServerException" | "ModelErrorException" | "api_error" => 500,
        "UNIMPLEMENTED" => 501,
        "UNAVAILABLE" | "ServiceUnavailableException" | "ModelNotReadyException" => 503,
        "DEADLINE_EXCEEDED" | "ModelTimeoutException" | "timeout_error" => 504,
        "overloaded_error" => 529,
        _ => return None,
    })
}

/// What a provider's failure is. A status (or a code standing for one) is read as any HTTP
/// failure is; without one, the variant decides, and rig's own retry verdict says whether
/// calling again can help.
pub(crate) fn provider_classification(error: &ProviderError, cap: Duration) -> Classification {
    if let Some(http) = http_view(error) {
        let mut class = http.classification(cap);
        // A refusal is the provider's verdict on the content: final whatever the status.
        if error.provider_response().is_some_and(|reply| reply.refusal) {
            class.should_retry = Some(false);
        }
        return class;
    }
    let mut class = Classification::new(
        provider_kind(error),
        Evidence::Type("rig_core::error::ProviderError"),
    );
    if !class.kind.is_retryable() || !error.is_retryable() {
        class.should_retry = Some(false);
    }
    class
}

/// The kind of a failure that carries no status.
fn provider_kind(error: &ProviderError) -> ErrorKind {
    match error {
        ProviderError::InvalidAuthentication(_) => ErrorKind::Auth,
        ProviderError::CacheExpired { .. } => ErrorKind::NotFound,
        ProviderError::Relayed(report) => report_kind(report),
        // Nothing came back, or the reply broke off: the transport's own verdict says whether
        // it was passing.
        ProviderError::Http(_) | ProviderError::Truncated if error.is_retryable() => {
            ErrorKind::Transient
        }
        ProviderError::ProviderResponse(reply) if reply.transient == Some(true) => {
            ErrorKind::Transient
        }
        // The request could not be built or asks for what the model cannot do: sending it
        // again, here or to another model of the same shape, fails the same way.
        ProviderError::Request(_)
        | ProviderError::Url(_)
        | ProviderError::UnsupportedOption(_)
        | ProviderError::MismatchedDimensions { .. } => ErrorKind::Validation,
        _ => kind_of(error.kind()),
    }
}

fn report_kind(report: &ErrorReport) -> ErrorKind {
    match (report.kind, report.retryable) {
        (RigKind::Http | RigKind::ProviderResponse, true) => ErrorKind::Transient,
        (kind, _) => kind_of(kind),
    }
}

/// rig's coarse classification, for a failure nothing finer describes.
fn kind_of(kind: RigKind) -> ErrorKind {
    match kind {
        RigKind::Timeout => ErrorKind::Timeout,
        RigKind::Request | RigKind::Url => ErrorKind::Validation,
        RigKind::Denied => ErrorKind::Auth,
        RigKind::HandlerUnavailable => ErrorKind::NotFound,
        RigKind::Internal | RigKind::Divergence => ErrorKind::Bug,
        RigKind::Tool(kind) => tool_kind(kind),
        // A reply that could not be read, or a failure the provider reported without a status:
        // the far side's fault, and (rig's verdict) not worth calling again unchanged.
        RigKind::Http
        | RigKind::Json
        | RigKind::Response
        | RigKind::Provider
        | RigKind::ProviderResponse => ErrorKind::ServerError,
        RigKind::MemoryBackend
        | RigKind::MemoryPolicy
        | RigKind::Cancelled
        | RigKind::BusClosed
        | RigKind::Other => ErrorKind::Unknown,
    }
}

/// The kind a rig tool's own classification stands for.
fn tool_kind(kind: ToolErrorKind) -> ErrorKind {
    match kind {
        ToolErrorKind::InvalidArgs => ErrorKind::Validation,
        ToolErrorKind::Timeout => ErrorKind::Timeout,
        ToolErrorKind::NotFound => ErrorKind::NotFound,
        ToolErrorKind::PermissionDenied => ErrorKind::Auth,
        ToolErrorKind::RateLimited => ErrorKind::Quota,
        ToolErrorKind::Provider => ErrorKind::ServerError,
        ToolErrorKind::Network => ErrorKind::Transient,
        // A cancelled call is not a fault of any kind the ladder can act on.
        ToolErrorKind::Cancelled | ToolErrorKind::Other => ErrorKind::Unknown,
    }
}

/// What a rig tool's failure tells the model: its model feedback, else its kind in words. Its
/// message is for operators (rig keeps it from the model): it may hold a source error's details.
pub(crate) fn tool_feedback(error: &ToolExecutionError) -> String {
    error
        .model_feedback()
        .map_or_else(|| error.kind().as_str().replace('_', " "), str::to_owned)
}

/// A rig tool's failure as an [`HttpError`], when it names a status.
pub(crate) fn tool_http_view(error: &ToolExecutionError) -> Option<HttpError> {
    let status = error.http_status()?;
    let code = error.code().filter(|code| code.len() <= MAX_CODE_CHARS);
    Some(HttpError::new(status, code.unwrap_or_default()))
}

/// What a rig tool's failure is: its status when it names one, else its kind; its retryable
/// flag, when set, has the last word on calling again (a refusal never is).
pub(crate) fn tool_classification(error: &ToolExecutionError, cap: Duration) -> Classification {
    let mut class = match tool_http_view(error) {
        Some(http) => http.classification(cap),
        None => Classification::new(
            tool_error_kind(error),
            Evidence::Type("rig_core::tool::ToolExecutionError"),
        ),
    };
    if error.is_refusal() || error.retryable() == Some(false) {
        class.should_retry = Some(false);
    }
    class
}

/// The kind of a rig tool's failure without a status: its own kind, and for `other` or
/// `provider` failures the tool marked retryable, a passing fault.
fn tool_error_kind(error: &ToolExecutionError) -> ErrorKind {
    match (tool_kind(error.kind()), error.retryable()) {
        (ErrorKind::Unknown, Some(true)) => ErrorKind::Transient,
        (kind, _) => kind,
    }
}
